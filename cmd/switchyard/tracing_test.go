package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard/switchyard/internal/polltest"
	"github.com/switchyard/switchyard/vllmsim"
)

// otelEnv lists every OTEL_* variable the tests set, so that each test
// starts from none of them, whatever the environment running the tests has.
var otelEnv = []string{
	"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES",
	"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL",
	"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
	"OTEL_EXPORTER_OTLP_INSECURE", "OTEL_EXPORTER_OTLP_TRACES_INSECURE", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG",
}

func setOTELEnv(t *testing.T, env map[string]string) {
	t.Helper()
	for _, k := range otelEnv {
		t.Setenv(k, "")
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
}

// otlpReceiver is an OTLP trace receiver: it accepts OTLP/HTTP protobuf
// POSTs on /v1/traces and OTLP/gRPC Export calls, and keeps what arrived,
// decoded.
type otlpReceiver struct {
	coltracepb.UnimplementedTraceServiceServer
	// refuse answers every HTTP export with this status, when set.
	refuse int

	mu      sync.Mutex
	exports []*coltracepb.ExportTraceServiceRequest
	calls   int
}

func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o.mu.Lock()
	o.calls++
	o.mu.Unlock()
	if o.refuse != 0 {
		http.Error(w, "refused by the test", o.refuse)
		return
	}
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" {
		http.Error(w, "not an OTLP trace export", http.StatusNotFound)
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		http.Error(w, "content type "+ct, http.StatusUnsupportedMediaType)
		return
	}
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	data, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	req := &coltracepb.ExportTraceServiceRequest{}
	if err := proto.Unmarshal(data, req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	o.add(req)
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// Export implements the OTLP/gRPC trace service.
func (o *otlpReceiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	o.mu.Lock()
	o.calls++
	o.mu.Unlock()
	o.add(req)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func (o *otlpReceiver) add(req *coltracepb.ExportTraceServiceRequest) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.exports = append(o.exports, req)
}

// received returns the export calls made and the spans they carried.
func (o *otlpReceiver) received() (int, []exportedSpan) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []exportedSpan
	for _, req := range o.exports {
		for _, rs := range req.GetResourceSpans() {
			res := anyMap(rs.GetResource().GetAttributes())
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					out = append(out, exportedSpan{resource: res, span: s, attrs: anyMap(s.GetAttributes())})
				}
			}
		}
	}
	return o.calls, out
}

// startHTTPReceiver returns a receiver and its OTLP/HTTP endpoint.
func startHTTPReceiver(t *testing.T, o *otlpReceiver) string {
	t.Helper()
	srv := httptest.NewServer(o)
	t.Cleanup(srv.Close)
	return srv.URL
}

// startGRPCReceiver returns a receiver and its OTLP/gRPC endpoint (an http
// URL: no TLS).
func startGRPCReceiver(t *testing.T, o *otlpReceiver) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, o)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return "http://" + ln.Addr().String()
}

type exportedSpan struct {
	resource map[string]any
	span     *tracepb.Span
	attrs    map[string]any
}

// anyMap decodes OTLP attributes to Go values: string, int64, float64,
// bool, []any.
func anyMap(kvs []*commonpb.KeyValue) map[string]any {
	out := make(map[string]any, len(kvs))
	for _, kv := range kvs {
		out[kv.GetKey()] = anyValue(kv.GetValue())
	}
	return out
}

func anyValue(v *commonpb.AnyValue) any {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return x.IntValue
	case *commonpb.AnyValue_DoubleValue:
		return x.DoubleValue
	case *commonpb.AnyValue_BoolValue:
		return x.BoolValue
	case *commonpb.AnyValue_ArrayValue:
		var out []any
		for _, e := range x.ArrayValue.GetValues() {
			out = append(out, anyValue(e))
		}
		return out
	}
	return fmt.Sprintf("unsupported %T", v.GetValue())
}

// bigReplica answers the "big" pool's requests by what the last user
// message says: "cut" streams one chunk and breaks the connection,
// "refuse" answers 400, a stream streams two chunks (the last with
// finish_reason "length") and usage, anything else is a plain answer.
func bigReplica() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		text := string(body)
		switch {
		case strings.Contains(text, "refuse"):
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"error":{"message":"temperature out of range","type":"BadRequestError"}}`)
		case strings.Contains(text, "cut"):
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, `data: {"id":"chatcmpl-cut","model":"big","choices":[{"index":0,"delta":{"role":"assistant","content":"par"},"finish_reason":null}]}`+"\n\n")
			http.NewResponseController(w).Flush()
			panic(http.ErrAbortHandler)
		case strings.Contains(text, `"stream":true`):
			w.Header().Set("Content-Type", "text/event-stream")
			for _, ev := range []string{
				`{"id":"chatcmpl-stream","model":"big","choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"},"finish_reason":null}]}`,
				`{"id":"chatcmpl-stream","model":"big","choices":[{"index":0,"delta":{"content":"!"},"finish_reason":"length"}]}`,
				`{"id":"chatcmpl-stream","model":"big","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`,
				`[DONE]`,
			} {
				_, _ = io.WriteString(w, "data: "+ev+"\n\n")
			}
		default:
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"id":"chatcmpl-big","object":"chat.completion","model":"big",`+
				`"choices":[{"index":0,"message":{"role":"assistant","content":"Done."},"finish_reason":"stop"}],`+
				`"usage":{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17}}`)
		}
	})
}

// tracedRequest is one request of the traced scenario, sent with a
// traceparent of its own trace id.
type tracedRequest struct {
	name, traceID, body string
	status              int
}

var tracedRequests = []tracedRequest{
	{"classified", "11111111111111111111111111111111",
		`{"model":"auto","max_tokens":7,"temperature":0.5,"top_p":0.9,"messages":[{"role":"user","content":"Prove step by step that it halts."}]}`, 200},
	{"stream", "22222222222222222222222222222222",
		`{"model":"big","stream":true,"messages":[{"role":"user","content":"Say hi."}]}`, 200},
	{"not found", "33333333333333333333333333333333",
		`{"model":"nope","messages":[{"role":"user","content":"Hi."}]}`, 404},
	{"cut", "44444444444444444444444444444444",
		`{"model":"big","stream":true,"messages":[{"role":"user","content":"cut"}]}`, 200},
	{"refused", "55555555555555555555555555555555",
		`{"model":"big","temperature":9,"messages":[{"role":"user","content":"refuse"}]}`, 400},
}

// tracedServe runs the serve command with the environment env against a
// big pool (bigReplica) and a small one (the simulator, which also serves
// the classifier), sends reqs, and stops it; the command flushes its spans
// before it returns. It returns the API's address and the replicas' URLs.
func tracedServe(t *testing.T, env map[string]string, reqs []tracedRequest) (api, bigURL, smallURL string) {
	t.Helper()
	setOTELEnv(t, env)
	big := httptest.NewServer(bigReplica())
	t.Cleanup(big.Close)
	small := httptest.NewServer(vllmsim.New(vllmsim.Profile{Model: "small", DefaultMaxTokens: 2}, vllmsim.WithChooser(vllmsim.DefaultChooser)))
	t.Cleanup(small.Close)
	path := filepath.Join(t.TempDir(), "switchyard.yaml")
	conf := `version: 1
server: {drain_delay: 0s}
pools:
  big: {model: big, health: {disabled: true}, replicas: [{name: big-a, url: "` + big.URL + `"}]}
  small: {model: small, health: {disabled: true}, replicas: [{name: small-a, url: "` + small.URL + `"}]}
classifier:
  kind: model
  pool: small
  labels: [simple, {complex: "multi-step reasoning"}]
  timeout: 5s
  on_error: complex
models:
  - {name: auto, route: policy}
routes:
  - {name: complex, when: {class: complex}, to: big}
  - {name: default, to: small}
`
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	api, admin := freeAddr(t), freeAddr(t)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan int, 1)
	var stderr syncWriter
	go func() {
		done <- run(ctx, []string{"serve", "--config", path, "--listen", api, "--admin-listen", admin, "--no-watch"}, io.Discard, &stderr)
	}()
	polltest.Eventually(t, 10*time.Second, "the gateway to serve", func() bool { return strings.Contains(getBody("http://"+api+"/readyz"), `"ready"`) })
	for _, rq := range reqs {
		req, err := http.NewRequest(http.MethodPost, "http://"+api+"/v1/chat/completions", strings.NewReader(rq.body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("User-Agent", "tracing-test/1.0")
		req.Header.Set("Traceparent", "00-"+rq.traceID+"-00f067aa0ba902b7-01")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", rq.name, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != rq.status {
			t.Errorf("%s: status %d, want %d", rq.name, resp.StatusCode, rq.status)
		}
	}
	stop()
	select {
	case code := <-done:
		if code != exitOK {
			t.Fatalf("serve exited %d: %s", code, stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not exit")
	}
	return api, big.URL, small.URL
}

// TestTracingOTLP runs the serve command against a real OTLP receiver,
// over HTTP/protobuf (the default protocol) and over gRPC, and checks what
// arrived on the wire: the resource from the environment, the span tree,
// the HTTP and GenAI attributes, and the span statuses.
func TestTracingOTLP(t *testing.T) {
	for _, tc := range []struct {
		name     string
		protocol string // OTEL_EXPORTER_OTLP_PROTOCOL; "" is the default
		start    func(*testing.T, *otlpReceiver) string
	}{
		{"http/protobuf by default", "", startHTTPReceiver},
		{"grpc", "grpc", startGRPCReceiver},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rcv := &otlpReceiver{}
			endpoint := tc.start(t, rcv)
			api, bigURL, smallURL := tracedServe(t, map[string]string{
				"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
				"OTEL_EXPORTER_OTLP_PROTOCOL": tc.protocol,
				"OTEL_SERVICE_NAME":           "switchyard-edge",
				"OTEL_RESOURCE_ATTRIBUTES":    "deployment.environment.name=ci,service.name=overridden-by-OTEL_SERVICE_NAME",
			}, tracedRequests)
			_, spans := rcv.received()
			checkResource(t, spans)
			checkSpans(t, spans, api, bigURL, smallURL)
		})
	}
}

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func checkResource(t *testing.T, spans []exportedSpan) {
	t.Helper()
	if len(spans) == 0 {
		t.Fatal("no span arrived")
	}
	host, _ := os.Hostname()
	res := spans[0].resource
	for k, want := range map[string]any{
		"service.name": "switchyard-edge", "service.version": version, "deployment.environment.name": "ci",
		"host.name": host, "process.pid": int64(os.Getpid()), "telemetry.sdk.language": "go",
	} {
		if diff := cmp.Diff(want, res[k]); diff != "" {
			t.Errorf("resource %s (-want +got):\n%s", k, diff)
		}
	}
	id, _ := res["service.instance.id"].(string)
	if !uuidRE.MatchString(id) {
		t.Errorf("resource service.instance.id %q is not a random UUID", id)
	}
	for _, s := range spans {
		if s.resource["service.instance.id"] != id {
			t.Errorf("span %s: service.instance.id %v, want the process's %s", s.span.GetName(), s.resource["service.instance.id"], id)
		}
	}
}

func checkSpans(t *testing.T, spans []exportedSpan, api, bigURL, smallURL string) {
	t.Helper()
	// Spans by trace, then name (one span of each name per trace here).
	byTrace := map[string]map[string]exportedSpan{}
	for _, s := range spans {
		id := hex.EncodeToString(s.span.GetTraceId())
		if byTrace[id] == nil {
			byTrace[id] = map[string]exportedSpan{}
		}
		if _, dup := byTrace[id][s.span.GetName()]; dup {
			t.Errorf("trace %s: two %s spans", id, s.span.GetName())
		}
		byTrace[id][s.span.GetName()] = s
		for k, v := range s.attrs {
			if v == "" {
				t.Errorf("%s: empty attribute %s", s.span.GetName(), k)
			}
		}
		if _, ok := s.attrs["gen_ai.system"]; ok {
			t.Errorf("%s: deprecated gen_ai.system", s.span.GetName())
		}
	}
	apiHost, apiPort := splitURLHost(t, "http://"+api)
	bigHost, bigPort := splitURLHost(t, bigURL)
	smallHost, smallPort := splitURLHost(t, smallURL)
	server := func(status int) map[string]any {
		return map[string]any{
			"http.request.method": "POST", "url.path": "/v1/chat/completions", "http.route": "/v1/chat/completions",
			"url.scheme": "http", "server.address": apiHost, "server.port": apiPort, "user_agent.original": "tracing-test/1.0",
			"http.response.status_code": int64(status), "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
		}
	}
	client := func(base, host string, port int64, status int) map[string]any {
		return map[string]any{
			"http.request.method": "POST", "url.full": base + "/v1/chat/completions", "server.address": host,
			"server.port": port, "http.response.status_code": int64(status),
			"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
		}
	}
	with := func(m map[string]any, kv ...any) map[string]any {
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	type want struct {
		kind   tracepb.Span_SpanKind
		parent string // "" is the client's span
		status tracepb.Status_StatusCode
		attrs  map[string]any
		absent []string
	}
	const (
		unset = tracepb.Status_STATUS_CODE_UNSET
		fail  = tracepb.Status_STATUS_CODE_ERROR
	)
	for _, tc := range []struct {
		req   string
		spans map[string]want
	}{
		{"classified", map[string]want{
			"switchyard.request": {tracepb.Span_SPAN_KIND_SERVER, "", unset, with(server(200),
				"switchyard.route", "complex", "switchyard.pool", "big", "switchyard.replica", "big-a", "switchyard.class", "complex",
				"gen_ai.request.model", "auto", "gen_ai.request.max_tokens", int64(7), "gen_ai.request.temperature", 0.5,
				"gen_ai.request.top_p", 0.9, "gen_ai.response.model", "big", "gen_ai.response.id", "chatcmpl-big",
				"gen_ai.response.finish_reasons", []any{"stop"}, "gen_ai.usage.input_tokens", int64(12),
				"gen_ai.usage.output_tokens", int64(5)), []string{"error.type", "switchyard.status_code"}},
			"switchyard.route":    {tracepb.Span_SPAN_KIND_INTERNAL, "switchyard.request", unset, map[string]any{"switchyard.route": "complex"}, nil},
			"switchyard.classify": {tracepb.Span_SPAN_KIND_INTERNAL, "switchyard.route", unset, map[string]any{"switchyard.class": "complex"}, nil},
			"switchyard.classify.upstream": {tracepb.Span_SPAN_KIND_CLIENT, "switchyard.classify", unset, with(client(smallURL, smallHost, smallPort, 200),
				"switchyard.pool", "small", "switchyard.replica", "small-a", "gen_ai.request.model", "small", "gen_ai.response.model", "small"), []string{"error.type"}},
			"switchyard.upstream": {tracepb.Span_SPAN_KIND_CLIENT, "switchyard.request", unset, with(client(bigURL, bigHost, bigPort, 200),
				"switchyard.pool", "big", "switchyard.replica", "big-a", "gen_ai.request.model", "big", "gen_ai.request.max_tokens", int64(7),
				"gen_ai.request.temperature", 0.5, "gen_ai.request.top_p", 0.9, "gen_ai.response.model", "big",
				"gen_ai.response.id", "chatcmpl-big", "gen_ai.response.finish_reasons", []any{"stop"},
				"gen_ai.usage.input_tokens", int64(12), "gen_ai.usage.output_tokens", int64(5)), []string{"error.type"}},
		}},
		{"stream", map[string]want{
			"switchyard.request": {tracepb.Span_SPAN_KIND_SERVER, "", unset, with(server(200),
				"switchyard.route", "direct", "switchyard.pool", "big", "gen_ai.request.model", "big",
				"gen_ai.response.id", "chatcmpl-stream", "gen_ai.response.model", "big", "gen_ai.response.finish_reasons", []any{"length"},
				"gen_ai.usage.input_tokens", int64(3), "gen_ai.usage.output_tokens", int64(2)), []string{"switchyard.class", "error.type"}},
			"switchyard.upstream": {tracepb.Span_SPAN_KIND_CLIENT, "switchyard.request", unset, with(client(bigURL, bigHost, bigPort, 200),
				"gen_ai.response.id", "chatcmpl-stream", "gen_ai.response.finish_reasons", []any{"length"}), nil},
		}},
		// A 4xx is not an error of the server span.
		{"not found", map[string]want{
			"switchyard.request": {tracepb.Span_SPAN_KIND_SERVER, "", unset, with(server(404), "gen_ai.request.model", "nope"),
				[]string{"switchyard.pool", "switchyard.replica", "switchyard.route", "switchyard.class", "error.type"}},
		}},
		// A stream cut mid-way is an error of both spans, although 200 was sent.
		{"cut", map[string]want{
			"switchyard.request": {tracepb.Span_SPAN_KIND_SERVER, "", fail, with(server(200),
				"switchyard.status_code", int64(502), "error.type", "stream_interrupted", "gen_ai.response.id", "chatcmpl-cut"), nil},
			"switchyard.upstream": {tracepb.Span_SPAN_KIND_CLIENT, "switchyard.request", fail, with(client(bigURL, bigHost, bigPort, 200),
				"error.type", "stream_interrupted"), nil},
		}},
		// A replica's 4xx is an error of the client span only.
		{"refused", map[string]want{
			"switchyard.request": {tracepb.Span_SPAN_KIND_SERVER, "", unset, with(server(400),
				"gen_ai.request.temperature", 9.0), []string{"error.type"}},
			"switchyard.upstream": {tracepb.Span_SPAN_KIND_CLIENT, "switchyard.request", fail, with(client(bigURL, bigHost, bigPort, 400),
				"error.type", "400"), nil},
		}},
	} {
		var traceID string
		for _, rq := range tracedRequests {
			if rq.name == tc.req {
				traceID = rq.traceID
			}
		}
		got := byTrace[traceID]
		if len(got) != len(tc.spans) {
			names := make([]string, 0, len(got))
			for n := range got {
				names = append(names, n)
			}
			t.Errorf("%s: spans %v, want %d", tc.req, names, len(tc.spans))
		}
		for name, w := range tc.spans {
			s, ok := got[name]
			if !ok {
				t.Errorf("%s: no %s span", tc.req, name)
				continue
			}
			if s.span.GetKind() != w.kind {
				t.Errorf("%s: %s: kind %v, want %v", tc.req, name, s.span.GetKind(), w.kind)
			}
			wantParent := "00f067aa0ba902b7"
			if w.parent != "" {
				wantParent = hex.EncodeToString(got[w.parent].span.GetSpanId())
			}
			if p := hex.EncodeToString(s.span.GetParentSpanId()); p != wantParent {
				t.Errorf("%s: %s: parent %s, want %s (%q)", tc.req, name, p, wantParent, w.parent)
			}
			if c := s.span.GetStatus().GetCode(); c != w.status {
				t.Errorf("%s: %s: status %v (%q), want %v", tc.req, name, c, s.span.GetStatus().GetMessage(), w.status)
			}
			for k, v := range w.attrs {
				if diff := cmp.Diff(v, s.attrs[k]); diff != "" {
					t.Errorf("%s: %s: %s (-want +got):\n%s", tc.req, name, k, diff)
				}
			}
			for _, k := range w.absent {
				if v, ok := s.attrs[k]; ok {
					t.Errorf("%s: %s: has %s=%v, want none", tc.req, name, k, v)
				}
			}
		}
	}
}

func splitURLHost(t *testing.T, raw string) (string, int64) {
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

// TestTracingOff: with OTEL_SDK_DISABLED=true, or OTEL_TRACES_EXPORTER=none,
// nothing is exported although an endpoint is set, and no provider is
// built.
func TestTracingOff(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
	}{
		{"OTEL_SDK_DISABLED", map[string]string{"OTEL_SDK_DISABLED": "true"}},
		{"OTEL_SDK_DISABLED any case", map[string]string{"OTEL_SDK_DISABLED": "TRUE", "OTEL_TRACES_EXPORTER": "otlp"}},
		{"OTEL_TRACES_EXPORTER=none", map[string]string{"OTEL_TRACES_EXPORTER": "none"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rcv := &otlpReceiver{}
			env := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": startHTTPReceiver(t, rcv)}
			for k, v := range tc.env {
				env[k] = v
			}
			tracedServe(t, env, tracedRequests[:1])
			if calls, spans := rcv.received(); calls != 0 || len(spans) != 0 {
				t.Errorf("%d export calls, %d spans; want none", calls, len(spans))
			}
			tp, shutdown, err := startTracing(context.Background(), slog.New(slog.DiscardHandler), io.Discard)
			defer shutdown()
			if tp != nil || err != nil {
				t.Errorf("startTracing = %v, %v; want no provider", tp, err)
			}
		})
	}
}

// TestTracingEnv: exporter and protocol choices, and the errors for
// values that are not understood.
func TestTracingEnv(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     map[string]string
		enabled bool
		err     string
	}{
		{"nothing set", nil, false, ""},
		{"endpoint set", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}, true, ""},
		{"traces endpoint set", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:1/v1/traces"}, true, ""},
		{"console", map[string]string{"OTEL_TRACES_EXPORTER": "console"}, true, ""},
		{"list", map[string]string{"OTEL_TRACES_EXPORTER": "otlp, console", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}, true, ""},
		{"http/json", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, true, ""},
		{"unknown exporter", map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"},
			false, `OTEL_TRACES_EXPORTER: unknown exporter "zipkin" (known: otlp, console, none)`},
		{"unknown protocol", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "thrift"},
			false, `trace exporter "otlp": OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: unsupported protocol "thrift" (supported: http/protobuf, grpc, http/json)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setOTELEnv(t, tc.env)
			tp, shutdown, err := startTracing(context.Background(), slog.New(slog.DiscardHandler), io.Discard)
			defer shutdown()
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
			}
			if gotErr != tc.err {
				t.Errorf("error %q, want %q", gotErr, tc.err)
			}
			if (tp != nil) != tc.enabled {
				t.Errorf("provider %v, want enabled %v", tp, tc.enabled)
			}
		})
	}
}

// TestTracingConsole: OTEL_TRACES_EXPORTER=console writes the spans to
// stdout, with the resource.
func TestTracingConsole(t *testing.T) {
	setOTELEnv(t, map[string]string{"OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": "console-test"})
	var out bytes.Buffer
	tp, shutdown, err := startTracing(context.Background(), slog.New(slog.DiscardHandler), &out)
	if err != nil || tp == nil {
		t.Fatalf("startTracing: %v, %v", tp, err)
	}
	_, span := tp.Tracer("test").Start(context.Background(), "console-span")
	span.End()
	shutdown()
	for _, want := range []string{`"Name":"console-span"`, `"Value":"console-test"`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("console output lacks %s:\n%s", want, out.String())
		}
	}
}

// TestTracingErrorsLogged: an export the collector refuses is reported
// through the JSON logger, not as plain text on stderr.
func TestTracingErrorsLogged(t *testing.T) {
	rcv := &otlpReceiver{refuse: http.StatusBadRequest}
	setOTELEnv(t, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": startHTTPReceiver(t, rcv)})
	var logs syncWriter
	tp, shutdown, err := startTracing(context.Background(), slog.New(slog.NewJSONHandler(&logs, nil)), io.Discard)
	if err != nil || tp == nil {
		t.Fatalf("startTracing: %v, %v", tp, err)
	}
	_, span := tp.Tracer("test").Start(context.Background(), "refused-span")
	span.End()
	shutdown()
	if calls, _ := rcv.received(); calls == 0 {
		t.Fatal("no export was attempted")
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	found := false
	for _, l := range lines {
		if !strings.HasPrefix(l, "{") {
			t.Errorf("log line is not JSON: %q", l)
		}
		if strings.Contains(l, `"level":"ERROR"`) && strings.Contains(l, "400") {
			found = true
		}
	}
	if !found {
		t.Errorf("no JSON error line for the refused export:\n%s", logs.String())
	}
}
