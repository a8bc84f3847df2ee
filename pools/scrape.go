package pools

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// ScrapeOptions configures reading each replica's vLLM /metrics.
type ScrapeOptions struct {
	Enabled   bool
	Path      string
	Interval  time.Duration
	Timeout   time.Duration
	Staleness time.Duration
	// OnMissing is called once per replica that lacks load signals, with
	// the names it lacks.
	OnMissing func(r *Replica, missing []string)
}

// vLLM metric names (vLLM's docs: production metrics).
const (
	metricWaiting  = "vllm:num_requests_waiting"
	metricRunning  = "vllm:num_requests_running"
	metricKV       = "vllm:kv_cache_usage_perc"
	metricKVLegacy = "vllm:gpu_cache_usage_perc"
)

// RunScrape reads every replica's metrics each interval until ctx ends. A
// slow or failing scrape only marks the replica's load stale; it never holds
// up a request, since balancers read the last Load atomically.
func (p *Pool) RunScrape(ctx context.Context) {
	s := p.opts.Scrape
	if !s.Enabled {
		return
	}
	if s.Interval <= 0 {
		s.Interval = 50 * time.Millisecond
	}
	var wg sync.WaitGroup
	for _, r := range p.replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(s.Interval)
			defer t.Stop()
			warned := false
			for {
				l := p.ScrapeOnce(ctx, r)
				if missing := l.Missing(); len(missing) > 0 && l.Err == "" && !warned {
					warned = true
					if s.OnMissing != nil {
						s.OnMissing(r, missing)
					}
				}
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
			}
		}()
	}
	wg.Wait()
}

// Missing names the load signals the last scrape lacked.
func (l *Load) Missing() []string {
	var out []string
	if !l.HasQueue {
		out = append(out, metricWaiting, metricRunning)
	}
	if !l.HasKV {
		out = append(out, metricKV)
	}
	return out
}

// ScrapeOnce reads r's metrics once and stores the result as r's Load.
func (p *Pool) ScrapeOnce(ctx context.Context, r *Replica) *Load {
	s := p.opts.Scrape
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = 200 * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	l, err := scrape(ctx, p.Client, r.URL.String()+orDefault(s.Path, "/metrics"), p.opts.APIKey)
	if err != nil {
		if ctx.Err() != nil && errors.Is(ctx.Err(), context.Canceled) {
			return &Load{Err: err.Error()}
		}
		l = &Load{Err: err.Error()}
	}
	l.At = p.opts.Now()
	r.load.Store(l)
	return l
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
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
	l := &Load{}
	w, okW := sum(fams[metricWaiting])
	run, okR := sum(fams[metricRunning])
	if okW || okR {
		l.HasQueue = true
		l.Waiting, l.Running = w, run
	}
	if kv, ok := maxGauge(fams[metricKV]); ok {
		l.HasKV, l.KVUsage = true, kv
	} else if kv, ok := maxGauge(fams[metricKVLegacy]); ok {
		l.HasKV, l.KVUsage, l.Legacy = true, kv, true
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

func sum(f *dto.MetricFamily) (float64, bool) {
	if f == nil || len(f.Metric) == 0 {
		return 0, false
	}
	t := 0.0
	for _, m := range f.Metric {
		t += value(m)
	}
	return t, true
}

func maxGauge(f *dto.MetricFamily) (float64, bool) {
	if f == nil || len(f.Metric) == 0 {
		return 0, false
	}
	v := 0.0
	for _, m := range f.Metric {
		v = max(v, value(m))
	}
	// vLLM reports a fraction (0..1); tolerate servers that report percent.
	if v > 1 {
		v /= 100
	}
	return v, true
}
