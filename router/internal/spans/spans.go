package spans

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"

	"github.com/switchyard/switchyard/router/internal/upstream"

	"github.com/switchyard/switchyard/router/internal/wire"

	"github.com/switchyard/switchyard/router/internal/sse"

	"github.com/tidwall/gjson"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Span attributes follow the OpenTelemetry semantic conventions: HTTP
// server and client spans (stable), and GenAI client spans (development
// stability; these are the names since semconv 1.37, which replaced
// gen_ai.system with gen_ai.provider.name). No attribute is ever set to an
// empty string: an unknown value is left out.
const (
	attrHTTPMethod    = attribute.Key("http.request.method")
	HTTPStatus        = attribute.Key("http.response.status_code")
	attrHTTPRoute     = attribute.Key("http.route")
	attrURLScheme     = attribute.Key("url.scheme")
	attrURLPath       = attribute.Key("url.path")
	attrURLFull       = attribute.Key("url.full")
	attrServerAddress = attribute.Key("server.address")
	attrServerPort    = attribute.Key("server.port")
	attrUserAgent     = attribute.Key("user_agent.original")
	ErrorType         = attribute.Key("error.type")

	GenAIOperation         = attribute.Key("gen_ai.operation.name")
	GenAIProvider          = attribute.Key("gen_ai.provider.name")
	GenAIRequestModel      = attribute.Key("gen_ai.request.model")
	attrGenAIMaxTokens     = attribute.Key("gen_ai.request.max_tokens")
	attrGenAITemperature   = attribute.Key("gen_ai.request.temperature")
	attrGenAITopP          = attribute.Key("gen_ai.request.top_p")
	GenAIResponseModel     = attribute.Key("gen_ai.response.model")
	attrGenAIResponseID    = attribute.Key("gen_ai.response.id")
	attrGenAIFinishReasons = attribute.Key("gen_ai.response.finish_reasons")
	attrGenAIInputTokens   = attribute.Key("gen_ai.usage.input_tokens")
	attrGenAIOutputTokens  = attribute.Key("gen_ai.usage.output_tokens")
	Route                  = attribute.Key("switchyard.route")
	Pool                   = attribute.Key("switchyard.pool")
	Replica                = attribute.Key("switchyard.replica")
	Class                  = attribute.Key("switchyard.class")
	Status                 = attribute.Key("switchyard.status_code")
	Resume                 = attribute.Key("switchyard.resume")
	ResumeDeltas           = attribute.Key("switchyard.resume.deltas")
)

// genAIProvider is gen_ai.provider.name on every span. The conventions name
// the API flavour as the client knows it, not the serving software: vLLM
// (and anything else a pool points at) speaks the OpenAI API, for which the
// value is "openai"; gen_ai.response.model and server.address tell the
// actual server.
const Provider = "openai"

// Values of error.type that are not an HTTP status code.
const (
	errTypeTimeout    = "timeout"
	errTypeConnection = "connection"
	ErrTypeStreamCut  = "stream_interrupted"
	ErrTypeTooLarge   = "answer_too_large"
	ErrTypeNotStream  = "not_an_event_stream"
	// ErrTypeUnaskedStream: an event stream answered a request that asked
	// for none.
	ErrTypeUnaskedStream = "unasked_event_stream"
)

// appendString appends k=v unless v is empty.
func AppendString(kvs []attribute.KeyValue, k attribute.Key, v string) []attribute.KeyValue {
	if v == "" {
		return kvs
	}
	return append(kvs, k.String(v))
}

// serverRequestAttrs are the server span's attributes known when the
// request arrives: HTTP server conventions and the GenAI operation.
func ServerRequest(r *http.Request, ep wire.Endpoint) []attribute.KeyValue {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	kvs := make([]attribute.KeyValue, 0, 10)
	kvs = append(kvs, attrHTTPMethod.String(r.Method), attrURLScheme.String(scheme),
		attrHTTPRoute.String(ep.Path()), GenAIOperation.String(ep.Operation()), GenAIProvider.String(Provider))
	kvs = AppendString(kvs, attrURLPath, r.URL.Path)
	// server.address and server.port name the server as the client
	// addressed it: the Host header.
	host, port := splitHostPort(r.Host)
	kvs = AppendString(kvs, attrServerAddress, host)
	if host != "" && port > 0 {
		kvs = append(kvs, attrServerPort.Int(port))
	}
	return AppendString(kvs, attrUserAgent, r.UserAgent())
}

// clientRequestAttrs are a client span's HTTP attributes for req.
func ClientRequest(req *http.Request) []attribute.KeyValue {
	u := req.URL
	if u.User != nil {
		// url.full must not carry credentials.
		c := *u
		c.User = url.UserPassword("REDACTED", "REDACTED")
		u = &c
	}
	kvs := make([]attribute.KeyValue, 0, 4)
	kvs = append(kvs, attrHTTPMethod.String(req.Method), attrURLFull.String(u.String()))
	host := u.Hostname()
	kvs = AppendString(kvs, attrServerAddress, host)
	port, _ := strconv.Atoi(u.Port())
	if port == 0 {
		switch u.Scheme {
		case "http":
			port = 80
		case "https":
			port = 443
		}
	}
	if host != "" && port > 0 {
		kvs = append(kvs, attrServerPort.Int(port))
	}
	return kvs
}

// splitHostPort splits a Host header; port is 0 when it names none.
func splitHostPort(hostport string) (host string, port int) {
	h, p, err := net.SplitHostPort(hostport)
	if err != nil {
		if len(hostport) > 1 && hostport[0] == '[' && hostport[len(hostport)-1] == ']' {
			return hostport[1 : len(hostport)-1], 0
		}
		return hostport, 0
	}
	port, _ = strconv.Atoi(p)
	return h, port
}

// genAIRequestAttrs reads the request settings of a body: the model and
// gen_ai.request.max_tokens (max_tokens, else max_completion_tokens),
// temperature and top_p when present.
func GenAIRequest(body []byte) []attribute.KeyValue {
	r := gjson.GetManyBytes(body, "model", "max_tokens", "max_completion_tokens", "temperature", "top_p")
	kvs := make([]attribute.KeyValue, 0, 4)
	if r[0].Type == gjson.String {
		kvs = AppendString(kvs, GenAIRequestModel, r[0].Str)
	}
	switch {
	case r[1].Type == gjson.Number:
		kvs = append(kvs, attrGenAIMaxTokens.Int64(r[1].Int()))
	case r[2].Type == gjson.Number:
		kvs = append(kvs, attrGenAIMaxTokens.Int64(r[2].Int()))
	}
	if r[3].Type == gjson.Number {
		kvs = append(kvs, attrGenAITemperature.Float64(r[3].Num))
	}
	if r[4].Type == gjson.Number {
		kvs = append(kvs, attrGenAITopP.Float64(r[4].Num))
	}
	return kvs
}

// The span helpers below do nothing on a span that does not record, so
// that without tracing they cost nothing.

// setClientStatus records the replica's answer status on a client span:
// 4xx and 5xx are errors there (HTTP client span conventions).
func SetClientStatus(span trace.Span, status int, msg string) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(HTTPStatus.Int(status))
	if status >= 400 {
		span.SetAttributes(ErrorType.String(strconv.Itoa(status)))
		span.SetStatus(codes.Error, msg)
	}
}

// setClientError marks a client span whose call failed without a usable
// answer: a timeout, a connection failure, or a stream cut mid-way.
func SetClientError(span trace.Span, errType string, err error) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(ErrorType.String(errType))
	span.SetStatus(codes.Error, err.Error())
}

// transportErrorType is error.type for a failure to get an answer.
func TransportErrorType(err error) string {
	if upstream.IsTimeout(err) {
		return errTypeTimeout
	}
	return errTypeConnection
}

// setUsage records token usage on span.
func SetUsage(span trace.Span, prompt, completion int64) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attrGenAIInputTokens.Int64(prompt), attrGenAIOutputTokens.Int64(completion))
}

// genAIResponse collects the gen_ai.response.* attributes of one answer.
type GenAIResponse struct {
	id, model string
	finish    []string
}

// readAnswer reads a non-stream answer.
func (a *GenAIResponse) ReadAnswer(data []byte) {
	r := gjson.GetManyBytes(data, "id", "model", "choices.#.finish_reason")
	a.id, a.model = r[0].String(), r[1].String()
	a.addFinish(r[2])
}

// readChunk reads one chunk of a stream: the id and model of the first
// that has them, and every finish reason.
func (a *GenAIResponse) readChunk(data []byte) {
	if len(data) == 0 || data[0] != '{' {
		return
	}
	if a.id == "" {
		r := gjson.GetManyBytes(data, "id", "model")
		a.id, a.model = r[0].String(), r[1].String()
	}
	if hasFinishReason(data) {
		a.addFinish(gjson.GetBytes(data, "choices.#.finish_reason"))
	}
}

func (a *GenAIResponse) addFinish(reasons gjson.Result) {
	reasons.ForEach(func(_, v gjson.Result) bool {
		if v.Type == gjson.String && v.Str != "" {
			a.finish = append(a.finish, v.Str)
		}
		return true
	})
}

// attrs are the attributes collected, the empty ones left out.
func (a *GenAIResponse) Attrs() []attribute.KeyValue {
	kvs := make([]attribute.KeyValue, 0, 3)
	kvs = AppendString(kvs, attrGenAIResponseID, a.id)
	kvs = AppendString(kvs, GenAIResponseModel, a.model)
	if len(a.finish) > 0 {
		kvs = append(kvs, attrGenAIFinishReasons.StringSlice(a.finish))
	}
	return kvs
}

var finishReasonKey = []byte(`"finish_reason"`)

// hasFinishReason reports whether a chunk has a finish_reason that is not
// null, without parsing it: servers send "finish_reason":null in every
// chunk but the last of each choice.
func hasFinishReason(data []byte) bool {
	for {
		i := bytes.Index(data, finishReasonKey)
		if i < 0 {
			return false
		}
		data = sse.SkipSpace(data[i+len(finishReasonKey):])
		if len(data) > 0 && data[0] == ':' {
			if v := sse.SkipSpace(data[1:]); len(v) > 0 && v[0] == '"' {
				return true
			}
		}
	}
}

// spanWriter passes a stream to the client and reads the
// gen_ai.response.* attributes from the events written through it. The
// pump writes whole events (but for one too long to parse, passed through
// in pieces, which are read as best they can be), so no event is
// reassembled here. It is used only while the attempt's span records. It
// is the pump's writer, not a ResponseWriter: the pump flushes and sets
// deadlines through the ResponseController of the writer underneath.
type SpanWriter struct {
	W    io.Writer
	Resp GenAIResponse
}

func (s *SpanWriter) Write(b []byte) (int, error) {
	if data, ok := sse.EventData(b); ok {
		s.Resp.readChunk(data)
	}
	return s.W.Write(b)
}

// setResponseAttrs sets an answer's gen_ai.response.* attributes on the
// upstream span and on the request's server span.
func SetResponseAttrs(upstream, server trace.Span, kvs []attribute.KeyValue) {
	if !upstream.IsRecording() {
		return
	}
	upstream.SetAttributes(kvs...)
	server.SetAttributes(kvs...)
}
