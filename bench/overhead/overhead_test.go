package main

import (
	"context"
	"io"
	"os"
	"testing"
	"time"
)

// TestMain lets the test binary serve as the tool's children: Run re-runs
// os.Executable() with the hidden child arguments.
func TestMain(m *testing.M) {
	if code, ok := childMain(os.Args[1:]); ok {
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// TestQuickRun runs the tool's core in --quick mode on one config and checks
// that the numbers are sane. It asserts no timing target.
func TestQuickRun(t *testing.T) {
	o := defaultOptions()
	o.quick()
	o.Configs = []string{configPinned}
	o.Workers = 4
	o.OpenStreams = 20
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var rs []Result
	err := Run(ctx, o, testWriter{t}, func(r Result) error {
		rs = append(rs, r)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"nonstream/open_loop": false, "stream/open_loop": false,
		"nonstream/closed_loop": false, "stream/closed_loop": false, "open_streams/open_streams": false}
	for _, r := range rs {
		key := r.Mode + "/" + r.Load
		if _, ok := want[key]; !ok {
			t.Errorf("unexpected measurement %s", key)
			continue
		}
		want[key] = true
		if r.Load == "open_streams" {
			if r.IdleRSSMiB <= 0 || r.OpenRSSMiB <= 0 {
				t.Errorf("%s: RSS idle %v open %v MiB", key, r.IdleRSSMiB, r.OpenRSSMiB)
			}
			continue
		}
		for name, s := range map[string]*Side{"direct": r.Direct, "gateway": r.Gateway} {
			if s.Requests == 0 || s.Errors != 0 {
				t.Errorf("%s %s: %d requests, %d errors", key, name, s.Requests, s.Errors)
				continue
			}
			if q := s.Latency; q == nil || q.P50 < 0 || q.P50 > q.P90 || q.P90 > q.P99 {
				t.Errorf("%s %s: latency %+v", key, name, q)
			}
			if r.Mode == "stream" && (s.TTFT == nil || s.TTFT.P50 < 0 || s.TTFT.P50 > s.Latency.P99) {
				t.Errorf("%s %s: ttft %+v, latency %+v", key, name, s.TTFT, s.Latency)
			}
		}
		if r.Load == "open_loop" && r.Gateway.Requests != r.Direct.Requests {
			t.Errorf("%s: %d gateway and %d direct requests; want equal", key, r.Gateway.Requests, r.Direct.Requests)
		}
		if r.Load == "closed_loop" && (r.Gateway.ThroughputRPS <= 0 || r.ThroughputRatio <= 0) {
			t.Errorf("%s: throughput %v, ratio %v", key, r.Gateway.ThroughputRPS, r.ThroughputRatio)
		}
		if r.CPUPer10k < 0 || r.PeakRSSMiB <= 0 {
			t.Errorf("%s: cpu %v s/10k, peak RSS %v MiB", key, r.CPUPer10k, r.PeakRSSMiB)
		}
	}
	for k, seen := range want {
		if !seen {
			t.Errorf("no %s measurement", k)
		}
	}
	ts := targets(rs)
	if len(ts) != 5 {
		t.Errorf("%d targets; want 5", len(ts))
	}
	writeTable(io.Discard, machineInfo(nil), rs, ts)
}

// testWriter sends the children's stderr to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
