package recorder

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/polltest"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Millisecond) // every file name differs
	return c.t
}

func newRecorder(t *testing.T, c *Config, rnd func() float64) (*Recorder, *prometheus.CounterVec, prometheus.Counter) {
	t.Helper()
	dropped := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "d"}, []string{"reason"})
	written := prometheus.NewCounter(prometheus.CounterOpts{Name: "w"})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	clk := &clock{t: time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)}
	r := New(slog.New(slog.NewTextHandler(io.Discard, nil)), rnd, clk.Now, dropped, written)
	r.Configure(ctx, c)
	return r, dropped, written
}

func count(t *testing.T, c prometheus.Collector) float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 10)
	c.Collect(ch)
	close(ch)
	total := 0.0
	for m := range ch {
		var d dto.Metric
		m.Write(&d)
		total += d.GetCounter().GetValue()
	}
	return total
}

// waitWritten waits until n lines were written or dropped (the writer is
// a goroutine: no sleep decides the test, only the counts).
func waitWritten(t *testing.T, written, dropped prometheus.Collector, n float64) {
	t.Helper()
	polltest.Eventually(t, 30*time.Second, fmt.Sprintf("%v lines written or dropped", n), func() bool {
		return count(t, written)+count(t, dropped) >= n
	})
}

func readLines(t *testing.T, dir string) []string {
	t.Helper()
	names, _ := filepath.Glob(filepath.Join(dir, "capture-*.jsonl"))
	var out []string
	for _, n := range names {
		f, err := os.Open(n)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			out = append(out, sc.Text())
		}
		f.Close()
	}
	return out
}

// TestRecordsChosenKeysWithoutSecrets: a chosen key's requests are
// written in the capture format with the kept headers only: never the
// authorization or an API key header; other keys' are not.
func TestRecordsChosenKeysWithoutSecrets(t *testing.T) {
	dir := t.TempDir()
	r, dropped, written := newRecorder(t, &Config{Dir: dir, Keys: []string{"agents"}, MaxFileBytes: 1 << 20, MaxFiles: 3,
		Headers: []string{"x-session-id", "anthropic-version"}}, func() float64 { return 1 })
	h := http.Header{}
	h.Set("Authorization", "Bearer sk-secret-1")
	h.Set("X-Api-Key", "sk-secret-2")
	h.Set("X-Session-Id", "ses_1")
	r.Offer("agents", "/v1/chat/completions", h, []byte(`{"model":"auto","messages":[]}`))
	r.Offer("other", "/v1/chat/completions", h, []byte(`{"model":"auto"}`))
	r.Offer("", "/v1/chat/completions", h, []byte(`{"model":"auto"}`))
	waitWritten(t, written, dropped, 1)
	lines := readLines(t, dir)
	if len(lines) != 1 {
		t.Fatalf("%d lines: %v", len(lines), lines)
	}
	want := `{"path":"/v1/chat/completions","headers":{"X-Session-Id":"ses_1"},"body":{"model":"auto","messages":[]}}`
	if lines[0] != want {
		t.Errorf("line %s\nwant %s", lines[0], want)
	}
	if strings.Contains(lines[0], "sk-secret") {
		t.Error("a key was written")
	}
}

// TestSampleAndRotation: the sample draws its share; files rotate at the
// size bound and at most MaxFiles are kept.
func TestSampleAndRotation(t *testing.T) {
	dir := t.TempDir()
	n := 0
	r, dropped, written := newRecorder(t, &Config{Dir: dir, Sample: 0.5, MaxFileBytes: 4096, MaxFiles: 3}, func() float64 {
		n++
		return float64(n%2) * 0.9 // 0.9, 0, 0.9, 0, …: every other request
	})
	body := []byte(`{"model":"auto","messages":[{"role":"user","content":"` + strings.Repeat("x", 900) + `"}]}`)
	for range 40 {
		r.Offer("", "/v1/chat/completions", http.Header{}, body)
	}
	waitWritten(t, written, dropped, 20)
	names, _ := filepath.Glob(filepath.Join(dir, "capture-*.jsonl"))
	if len(names) != 3 {
		t.Errorf("%d files kept, want 3", len(names))
	}
	for _, name := range names {
		if st, _ := os.Stat(name); st.Size() > 4096 {
			t.Errorf("%s: %d bytes, over the bound", name, st.Size())
		}
	}
	if w := count(t, written); w != 20 {
		t.Errorf("%v written, want 20 (half of 40)", w)
	}
}

// TestUnwritableNeverBlocks: with a folder that cannot be written (a file
// stands where it should be), requests are offered at once, and every
// line is dropped, counted as write_error.
func TestUnwritableNeverBlocks(t *testing.T) {
	blocker := filepath.Join(t.TempDir(), "not-a-dir")
	os.WriteFile(blocker, nil, 0o644)
	r, dropped, written := newRecorder(t, &Config{Dir: filepath.Join(blocker, "sub"), Sample: 1, MaxFileBytes: 1 << 20, MaxFiles: 2}, func() float64 { return 0 })
	for range 10000 {
		r.Offer("", "/v1/chat/completions", http.Header{}, []byte(`{"model":"auto"}`))
	}
	waitWritten(t, written, dropped, 10000)
	if w := count(t, written); w != 0 {
		t.Errorf("%v written", w)
	}
	var d dto.Metric
	dropped.WithLabelValues("write_error").Write(&d)
	q := dto.Metric{}
	dropped.WithLabelValues("queue_full").Write(&q)
	if d.GetCounter().GetValue()+q.GetCounter().GetValue() != 10000 || d.GetCounter().GetValue() == 0 {
		t.Errorf("dropped write_error %v queue_full %v, want 10000 in all", d.GetCounter().GetValue(), q.GetCounter().GetValue())
	}
}

// TestOffWritesNothing: without a config nothing is recorded.
func TestOffWritesNothing(t *testing.T) {
	r, _, written := newRecorder(t, nil, func() float64 { return 0 })
	r.Offer("agents", "/v1/chat/completions", http.Header{}, []byte(`{}`))
	if r.Queued() != 0 || count(t, written) != 0 {
		t.Error("recorded while off")
	}
}

// TestFullDiskNeverBlocks: a disk that answers every write with ENOSPC
// (Linux's /dev/full) drops the lines, counted, and never blocks an
// Offer.
func TestFullDiskNeverBlocks(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full on this system")
	}
	dropped := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "d"}, []string{"reason"})
	written := prometheus.NewCounter(prometheus.CounterOpts{Name: "w"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := New(slog.New(slog.NewTextHandler(io.Discard, nil)), func() float64 { return 0 }, (&clock{}).Now, dropped, written)
	r.openFile = func(string, int, os.FileMode) (*os.File, error) { return os.OpenFile("/dev/full", os.O_WRONLY, 0) }
	r.Configure(ctx, &Config{Dir: t.TempDir(), Sample: 1, MaxFileBytes: 1 << 20, MaxFiles: 2})
	for range 2000 {
		r.Offer("", "/v1/chat/completions", http.Header{}, []byte(`{"model":"auto"}`))
	}
	waitWritten(t, written, dropped, 2000)
	var d dto.Metric
	dropped.WithLabelValues("write_error").Write(&d)
	if count(t, written) != 0 || d.GetCounter().GetValue() == 0 {
		t.Errorf("written %v, write_error %v", count(t, written), d.GetCounter().GetValue())
	}
}
