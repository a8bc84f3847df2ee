package pools

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// ScrapeOptions configures reading each server's vLLM /metrics; comparable
// (in EndpointOptions).
type ScrapeOptions struct {
	Enabled  bool
	Path     string
	Interval time.Duration
	Timeout  time.Duration
}

// vLLM metric names (vLLM's docs: production metrics).
const (
	metricWaiting  = "vllm:num_requests_waiting"
	metricRunning  = "vllm:num_requests_running"
	metricKV       = "vllm:kv_cache_usage_perc"
	metricKVLegacy = "vllm:gpu_cache_usage_perc"
)

// runScrape reads e's metrics each interval until ctx ends, reporting
// missing load signals once. A slow or failing scrape only marks the load
// stale; it never holds up a request (balancers read the last Load
// atomically).
func (e *Endpoint) runScrape(ctx context.Context, o EndpointOptions) {
	warned, cb := false, e.reg.opts.OnMissing
	every(ctx, o.Scrape.Interval, func() {
		l := e.scrape(ctx, o)
		if missing := l.Missing(); len(missing) > 0 && l.Err == "" && !warned && cb != nil {
			warned = true
			cb(e.reg.member(e), missing)
		}
	})
}

// Missing names the load signals the last scrape lacked.
func (l *Load) Missing() []string {
	var out []string
	if !l.HasQueue {
		out = append(out, metricWaiting)
	}
	if !l.HasRunning {
		out = append(out, metricRunning)
	}
	if !l.HasKV {
		out = append(out, metricKV)
	}
	return out
}

// ScrapeOnce reads r's metrics once and stores the result as its Load.
func (p *Pool) ScrapeOnce(ctx context.Context, r *Replica) *Load {
	return r.scrape(ctx, r.Options())
}

func (e *Endpoint) scrape(ctx context.Context, o EndpointOptions) *Load {
	ctx, cancel := context.WithTimeout(ctx, o.Scrape.Timeout)
	defer cancel()
	l, err := scrape(ctx, e.control.Load(), o.URL+o.Scrape.Path, o.APIKey)
	if err != nil {
		l = &Load{Err: err.Error()}
		if errors.Is(ctx.Err(), context.Canceled) {
			return l // cancelled, not failed: not stored
		}
	}
	l.At = e.reg.now()
	e.load.Store(l)
	return l
}

func scrape(ctx context.Context, c *http.Client, url, key string) (*Load, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/plain")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return nil, fmt.Errorf("scrape: status %d", resp.StatusCode)
	}
	return ParseLoad(io.LimitReader(resp.Body, 8<<20))
}

// ParseLoad reads vLLM's Prometheus text exposition and sums the load
// signals over every model on the server. KV usage falls back to the
// legacy vllm:gpu_cache_usage_perc when the current name is absent.
func ParseLoad(r io.Reader) (*Load, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parse metrics: %w", err)
	}
	// Each signal counts only when it was there: a server with running
	// but no waiting has no known queue (not a queue of 0).
	sum := func(a, b float64) float64 { return a + b }
	l := &Load{}
	l.Waiting, l.HasQueue = fold(fams[metricWaiting], sum)
	l.Running, l.HasRunning = fold(fams[metricRunning], sum)
	kv, ok := fold(fams[metricKV], math.Max)
	if !ok {
		kv, ok = fold(fams[metricKVLegacy], math.Max)
		l.Legacy = ok
	}
	if ok {
		// vLLM reports a fraction (0..1); tolerate servers that report percent.
		if kv > 1 {
			kv /= 100
		}
		l.HasKV, l.KVUsage = true, kv
	}
	return l, nil
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	}
	return 0
}

// fold combines f's values, from 0, with op; false when f has none.
func fold(f *dto.MetricFamily, op func(a, b float64) float64) (float64, bool) {
	if f == nil || len(f.Metric) == 0 {
		return 0, false
	}
	t := 0.0
	for _, m := range f.Metric {
		t = op(t, value(m))
	}
	return t, true
}
