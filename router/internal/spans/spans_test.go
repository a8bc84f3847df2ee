package spans

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/switchyard/switchyard/router/internal/wire"
)

// attrs renders attributes as key=value strings, in order, for cmp.Diff.
func attrs(kvs []attribute.KeyValue) []string {
	out := make([]string, 0, len(kvs))
	for _, kv := range kvs {
		out = append(out, string(kv.Key)+"="+kv.Value.String())
	}
	return out
}

// TestServerRequest: the server span names the route, the operation and
// the server as the client addressed it; nothing is set to "".
func TestServerRequest(t *testing.T) {
	for _, tc := range []struct {
		name  string
		host  string
		agent string
		tls   bool
		want  []string
	}{
		{name: "host and port", host: "gw.example:8080", agent: "openai-python/1.0", want: []string{
			"http.request.method=POST", "url.scheme=http", "http.route=/v1/chat/completions", "gen_ai.operation.name=chat",
			"gen_ai.provider.name=openai", "url.path=/v1/chat/completions", "server.address=gw.example", "server.port=8080",
			"user_agent.original=openai-python/1.0"}},
		{name: "tls, no port, no agent", host: "gw.example", tls: true, want: []string{
			"http.request.method=POST", "url.scheme=https", "http.route=/v1/chat/completions", "gen_ai.operation.name=chat",
			"gen_ai.provider.name=openai", "url.path=/v1/chat/completions", "server.address=gw.example"}},
		{name: "bracketed IPv6", host: "[::1]", want: []string{
			"http.request.method=POST", "url.scheme=http", "http.route=/v1/chat/completions", "gen_ai.operation.name=chat",
			"gen_ai.provider.name=openai", "url.path=/v1/chat/completions", "server.address=::1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
			r.Host = tc.host
			r.Header.Del("User-Agent")
			if tc.agent != "" {
				r.Header.Set("User-Agent", tc.agent)
			}
			if tc.tls {
				r.TLS = &tls.ConnectionState{}
			}
			if diff := cmp.Diff(tc.want, attrs(ServerRequest(r, wire.Chat))); diff != "" {
				t.Errorf("attributes (-want +got):\n%s", diff)
			}
		})
	}
}

// TestClientRequest: url.full never carries credentials, and the port is
// the scheme's when the URL names none.
func TestClientRequest(t *testing.T) {
	for _, tc := range []struct {
		name, url string
		want      []string
	}{
		{name: "explicit port", url: "http://10.0.0.5:8000/v1/chat/completions", want: []string{
			"http.request.method=POST", "url.full=http://10.0.0.5:8000/v1/chat/completions", "server.address=10.0.0.5", "server.port=8000"}},
		{name: "https default port", url: "https://vllm.example/v1/completions", want: []string{
			"http.request.method=POST", "url.full=https://vllm.example/v1/completions", "server.address=vllm.example", "server.port=443"}},
		{name: "credentials redacted", url: "http://user:secret@vllm.example/v1/models", want: []string{
			"http.request.method=POST", "url.full=http://REDACTED:REDACTED@vllm.example/v1/models", "server.address=vllm.example", "server.port=80"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodPost, tc.url, nil)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, attrs(ClientRequest(req))); diff != "" {
				t.Errorf("attributes (-want +got):\n%s", diff)
			}
			if bytes.Contains([]byte(req.URL.String()), []byte("REDACTED")) {
				t.Error("the request's own URL was edited")
			}
		})
	}
}

// TestGenAIRequest: the request settings are read when present with the
// right JSON type; max_completion_tokens stands in for max_tokens.
func TestGenAIRequest(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       []string
	}{
		{name: "all", body: `{"model":"m","max_tokens":64,"temperature":0.5,"top_p":0.9}`, want: []string{
			"gen_ai.request.model=m", "gen_ai.request.max_tokens=64", "gen_ai.request.temperature=0.5", "gen_ai.request.top_p=0.9"}},
		{name: "max_completion_tokens", body: `{"model":"m","max_completion_tokens":32}`, want: []string{
			"gen_ai.request.model=m", "gen_ai.request.max_tokens=32"}},
		{name: "wrong types left out", body: `{"model":7,"max_tokens":"64","temperature":null}`, want: []string{}},
		{name: "empty model left out", body: `{"model":""}`, want: []string{}},
		{name: "not JSON", body: `not json`, want: []string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, attrs(GenAIRequest([]byte(tc.body)))); diff != "" {
				t.Errorf("attributes (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSpanWriterReadsTheStream: the events written through a SpanWriter
// reach the client unchanged and give the response's id, model and every
// finish reason, the null ones left out.
func TestSpanWriterReadsTheStream(t *testing.T) {
	stream := "data: {\"id\":\"c1\",\"model\":\"qwen\",\"choices\":[{\"finish_reason\":null}]}\n\n" +
		"data: {\"id\":\"c2\",\"model\":\"other\",\"choices\":[{\"finish_reason\" : \"stop\"},{\"finish_reason\":\"length\"}]}\n\n" +
		"data: [DONE]\n\n"
	var out bytes.Buffer
	sw := &SpanWriter{W: &out}
	for _, ev := range bytes.SplitAfter([]byte(stream), []byte("\n\n")) {
		if len(ev) > 0 {
			if _, err := sw.Write(ev); err != nil {
				t.Fatal(err)
			}
		}
	}
	if out.String() != stream {
		t.Errorf("the client got %q, want the stream unchanged", out.String())
	}
	want := []string{"gen_ai.response.id=c1", "gen_ai.response.model=qwen", `gen_ai.response.finish_reasons=["stop","length"]`}
	if diff := cmp.Diff(want, attrs(sw.Resp.Attrs())); diff != "" {
		t.Errorf("attributes (-want +got):\n%s", diff)
	}

	var whole GenAIResponse
	whole.ReadAnswer([]byte(`{"id":"r","model":"m","choices":[{"finish_reason":"tool_calls"}]}`))
	if diff := cmp.Diff([]string{"gen_ai.response.id=r", "gen_ai.response.model=m", `gen_ai.response.finish_reasons=["tool_calls"]`},
		attrs(whole.Attrs())); diff != "" {
		t.Errorf("a whole answer's attributes (-want +got):\n%s", diff)
	}
}

// TestClientSpanStatus: a client span records the replica's status, an
// error status for 4xx and 5xx only, and a failure's error.type; a span
// that does not record is left alone.
func TestClientSpanStatus(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tracer := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer("test")
	_, ok := tracer.Start(context.Background(), "ok")
	SetClientStatus(ok, 200, "")
	ok.End()
	_, notFound := tracer.Start(context.Background(), "404")
	SetClientStatus(notFound, 404, "no such model")
	notFound.End()
	_, cut := tracer.Start(context.Background(), "cut")
	SetClientError(cut, ErrTypeStreamCut, errors.New("stream cut"))
	SetUsage(cut, 12, 3)
	cut.End()

	got := map[string][]string{}
	status := map[string]codes.Code{}
	for _, s := range rec.Ended() {
		got[s.Name()] = attrs(s.Attributes())
		status[s.Name()] = s.Status().Code
	}
	want := map[string][]string{
		"ok":  {"http.response.status_code=200"},
		"404": {"http.response.status_code=404", "error.type=404"},
		"cut": {"error.type=stream_interrupted", "gen_ai.usage.input_tokens=12", "gen_ai.usage.output_tokens=3"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("attributes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]codes.Code{"ok": codes.Unset, "404": codes.Error, "cut": codes.Error}, status); diff != "" {
		t.Errorf("statuses (-want +got):\n%s", diff)
	}
	if TransportErrorType(errors.New("connection refused")) != "connection" {
		t.Error("a refused connection is not error.type connection")
	}
}
