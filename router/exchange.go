package router

import (
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchyard/switchyard/classifier"
	"github.com/switchyard/switchyard/policy/routing"
	"github.com/switchyard/switchyard/pools"
	"github.com/switchyard/switchyard/router/internal/keys"
	"github.com/switchyard/switchyard/router/internal/pump"
	"github.com/switchyard/switchyard/router/internal/spans"
	"github.com/switchyard/switchyard/router/internal/upstream"
	"github.com/switchyard/switchyard/router/internal/wire"
)

// An exchange is one client request and everything the request path
// keeps of it; this file holds its state, which every stage file reads
// and none defines, and the few rules on it that are decided once (how
// it ended, the status it is counted with).

// Response headers set on every proxied response.
const (
	headerRoute   = "X-Switchyard-Route"
	headerPool    = "X-Switchyard-Pool"
	headerReplica = "X-Switchyard-Replica"
	headerClass   = "X-Switchyard-Class"
)

// exchange is the state of one client request, for headers, metrics, the
// access log and the span.
type exchange struct {
	start    time.Time
	g        *Gateway
	id       string
	idHeader []string
	ep       wire.Endpoint
	snap     *Snapshot
	info     *wire.Info
	body     []byte
	key      *keys.Key
	// keySlot: the request counts against its key's max_inflight.
	keySlot  bool
	decision routing.Decision
	class    string
	route    string
	pool     string
	replica  string
	status   int
	retries  int
	fallback string
	tokens   tokenCounts
	// access is what the access line says beyond the request's facts.
	access accessNote
	tel    telemetry
	// sent is the status line sent to the client (0: none), for the
	// span; status is what the exchange came to.
	sent int
	sess sessionState
	// classify is what the classifier said, or what explain --class
	// says instead.
	classify classifyState
	// moreInChain: a pool follows the one being tried in the decision's
	// chain (a context overflow moves on to it).
	moreInChain bool
	// clientModel, with models[].rewrite_response_model, is the model name
	// written back into the answer.
	clientModel string
	// stored is the replica a stored response's follow-up must reach.
	stored storedTarget
	// rep is the replica that took the last attempt (the status page's
	// per-replica outcomes).
	rep *pools.Replica
	// attempt is the upstream state, kept here so that placing a request
	// allocates nothing of its own; stream the state of a streamed answer.
	attempt attemptState
	stream  streamState
}

// accessNote is what the access line adds: the error the client was
// told, what became of a stream its replica cut (resume), and where the
// time went: waiting for replica slots (queued, with placed set once the
// request reached a pool's queue) and in the classifier (classify, with
// classified set when it was asked).
type accessNote struct {
	errMsg             string
	resume             string
	queued, classify   time.Duration
	placed, classified bool
}

// classifyState is the classifier's part of an exchange: force, for
// explain --class, stands in for the classifier; res is its answer, when
// it was asked.
type classifyState struct {
	force string
	res   classifier.Result
	// explained, when explaining, is the text the classifier reads.
	explained string
}

// tokenCounts are the answer's time to first token and its usage.
type tokenCounts struct {
	ttft               time.Duration
	prompt, completion int64
}

// telemetry is the exchange's server span and its cached attributes.
type telemetry struct {
	span trace.Span
	// settings caches the request's gen_ai.request.* attributes.
	settings []attribute.KeyValue
}

// sessionState is the request's session: its id ("" without one), once
// set, and the policy's key of the session's decision ("" without a
// session).
type sessionState struct {
	id  string
	set bool
	key string
	// The turn's evidence and what the session store did with it, for
	// the access line: the turn (instruction, tool_result), why its tool
	// result reads as a failure, the tool it repeats, and the store's
	// outcome (new, kept, moved_up, moved_down, side, not_kept).
	turn, toolError, repeated, outcome string
	// instruction is the hash of the turn's new instruction (0: none).
	instruction uint64
}

// attrs adds the turn's evidence and the session's outcome to an access
// line: only what is set.
func (s *sessionState) attrs(attrs []slog.Attr) []slog.Attr {
	for _, f := range [...]struct{ k, v string }{{"turn", s.turn}, {"tool_error", s.toolError}, {"repeated_call", s.repeated}, {"session", s.outcome}} {
		if f.v != "" {
			attrs = append(attrs, slog.String(f.k, f.v))
		}
	}
	return attrs
}

// storedTarget, for a request about a stored response, is the one replica
// the exchange may use (pinned) and the upstream path of GET, DELETE and
// cancel (id and suffix; the method is the client's).
type storedTarget struct {
	pinned     *pools.Replica
	id, suffix string
}

// attemptState is what one placement of the request on a pool needs: the
// client attempt, the pool's request, the execution and its clock.
type attemptState struct {
	up    upstreamCall
	preq  pools.Request
	exec  upstream.Execution
	clock upstream.Clock
}

// streamState is the state of a streamed answer, owned by the attempt that
// relays it: the pump, the Responses custom tools offered as function
// tools (calls to them are turned back into custom tool calls; nil
// without them), how the answer ended when not as its status line said
// (finish maps it to the status counted, statusOf), a stream its replica
// cut (left for resume) and the continuation's attempts.
type streamState struct {
	pump   pump.Pump
	rc     *http.ResponseController
	custom wire.CustomTools
	end    ending
	cut    *cutStream
	cont   continuation
}

// responseController returns the exchange's one controller of w.
func (x *exchange) responseController(w http.ResponseWriter) *http.ResponseController {
	if x.stream.rc == nil {
		x.stream.rc = http.NewResponseController(w)
	}
	return x.stream.rc
}

// FirstToken records the time to the first token.
func (x *exchange) FirstToken() {
	x.tokens.ttft = time.Since(x.start)
	x.g.metrics.TTFT.WithLabelValues(x.pool).Observe(x.tokens.ttft.Seconds())
}

// statusClientClosed marks a request whose client went away (nginx's 499).
const statusClientClosed = 499

// ending is how an exchange ended besides the status line it was sent (or
// that the gateway wrote): the client leaving, or a stream the replica cut
// that no continuation completed.
type ending uint8

const (
	endNormal     ending = iota
	endClientLeft        // 499, whatever was sent
	endCut               // 502: the stream was cut (200 had been sent)
	endShutdown          // 503: the gateway's shutdown ended the stream
)

// endAs records how x ended, as what happened to it last says, and is the
// one place that decides it: a client that went away ends it whatever
// comes after (nothing more reaches the client); otherwise the latest
// word holds (a stream its replica cut is 502, or 503 when the gateway's
// shutdown ended it, and normal again once a continuation completed it).
func (x *exchange) endAs(e ending) {
	if x.stream.end != endClientLeft {
		x.stream.end = e
	}
}

// statusOf is the status an exchange is counted and logged with: the
// status line sent, unless it ended otherwise (ending), 200 when nothing
// set one. It is decided here, once, at the edge.
func (x *exchange) statusOf() int {
	switch x.stream.end {
	case endClientLeft:
		return statusClientClosed
	case endCut:
		return http.StatusBadGateway
	case endShutdown:
		return http.StatusServiceUnavailable
	}
	if x.status == 0 {
		return http.StatusOK
	}
	return x.status
}

// statusLabels caches the code label of every HTTP status.
var statusLabels = func() []string {
	out := make([]string, 600)
	for i := range out {
		out[i] = strconv.Itoa(i)
	}
	return out
}()

func statusLabel(code int) string {
	if code >= 0 && code < len(statusLabels) {
		return statusLabels[code]
	}
	return strconv.Itoa(code)
}

// keyName is the name of the API key the request presented, "none" when
// auth is off or it presented no valid key.
func (x *exchange) keyName() string {
	if x.key == nil {
		return "none"
	}
	return x.key.Name
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// upstreamCall is what a client request's attempts send where.
type upstreamCall struct {
	w        http.ResponseWriter
	r        *http.Request
	ps       *poolState
	body     []byte
	injected bool
}

// cutStream is a stream whose replica failed mid-way, left for resume.
type cutStream struct {
	rep *pools.Replica
	err error
	// cause is why the attempt's context ended, if it did (a phase
	// timeout, the gateway shutting down).
	cause error
	// span is the cut attempt's, which a continuation's span links to;
	// sw, when tracing, reads the whole answer for the spans.
	span trace.SpanContext
	sw   *spans.SpanWriter
	// started is when the stream began: max_stream_duration counts from
	// then across continuations.
	started time.Time
}

// continuation makes the attempts of a resume: each asks one replica to
// continue the answer the client has been sent so far.
type continuation struct {
	x      *exchange
	failed *pools.Replica
	cut    *cutStream
}
