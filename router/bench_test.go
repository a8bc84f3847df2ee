package router_test

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/switchyard/switchyard/router"
	"github.com/switchyard/switchyard/vllmsim"
)

// The proxy benchmarks call the handler in-process (no client socket) and
// reach a zero-delay simulator over a real loopback socket. The Direct
// variants call the simulator's handler the same way, so
// (Proxy − Direct) is what the gateway adds: its parsing, routing, metrics,
// the upstream HTTP hop and the copy back. Allocation counts include the
// simulator's server side of that hop, which a remote vLLM would not cost
// the gateway.

const benchYAML = `
version: 1
pools:
  minicpm:
    model: openbmb/MiniCPM5-2B
    balance: least_outstanding
    health: {disabled: true}
    replicas: [{name: m, url: "{{m}}"}]
routes:
  - name: default
    to: minicpm
`

func benchGateway(b *testing.B, opts ...func(*router.Options)) (http.Handler, http.Handler) {
	sim := vllmsim.New(vllmsim.Profile{Model: "openbmb/MiniCPM5-2B", DefaultMaxTokens: 16})
	srv := httptest.NewServer(sim)
	b.Cleanup(srv.Close)
	cfg := loadConfig(b, benchYAML, map[string]string{"m": srv.URL}, nil)
	o := router.Options{Logger: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry()}
	for _, f := range opts {
		f(&o)
	}
	g, err := router.New(cfg, o)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(g.Close)
	return g.Handler(), sim
}

func runHandler(b *testing.B, h http.Handler, body string) {
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		w := &discardWriter{h: http.Header{}}
		h.ServeHTTP(w, req)
		if w.status != 200 {
			b.Fatalf("status %d", w.status)
		}
	}
}

// discardWriter is a ResponseWriter that keeps nothing (httptest's
// recorder would add its own buffering to every op).
type discardWriter struct {
	h      http.Header
	status int
}

func (w *discardWriter) Header() http.Header { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = 200
	}
	return len(p), nil
}
func (w *discardWriter) WriteHeader(s int) { w.status = s }
func (w *discardWriter) Flush()            {}

// Deadlines are supported, as on a real connection (where setting one
// costs no allocation), so the benchmark measures the gateway, not the
// cost of an ErrNotSupported error.
func (w *discardWriter) SetReadDeadline(time.Time) error  { return nil }
func (w *discardWriter) SetWriteDeadline(time.Time) error { return nil }

var _ io.Writer = (*discardWriter)(nil)

const (
	benchNonStream = `{"model":"auto","max_tokens":16,"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Describe the harbor in one line."}]}`
	benchStream16  = `{"model":"auto","stream":true,"max_tokens":16,"messages":[{"role":"user","content":"Describe the harbor."}]}`
	benchStream256 = `{"model":"auto","stream":true,"max_tokens":256,"messages":[{"role":"user","content":"Describe the harbor."}]}`
)

func BenchmarkProxy(b *testing.B) {
	for _, tc := range []struct{ name, body string }{
		{"nonstream", benchNonStream}, {"stream16", benchStream16}, {"stream256", benchStream256},
	} {
		b.Run(tc.name, func(b *testing.B) {
			gw, _ := benchGateway(b)
			runHandler(b, gw, tc.body)
		})
		// With a tracer provider configured (a no-op one here), every stage
		// starts a span: the cost of the tracing hooks themselves.
		b.Run(tc.name+"/traced-noop", func(b *testing.B) {
			gw, _ := benchGateway(b, func(o *router.Options) { o.Tracer = noop.NewTracerProvider() })
			runHandler(b, gw, tc.body)
		})
		b.Run(tc.name+"/direct", func(b *testing.B) {
			_, sim := benchGateway(b)
			runHandler(b, sim, strings.Replace(tc.body, `"auto"`, `"openbmb/MiniCPM5-2B"`, 1))
		})
	}
}

// bareHop is the least a Go reverse proxy does per request: read the body,
// POST it upstream on a keep-alive connection, copy the answer back. It is
// the floor against which the gateway's own cost is measured.
func bareHop(upstream string) http.Handler {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req, _ := http.NewRequestWithContext(r.Context(), http.MethodPost, upstream+r.URL.Path, bytes.NewReader(body))
		req.Header["Content-Type"] = r.Header["Content-Type"]
		resp, err := client.Do(req)
		if err != nil {
			w.WriteHeader(502)
			return
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		buf := make([]byte, 32<<10)
		for {
			n, err := resp.Body.Read(buf)
			if n > 0 {
				_, _ = w.Write(buf[:n])
				http.NewResponseController(w).Flush()
			}
			if err != nil {
				return
			}
		}
	})
}

func BenchmarkBareHop(b *testing.B) {
	for _, tc := range []struct{ name, body string }{
		{"nonstream", benchNonStream}, {"stream16", benchStream16}, {"stream256", benchStream256},
	} {
		b.Run(tc.name, func(b *testing.B) {
			sim := vllmsim.New(vllmsim.Profile{Model: "openbmb/MiniCPM5-2B", DefaultMaxTokens: 16})
			srv := httptest.NewServer(sim)
			b.Cleanup(srv.Close)
			runHandler(b, bareHop(srv.URL), strings.Replace(tc.body, `"auto"`, `"openbmb/MiniCPM5-2B"`, 1))
		})
	}
}
