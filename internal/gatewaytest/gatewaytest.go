// Package gatewaytest runs a gateway on real loopback sockets in front of
// simulated replicas (vllmsim), for the tests of router and of the
// examples: replicas that record what they received and sent, a config
// loaded with the test's URLs, a gateway whose JSON logs the test reads,
// requests, and reads of its metrics. It is test code: it fails the test
// it is given rather than return errors.
package gatewaytest

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

// Replica is a simulator on a real loopback socket, with what it received
// and sent recorded.
type Replica struct {
	Sim *vllmsim.Server
	Srv *httptest.Server

	mu     sync.Mutex
	bodies [][]byte
	heads  []http.Header
	sent   []*bytes.Buffer
}

// StartReplica starts a simulator of profile p, closed when t ends.
func StartReplica(t testing.TB, p vllmsim.Profile, opts ...vllmsim.Option) *Replica {
	t.Helper()
	r := &Replica{}
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

// LastBody is the body of the last request the replica received (nil
// before any).
func (r *Replica) LastBody() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.bodies) == 0 {
		return nil
	}
	return r.bodies[len(r.bodies)-1]
}

// LastHeader is the header of the last request the replica received.
func (r *Replica) LastHeader() http.Header {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.heads) == 0 {
		return nil
	}
	return r.heads[len(r.heads)-1]
}

// LastSent is what the replica wrote in answer to its last POST.
func (r *Replica) LastSent() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.sent) == 0 {
		return nil
	}
	return bytes.Clone(r.sent[len(r.sent)-1].Bytes())
}

// Count is how many requests the replica received.
func (r *Replica) Count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.bodies)
}

// Bodies are the bodies of the requests the replica received, in order.
func (r *Replica) Bodies() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]byte(nil), r.bodies...)
}

// Fast is a profile of model that answers at once, 8 tokens by default,
// with a context of 4096 tokens.
func Fast(model string) vllmsim.Profile {
	return vllmsim.Profile{Model: model, DefaultMaxTokens: 8, MaxModelLen: 4096}
}

// RefusedURL is the address of a closed listener: connections are refused.
func RefusedURL(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

// Gateway is a running gateway on real sockets: its client and admin
// listeners, its registry and its logs.
type Gateway struct {
	G     *router.Gateway
	API   *httptest.Server
	Admin *httptest.Server
	Reg   *prometheus.Registry
	Logs  *SyncBuffer
}

// SyncBuffer is a buffer that one goroutine writes while another reads it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// LoadConfig parses yaml after replacing each {{name}} with urls[name];
// env is the environment its *_env keys read.
func LoadConfig(t testing.TB, yaml string, urls map[string]string, env map[string]string) *policy.Config {
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

// Start runs a gateway on cfg, with its logs (JSON) kept in Logs, closed
// when t ends; opts edit its options.
func Start(t testing.TB, cfg *policy.Config, opts ...func(*router.Options)) *Gateway {
	t.Helper()
	logs := &SyncBuffer{}
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
	return &Gateway{G: g, API: api, Admin: admin, Reg: g.Registry(), Logs: logs}
}

// Do sends a request with body (a JSON one, or none when empty) and
// header, and returns the response with its body read.
func Do(t testing.TB, method, url, body string, header map[string]string) (*http.Response, []byte) {
	t.Helper()
	return do(t, method, url, body, body != "", header)
}

// Post is Do of a POST whose body, even an empty one, is JSON.
func Post(t testing.TB, url, body string, header map[string]string) (*http.Response, []byte) {
	t.Helper()
	return do(t, http.MethodPost, url, body, true, header)
}

// Get is Do of a GET without a body.
func Get(t testing.TB, url string, header map[string]string) (*http.Response, []byte) {
	t.Helper()
	return do(t, http.MethodGet, url, "", false, header)
}

func do(t testing.TB, method, url, body string, json bool, header map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if json {
		req.Header.Set("Content-Type", "application/json")
	}
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

// MetricValue is the value of the counter or gauge series name{labels}
// in the gateway's registry, or a histogram's count (0 when absent).
func (gw *Gateway) MetricValue(t testing.TB, name string, labels map[string]string) float64 {
	t.Helper()
	for _, m := range gw.MatchingSeries(t, name, labels) {
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

// MatchingSeries are the series of name whose labels include labels.
func (gw *Gateway) MatchingSeries(t testing.TB, name string, labels map[string]string) []*dto.Metric {
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

// MetricSum is the sum of the counters or gauges of name over every series
// whose labels include labels (as PromQL's sum over a selector).
func (gw *Gateway) MetricSum(t testing.TB, name string, labels map[string]string) float64 {
	t.Helper()
	sum := 0.0
	for _, m := range gw.MatchingSeries(t, name, labels) {
		sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
	}
	return sum
}
