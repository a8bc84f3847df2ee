package router_test

import (
	"bytes"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/switchyard/switchyard/policy"
	"github.com/switchyard/switchyard/router"
	"github.com/switchyard/switchyard/vllmsim"
)

// replica is a simulator on a real loopback socket, with what it received
// and sent recorded.
type replica struct {
	Sim *vllmsim.Server
	Srv *httptest.Server

	mu     sync.Mutex
	bodies [][]byte
	heads  []http.Header
	sent   []*bytes.Buffer
}

func startReplica(t testing.TB, p vllmsim.Profile, opts ...vllmsim.Option) *replica {
	t.Helper()
	r := &replica{}
	opts = append(opts, vllmsim.WithRequestHook(func(req *http.Request, body []byte) {
		r.mu.Lock()
		r.bodies = append(r.bodies, bytes.Clone(body))
		r.heads = append(r.heads, req.Header.Clone())
		r.mu.Unlock()
	}))
	r.Sim = vllmsim.New(p, opts...)
	r.Srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodPost {
			r.Sim.ServeHTTP(w, req)
			return
		}
		buf := &bytes.Buffer{}
		r.mu.Lock()
		r.sent = append(r.sent, buf)
		r.mu.Unlock()
		r.Sim.ServeHTTP(&teeWriter{ResponseWriter: w, buf: buf, mu: &r.mu}, req)
	}))
	t.Cleanup(r.Srv.Close)
	return r
}

// teeWriter records what a replica wrote; it forwards Flush and Unwrap.
type teeWriter struct {
	http.ResponseWriter
	buf *bytes.Buffer
	mu  *sync.Mutex
}

func (w *teeWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.buf.Write(p)
	w.mu.Unlock()
	return w.ResponseWriter.Write(p)
}

func (w *teeWriter) Flush() { http.NewResponseController(w.ResponseWriter).Flush() }

func (w *teeWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (r *replica) lastBody() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.bodies) == 0 {
		return nil
	}
	return r.bodies[len(r.bodies)-1]
}

func (r *replica) lastHeader() http.Header {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.heads) == 0 {
		return nil
	}
	return r.heads[len(r.heads)-1]
}

func (r *replica) lastSent() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.sent) == 0 {
		return nil
	}
	return bytes.Clone(r.sent[len(r.sent)-1].Bytes())
}

func (r *replica) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.bodies)
}

func fast(model string) vllmsim.Profile {
	return vllmsim.Profile{Model: model, DefaultMaxTokens: 8, MaxModelLen: 4096}
}

// refusedURL is the address of a closed listener: connections are refused.
func refusedURL(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

// gateway is a running gateway on real sockets.
type gateway struct {
	G     *router.Gateway
	API   *httptest.Server
	Admin *httptest.Server
	Reg   *prometheus.Registry
	Logs  *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// loadConfig parses yaml after replacing each {{name}} with urls[name].
func loadConfig(t testing.TB, yaml string, urls map[string]string, env map[string]string) *policy.Config {
	t.Helper()
	for k, v := range urls {
		yaml = strings.ReplaceAll(yaml, "{{"+k+"}}", v)
	}
	reg := router.LoadOptions()
	reg.Getenv = func(k string) string { return env[k] }
	cfg, err := policy.Load("test.yaml", []byte(yaml), reg)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg
}

func startGateway(t testing.TB, cfg *policy.Config, opts ...func(*router.Options)) *gateway {
	t.Helper()
	logs := &syncBuffer{}
	o := router.Options{Logger: slog.New(slog.NewJSONHandler(logs, nil)), Version: "test"}
	for _, f := range opts {
		f(&o)
	}
	g, err := router.New(cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	api := httptest.NewServer(g.Handler())
	admin := httptest.NewServer(g.AdminHandler())
	t.Cleanup(func() {
		api.Close()
		admin.Close()
		g.Close()
	})
	return &gateway{G: g, API: api, Admin: admin, Reg: g.Registry(), Logs: logs}
}

func post(t testing.TB, url, body string, header map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// metricValue returns the value of the counter or gauge series name{labels}
// in the gateway's registry (0 when absent).
func metricValue(t testing.TB, gw *gateway, name string, labels map[string]string) float64 {
	t.Helper()
	for _, m := range matchingSeries(t, gw, name, labels) {
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	return 0
}

// matchingSeries are the series of name whose labels include labels.
func matchingSeries(t testing.TB, gw *gateway, name string, labels map[string]string) []*dto.Metric {
	t.Helper()
	fams, err := gw.Reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []*dto.Metric
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue series
				}
			}
			out = append(out, m)
		}
	}
	return out
}

// metricSum is the sum of the counters or gauges of name over every series
// whose labels include labels (as PromQL's sum over a selector).
func metricSum(t testing.TB, gw *gateway, name string, labels map[string]string) float64 {
	t.Helper()
	sum := 0.0
	for _, m := range matchingSeries(t, gw, name, labels) {
		sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
	}
	return sum
}
