package router_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

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
	eventually(t, 5*time.Second, "the request span to end", func() bool {
		for _, s := range rec.Ended() {
			spans[s.Name()] = s
		}
		_, ok := spans["switchyard.request"]
		return ok
	})
	for _, name := range []string{"switchyard.request", "switchyard.route", "switchyard.classify", "switchyard.upstream"} {
		s, ok := spans[name]
		if !ok {
			t.Fatalf("no %s span (have %v)", name, keys(spans))
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
	req := attrs("switchyard.request")
	for k, want := range map[attribute.Key]string{"switchyard.route": "complex", "switchyard.pool": "qwen", "switchyard.replica": "qwen-a",
		"switchyard.class": "complex", "gen_ai.request.model": "auto"} {
		if got := req[k].AsString(); got != want {
			t.Errorf("request span %s = %q, want %q", k, got, want)
		}
	}
	up := attrs("switchyard.upstream")
	if up["gen_ai.response.model"].AsString() != "Qwen/Qwen3.8-Flash-Next" || up["gen_ai.usage.output_tokens"].AsInt64() != 4 || up["gen_ai.usage.input_tokens"].AsInt64() == 0 {
		t.Errorf("upstream span attributes %v", up)
	}
	// The replica received a traceparent of the same trace, naming the upstream span.
	tp2 := q.lastHeader().Get("Traceparent")
	if !strings.HasPrefix(tp2, "00-"+traceID+"-"+spans["switchyard.upstream"].SpanContext().SpanID().String()) {
		t.Errorf("replica traceparent %q", tp2)
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
