package demo_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/demo"
)

// TestDemoHeadless runs the demo for 200 requests (as many seconds as the
// machine needs: a count, not a rate, so that a loaded machine passes) and
// checks its summary: traffic on both pools, every route class present, no
// errors.
func TestDemoHeadless(t *testing.T) {
	var out bytes.Buffer
	s, err := demo.Run(context.Background(), demo.Options{
		Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:0", Duration: 3 * time.Minute, Requests: 200, Workers: 8, Out: &out,
	})
	if err != nil {
		t.Fatal(err)
	}
	// The load's workers may each finish a request after the 200th.
	if s.Requests < 200 || s.Requests > 200+8 {
		t.Errorf("%d requests, want 200 (and at most one more per worker)", s.Requests)
	}
	if s.Errors != 0 {
		t.Errorf("%d errors; first: %s", s.Errors, s.FirstError)
	}
	if s.ByPool["qwen"] == 0 || s.ByPool["minicpm"] == 0 {
		t.Errorf("traffic by pool %v, want both pools", s.ByPool)
	}
	if s.ByPool["minicpm"] <= s.ByPool["qwen"] {
		t.Errorf("the small pool should take most traffic: %v", s.ByPool)
	}
	for _, route := range []string{"side", "default", "complex"} {
		if s.ByRoute[route] == 0 {
			t.Errorf("no traffic on route %q: %v", route, s.ByRoute)
		}
	}
	text := out.String()
	if !strings.HasPrefix(text, "switchyard demo: starting ") {
		t.Errorf("the first line does not say the demo is starting:\n%s", text)
	}
	for _, want := range []string{"gateway on http://127.0.0.1:", "for the 8-node cluster", "stopping after 3m0s.",
		"req/s", "summary:", "minicpm", "qwen"} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	for _, bad := range []string{"a 8-node", "Ctrl-C"} {
		if strings.Contains(text, bad) {
			t.Errorf("output has %q:\n%s", bad, text)
		}
	}
	// The banner explains only what the live view shows: the classes, and
	// their legend, are in the summary only.
	summary := strings.Index(text, "summary:")
	if legend := strings.Index(text, demo.ClassLegend); legend >= 0 && legend < summary {
		t.Errorf("the class legend comes before the summary:\n%s", text)
	}
	if classes := strings.Index(text, "classes"); classes >= 0 && classes < summary {
		t.Errorf("classes are named before the summary, where the live view has none:\n%s", text)
	}
}

// TestDemoStopHint: "Ctrl-C to stop" only when the demo runs until
// interrupted; with --duration it says when it stops.
func TestDemoStopHint(t *testing.T) {
	tests := []struct {
		name     string
		duration time.Duration
		want     string
	}{
		{"until interrupted", 0, "No load (--no-load); Ctrl-C to stop."},
		{"duration", time.Millisecond, "No load (--no-load); stopping after 1ms."},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			// Interrupt as soon as the hint is out, as a user would.
			out := &hintWriter{stop: cancel}
			_, err := demo.Run(ctx, demo.Options{Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:0",
				NoLoad: true, Duration: tc.duration, Out: out})
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out.String(), tc.want) {
				t.Errorf("output lacks %q:\n%s", tc.want, out)
			}
		})
	}
}

// hintWriter calls stop once the run has said how it stops.
type hintWriter struct {
	bytes.Buffer
	stop func()
}

func (w *hintWriter) Write(p []byte) (int, error) {
	n, err := w.Buffer.Write(p)
	if strings.Contains(string(p), "No load") {
		w.stop()
	}
	return n, err
}

// TestDemoKill: --kill crashes the named replica mid-run; an unknown name
// is refused before anything starts.
func TestDemoKill(t *testing.T) {
	var out bytes.Buffer
	s, err := demo.Run(context.Background(), demo.Options{
		Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:0", Duration: 2 * time.Second, Workers: 8, Out: &out,
		Kill: "qwen-b", KillAfter: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "killed qwen-b: ") {
		t.Errorf("no kill line:\n%s", out.String())
	}
	// Streams of every API are resumed; one cut inside a tool call (not
	// resumable) may fail, and each failure is reported with its API and
	// why.
	if s.Errors > 0 && !strings.Contains(s.FirstError, "interrupted") {
		t.Errorf("%d errors; first: %s", s.Errors, s.FirstError)
	}
	n := 0
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(line, "  failed: ") { // the summary's list
			n++
		}
	}
	if n != min(s.Errors, 10) {
		t.Errorf("%d failures listed for %d errors:\n%s", n, s.Errors, out.String())
	}
	if _, err := demo.Run(context.Background(), demo.Options{Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:0",
		Duration: time.Second, Kill: "nope", Out: &out}); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("unknown replica: %v", err)
	}
}
