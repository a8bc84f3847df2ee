package admin

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/classifier"
	"github.com/switchyard/switchyard/router/internal/wire"
)

// TestFigures: the page's rates cover the last minute, or the uptime while
// the gateway is younger; shares and the classifier's rates follow one
// definition each.
func TestFigures(t *testing.T) {
	start := time.Unix(1_800_000_000, 0)
	reg := prometheus.NewRegistry()
	m := classifier.NewMetrics(reg)
	c, err := classifier.New(classifier.Options{Kind: "heuristic", Labels: []string{"simple", "complex"}, OnError: "complex",
		CacheSize: 100, MaxInputChars: 1000, Timeout: time.Second, Concurrency: 4, Metrics: m, Now: func() time.Time { return start }})
	if err != nil {
		t.Fatal(err)
	}
	r := &Ring{Gather: reg}
	for s := start.Unix(); s < start.Unix()+120; s++ {
		r.Prepare(s)
	}
	h := &handler{Options: Options{Started: start, Ring: r, CacheHitRate: classifier.CacheHitRate}}
	r.SampleClassifier(start)
	// 11 s after the start: 30 requests to a, 10 to b, 4 classifications
	// of which 3 cache hits.
	at := start.Add(5 * time.Second)
	for i := range 40 {
		pool := "a"
		if i%4 == 3 {
			pool = "b"
		}
		r.Record(Sample{API: wire.Chat, Pool: pool, Status: 200}, at, time.Millisecond)
	}
	for range 4 {
		c.Classify(t.Context(), classifier.Input{LastUser: "the same question"})
	}
	now := start.Add(11 * time.Second)
	cur := gatherClassifier(reg)
	f := h.figures(now, &cur, true)
	if f.WindowSeconds != 11 {
		t.Errorf("window %vs at 11 s of uptime, want 11", f.WindowSeconds)
	}
	if a := f.Pools["a"]; a.Requests != 30 || a.Share != 0.75 || a.PerSecond != 30.0/11 {
		t.Errorf("pool a: %+v; want 30 requests, share 0.75, 30/11 req/s (not 30/60)", a)
	}
	if cf := f.Classifier; cf == nil || cf.CacheHitRate == nil || *cf.CacheHitRate != 0.75 || cf.PerSecond != 4.0/11 {
		t.Errorf("classifier figures %+v; want a cache hit rate of 3 of 4 and 4/11 classifications/s", cf)
	}
	// Past a minute the window is the last minute: the requests at 5 s
	// have left it.
	later := start.Add(90 * time.Second)
	r.SampleClassifier(later.Add(-60 * time.Second))
	cur = gatherClassifier(reg)
	f = h.figures(later, &cur, true)
	if f.WindowSeconds != 60 || f.Pools["a"].Requests != 0 {
		t.Errorf("at 90 s: window %vs, pool a %+v; want 60 s and none", f.WindowSeconds, f.Pools["a"])
	}
	if cf := f.Classifier; cf.CacheHitRate != nil || cf.PerSecond != 0 {
		t.Errorf("at 90 s the classifier figures %+v; want none in the last minute", cf)
	}
}

// TestOutcomeFigures: the turn outcomes of the window, per pool: judged
// turns and the bad share (every outcome but ok); none judged is null.
func TestOutcomeFigures(t *testing.T) {
	old := &ClassifierCounters{Outcomes: map[string]map[string]float64{"small": {"ok": 10, "tool_error": 2}}}
	cur := ClassifierCounters{Outcomes: map[string]map[string]float64{
		"small": {"ok": 16, "tool_error": 4, "reasked": 2},
		"big":   {"ok": 5},
		"idle":  {"ok": 3},
	}}
	old.Outcomes["idle"] = map[string]float64{"ok": 3}
	got := outcomeFigures(old, cur)
	if s := got["small"]; s.Judged != 10 || s.Bad != 4 || s.BadShare == nil || *s.BadShare != 0.4 {
		t.Errorf("small %+v, want 4 bad of 10", s)
	}
	if b := got["big"]; b.Judged != 5 || b.Bad != 0 || b.BadShare == nil || *b.BadShare != 0 {
		t.Errorf("big %+v", b)
	}
	if i := got["idle"]; i.Judged != 0 || i.BadShare != nil {
		t.Errorf("idle %+v, want nothing judged and a null share", i)
	}
}
