package demo

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/policy"
	"github.com/switchyard/switchyard/router"
)

func testGateway(t *testing.T) *router.Gateway {
	t.Helper()
	cfg, err := policy.Load("t.yaml", []byte(`version: 1
pools:
  p: {model: m, health: {disabled: true}, replicas: [{name: r1, url: "http://127.0.0.1:1"}]}
routes:
  - {name: d, to: p}
`), router.LoadOptions())
	if err != nil {
		t.Fatal(err)
	}
	g, err := router.New(cfg, router.Options{Passive: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	return g
}

// TestScreenRedrawsInPlace: on a terminal the table is redrawn over the
// last one (cursor up by exactly its line count, every line cut to the
// width, so wrapping cannot leave stale rows), and a failed request shows
// as an event naming its API and why.
func TestScreenRedrawsInPlace(t *testing.T) {
	var out bytes.Buffer
	rec := NewRecorder()
	s := &screen{w: &out, terminal: true, width: 60, rec: rec, g: testGateway(t)}
	now := rec.started.Add(3 * time.Second)
	rec.Add(Result{API: "chat", Kind: "short", Pool: "p", Status: 200, At: now.Add(-time.Second), Latency: time.Millisecond})
	rec.Add(Result{API: "responses", Kind: "tool", Stream: true, Pool: "p", Status: 200, Err: "the stream was interrupted", At: now.Add(-time.Second)})
	s.tick(now)
	first := out.String()
	lines := strings.Count(first, "\n")
	if strings.Contains(first, "\x1b[") || lines < 8 {
		t.Fatalf("first draw:\n%s", first)
	}
	for _, l := range strings.Split(first, "\n") {
		if n := len([]rune(l)); n > 59 {
			t.Errorf("a line of %d runes on a 60-column terminal: %q", n, l)
		}
	}
	if !strings.Contains(first, "failed: responses tool stream (pool p): the str") {
		t.Errorf("the failure is not an event:\n%s", first)
	}
	out.Reset()
	s.tick(now.Add(time.Second))
	if want := "\x1b[" + strconv.Itoa(lines) + "A\x1b[J"; !strings.HasPrefix(out.String(), want) {
		t.Errorf("the redraw starts %q, want %q", out.String()[:min(12, out.Len())], want)
	}
}

// TestScreenWithoutTerminal: without a terminal there is no cursor
// movement, one line every few seconds, and events as lines of their own.
func TestScreenWithoutTerminal(t *testing.T) {
	var out bytes.Buffer
	rec := NewRecorder()
	s := &screen{w: &out, rec: rec, g: testGateway(t), lastLine: rec.started}
	for i := 1; i <= 12; i++ {
		s.tick(rec.started.Add(time.Duration(i) * time.Second))
	}
	if strings.Contains(out.String(), "\x1b[") || strings.Count(out.String(), "req/s") != 2 {
		t.Errorf("12 s without a terminal:\n%s", out.String())
	}
	s.event(4*time.Second, "killed r1")
	if !strings.HasSuffix(out.String(), "   4s  killed r1\n") {
		t.Errorf("event line: %q", out.String())
	}
}
