package router_test

import (
	"context"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchyard/switchyard/internal/polltest"
	"github.com/switchyard/switchyard/router"
	"github.com/switchyard/switchyard/vllmsim"
)

func TestTracingSpanTree(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	q := startReplica(t, fast("Qwen/Qwen3.8-Flash-Next"))
	m := startReplica(t, fast("openbmb/MiniCPM5-2B"), vllmsim.WithChooser(vllmsim.DefaultChooser))
	cfg := loadConfig(t, classifierYAML, map[string]string{"qwen": q.Srv.URL, "minicpm": m.Srv.URL}, nil)
	gw := startGateway(t, cfg, func(o *router.Options) { o.Tracer = tp })

	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	resp, _ := post(t, gw.API.URL+"/v1/chat/completions", chatBody("Prove step by step that it halts.", ""),
		map[string]string{"traceparent": "00-" + traceID + "-00f067aa0ba902b7-01"})
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	// The request span ends when the handler returns, which may be just
	// after the client has its answer.
	spans := map[string]sdktrace.ReadOnlySpan{}
	polltest.Eventually(t, 5*time.Second, "the request span to end", func() bool {
		for _, s := range rec.Ended() {
			spans[s.Name()] = s
		}
		_, ok := spans["switchyard.request"]
		return ok
	})
	for _, name := range []string{"switchyard.request", "switchyard.route", "switchyard.classify", "switchyard.classify.upstream", "switchyard.upstream"} {
		s, ok := spans[name]
		if !ok {
			t.Fatalf("no %s span (have %v)", name, slices.Collect(maps.Keys(spans)))
		}
		if s.SpanContext().TraceID().String() != traceID {
			t.Errorf("%s: trace %s, want the client's %s", name, s.SpanContext().TraceID(), traceID)
		}
	}
	parentOf := func(child, parent string) {
		if spans[child].Parent().SpanID() != spans[parent].SpanContext().SpanID() {
			t.Errorf("%s is not a child of %s", child, parent)
		}
	}
	parentOf("switchyard.route", "switchyard.request")
	parentOf("switchyard.classify", "switchyard.route")
	parentOf("switchyard.classify.upstream", "switchyard.classify")
	parentOf("switchyard.upstream", "switchyard.request")
	if spans["switchyard.request"].Parent().SpanID().String() != "00f067aa0ba902b7" {
		t.Errorf("request span does not continue the client's span")
	}
	attrs := func(name string) map[attribute.Key]attribute.Value {
		out := map[attribute.Key]attribute.Value{}
		for _, kv := range spans[name].Attributes() {
			out[kv.Key] = kv.Value
		}
		return out
	}
	kinds := map[string]trace.SpanKind{"switchyard.request": trace.SpanKindServer, "switchyard.route": trace.SpanKindInternal,
		"switchyard.classify": trace.SpanKindInternal, "switchyard.classify.upstream": trace.SpanKindClient, "switchyard.upstream": trace.SpanKindClient}
	for name, want := range kinds {
		if got := spans[name].SpanKind(); got != want {
			t.Errorf("%s: kind %v, want %v", name, got, want)
		}
		for _, kv := range spans[name].Attributes() {
			if kv.Value.Type() == attribute.STRING && kv.Value.AsString() == "" {
				t.Errorf("%s: empty attribute %s", name, kv.Key)
			}
			if kv.Key == "gen_ai.system" {
				t.Errorf("%s: deprecated gen_ai.system", name)
			}
		}
	}
	host, port := hostPort(t, gw.API.URL)
	qHost, qPort := hostPort(t, q.Srv.URL)
	mHost, mPort := hostPort(t, m.Srv.URL)
	for _, tc := range []struct {
		span string
		want map[attribute.Key]any
	}{
		{"switchyard.request", map[attribute.Key]any{
			"switchyard.route": "complex", "switchyard.pool": "qwen", "switchyard.replica": "qwen-a", "switchyard.class": "complex",
			"http.request.method": "POST", "url.path": "/v1/chat/completions", "http.route": "/v1/chat/completions", "url.scheme": "http",
			"server.address": host, "server.port": port, "http.response.status_code": int64(200),
			"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "auto",
			"gen_ai.request.max_tokens": int64(4), "gen_ai.response.model": "Qwen/Qwen3.8-Flash-Next",
			"gen_ai.usage.output_tokens": int64(4), "gen_ai.response.finish_reasons": []string{"length"},
		}},
		{"switchyard.upstream", map[attribute.Key]any{
			"switchyard.pool": "qwen", "switchyard.replica": "qwen-a", "http.request.method": "POST",
			"url.full": q.Srv.URL + "/v1/chat/completions", "server.address": qHost, "server.port": qPort,
			"http.response.status_code": int64(200), "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
			"gen_ai.request.model": "Qwen/Qwen3.8-Flash-Next", "gen_ai.request.max_tokens": int64(4),
			"gen_ai.response.model": "Qwen/Qwen3.8-Flash-Next", "gen_ai.usage.output_tokens": int64(4),
			"gen_ai.response.finish_reasons": []string{"length"},
		}},
		{"switchyard.classify.upstream", map[attribute.Key]any{
			"switchyard.pool": "minicpm", "switchyard.replica": "minicpm-a", "http.request.method": "POST",
			"url.full": m.Srv.URL + "/v1/chat/completions", "server.address": mHost, "server.port": mPort,
			"http.response.status_code": int64(200), "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
			"gen_ai.request.model": "openbmb/MiniCPM5-2B", "gen_ai.response.model": "openbmb/MiniCPM5-2B",
		}},
	} {
		got := attrs(tc.span)
		for k, want := range tc.want {
			v, ok := got[k]
			if !ok {
				t.Errorf("%s: no %s", tc.span, k)
				continue
			}
			if diff := cmp.Diff(want, v.AsInterface()); diff != "" {
				t.Errorf("%s: %s (-want +got):\n%s", tc.span, k, diff)
			}
		}
		for _, k := range []attribute.Key{"gen_ai.response.id", "gen_ai.usage.input_tokens"} {
			if _, ok := got[k]; !ok && tc.span != "switchyard.classify.upstream" {
				t.Errorf("%s: no %s", tc.span, k)
			}
		}
	}
	for name, s := range spans {
		if s.Status().Code != codes.Unset {
			t.Errorf("%s: status %v %q on a successful request", name, s.Status().Code, s.Status().Description)
		}
	}
	// The replica received a traceparent of the same trace, naming the upstream span.
	tp2 := q.LastHeader().Get("Traceparent")
	if !strings.HasPrefix(tp2, "00-"+traceID+"-"+spans["switchyard.upstream"].SpanContext().SpanID().String()) {
		t.Errorf("replica traceparent %q", tp2)
	}
}

func hostPort(t *testing.T, raw string) (string, int64) {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	return u.Hostname(), int64(p)
}

// TestTracingResume: a stream its replica cut and another replica
// continued is a success for the client, so the server span's status is
// unset; the cut attempt's client span is an error, and the continuation
// is a client span of its own, its sibling, linked to it.
func TestTracingResume(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	prof := vllmsim.Profile{Model: "m", DefaultMaxTokens: 24}
	a, b := startReplica(t, prof), startReplica(t, prof)
	a.Sim.SetFaults(vllmsim.Faults{CutAfterChunks: 5})
	gw := startGateway(t, resumeConfig(t, a.Srv.URL, b.Srv.URL, ""), func(o *router.Options) { o.Tracer = tp })

	resp, body := post(t, gw.API.URL+"/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"Describe the harbor."}]}`, nil)
	if resp.StatusCode != 200 || !strings.HasSuffix(string(body), "data: [DONE]\n\n") {
		t.Fatalf("status %d, body %q", resp.StatusCode, body)
	}
	var server sdktrace.ReadOnlySpan
	var upstream []sdktrace.ReadOnlySpan
	polltest.Eventually(t, 5*time.Second, "the request span to end", func() bool {
		server, upstream = nil, nil
		for _, s := range rec.Ended() {
			switch s.Name() {
			case "switchyard.request":
				server = s
			case "switchyard.upstream":
				upstream = append(upstream, s)
			}
		}
		return server != nil
	})
	attrs := func(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
		out := map[attribute.Key]attribute.Value{}
		for _, kv := range s.Attributes() {
			out[kv.Key] = kv.Value
		}
		return out
	}
	if server.Status().Code != codes.Unset {
		t.Errorf("server span status %v %q, want unset", server.Status().Code, server.Status().Description)
	}
	sa := attrs(server)
	if sa["http.response.status_code"].AsInt64() != 200 || sa["switchyard.replica"].AsString() != "a>b" {
		t.Errorf("server span attributes %v", sa)
	}
	if _, ok := sa["gen_ai.response.id"]; !ok {
		t.Errorf("server span has no gen_ai.response.id: %v", sa)
	}
	if got := sa["gen_ai.response.finish_reasons"].AsStringSlice(); len(got) != 1 {
		t.Errorf("server span finish reasons %v, want the continuation's one", got)
	}
	if len(upstream) != 2 {
		t.Fatalf("%d upstream spans, want the cut attempt and the continuation", len(upstream))
	}
	cut, cont := upstream[0], upstream[1]
	if attrs(cut)["switchyard.replica"].AsString() != "a" {
		cut, cont = cont, cut
	}
	if cut.Status().Code != codes.Error || attrs(cut)["error.type"].AsString() != "stream_interrupted" {
		t.Errorf("cut attempt: status %v, attributes %v", cut.Status().Code, attrs(cut))
	}
	ca := attrs(cont)
	if cont.Status().Code != codes.Unset || ca["switchyard.replica"].AsString() != "b" || !ca["switchyard.resume"].AsBool() ||
		ca["http.response.status_code"].AsInt64() != 200 || ca["url.full"].AsString() != b.Srv.URL+"/v1/chat/completions" ||
		ca["gen_ai.operation.name"].AsString() != "chat" || ca["gen_ai.request.model"].AsString() != "m" {
		t.Errorf("continuation: status %v, attributes %v", cont.Status().Code, ca)
	}
	// The continuation is a new execution, after the cut attempt ended:
	// a sibling of it under the request's span, linked to it.
	if cont.Parent().SpanID() != cut.Parent().SpanID() || len(cont.Links()) != 1 || cont.Links()[0].SpanContext.SpanID() != cut.SpanContext().SpanID() {
		t.Errorf("the continuation is not a sibling of the cut attempt linked to it: parent %v, links %v", cont.Parent(), cont.Links())
	}
}
