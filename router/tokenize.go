package router

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/switchyard/switchyard/router/internal/spans"
	"github.com/switchyard/switchyard/router/internal/upstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchyard/switchyard/router/internal/translate"
	"github.com/switchyard/switchyard/router/internal/wire"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/switchyard/switchyard/pools"
)

// The prompt estimate (about four bytes of JSON a token) is cheap but
// rough: JSON quoting makes it high for prose, and code or non-Latin text
// makes it low. Where it is clearly under or over a pool's context it
// decides; in the band between (the estimate and a minimal answer within
// 0.75 and 1.5 of max_model_len) the pool's own tokenizer counts the
// prompt, with one call to a replica's /tokenize, before the request is
// sent there or past it.
const (
	tokenizeBandLow  = 0.75
	tokenizeBandHigh = 1.5
	// tokenizeTimeout bounds the call: a slow answer leaves the estimate
	// to decide.
	tokenizeTimeout = 2 * time.Second
	// maxTokenizeAnswer bounds its answer (the token ids of a 131,072-token
	// prompt are about 1 MiB of JSON).
	maxTokenizeAnswer = 16 << 20
)

// fits reports whether x's prompt and a minimal answer fit ps's context:
// fitsContext's estimate, or, in the band where the estimate could be
// wrong either way, the count of ps's /tokenize.
func (g *Gateway) fits(ctx context.Context, ps *poolState, x *exchange) bool {
	limit := ps.cfg.MaxModelLen
	if limit <= 0 || !x.ep.Generates() || x.info == nil {
		return true
	}
	need := float64(x.info.PromptTokens + wire.MinFitAnswer)
	if need < tokenizeBandLow*float64(limit) || need > tokenizeBandHigh*float64(limit) {
		return fitsContext(ps, x)
	}
	n, err := g.countPrompt(ctx, ps, x)
	if err != nil {
		if ctx.Err() != nil {
			return fitsContext(ps, x) // the client left: nothing to count
		}
		g.metrics.Tokenize.WithLabelValues(ps.Name, "error").Inc()
		g.log.Debug("tokenize failed; the estimate decides", "request_id", x.id, "pool", ps.Name, "error", err.Error())
		return fitsContext(ps, x)
	}
	if n+wire.MinFitAnswer <= limit {
		g.metrics.Tokenize.WithLabelValues(ps.Name, "fits").Inc()
		return true
	}
	g.metrics.Tokenize.WithLabelValues(ps.Name, "too_long").Inc()
	return false
}

// tokenizeBody is x's prompt as vLLM's /tokenize takes it: a chat request
// (messages and tools, with the generation prompt) or a completion's
// prompt. Responses and Messages requests are translated as vLLM
// translates them into chat.
func tokenizeBody(x *exchange, model string) ([]byte, error) {
	var messages, tools, prompt gjson.Result
	switch x.ep {
	case wire.Chat:
		messages, tools = x.info.RawMessages, x.info.RawTools
	case wire.Completions:
		if x.info.RawPrompt.Type != gjson.String {
			return nil, translate.ErrNotTranslatable
		}
		prompt = x.info.RawPrompt
	case wire.Responses, wire.Messages:
		toChat := translate.ResponsesToChat
		if x.ep == wire.Messages {
			toChat = translate.MessagesToChat
		}
		chat, err := toChat(x.body)
		if err != nil {
			return nil, err
		}
		root := gjson.ParseBytes(chat)
		messages, tools = root.Get("messages"), root.Get("tools")
	default:
		return nil, translate.ErrNotTranslatable
	}
	b, err := sjson.SetBytes([]byte(`{}`), "model", model)
	if err != nil {
		return nil, err
	}
	if prompt.Exists() {
		return sjson.SetRawBytes(b, "prompt", []byte(prompt.Raw))
	}
	if b, err = sjson.SetRawBytes(b, "messages", []byte(messages.Raw)); err != nil {
		return nil, err
	}
	if tools.IsArray() {
		b, _ = sjson.SetRawBytes(b, "tools", []byte(tools.Raw))
	}
	return sjson.SetBytes(b, "add_generation_prompt", true)
}

// tokenizer is the available replica of ps with the fewest requests in
// flight, ties taken in turn, so that the context checks' calls spread
// over the pool (they are not counted in flight: a tokenization is CPU
// work on the server, not a slot of its engine).
func (g *Gateway) tokenizer(ps *poolState) *pools.Replica {
	reps := ps.Replicas()
	if len(reps) == 0 {
		return nil
	}
	now := g.opts.Now()
	start := int(ps.tokenizeTurn.Add(1) % uint64(len(reps)))
	var best *pools.Replica
	for i := range reps {
		r := reps[(start+i)%len(reps)]
		if r.Available(now) && (best == nil || r.Inflight() < best.Inflight()) {
			best = r
		}
	}
	return best
}

// countPrompt asks one available replica of ps to count x's prompt.
func (g *Gateway) countPrompt(ctx context.Context, ps *poolState, x *exchange) (int, error) {
	body, err := tokenizeBody(x, ps.Model)
	if err != nil {
		return 0, err
	}
	rep := g.tokenizer(ps)
	if rep == nil {
		return 0, upstream.ErrNoReplica
	}
	ctx, cancel := context.WithTimeout(ctx, tokenizeTimeout)
	defer cancel()
	// One HTTP exchange like every other: its span, the pool's header
	// timeout, the status judged. Not counted in flight and not told to
	// passive health: a tokenization is CPU work on the server, and a
	// failure only leaves the estimate to decide.
	ctx, span := g.startSpan(ctx, "switchyard.tokenize", trace.WithSpanKind(trace.SpanKindClient))
	defer span.End()
	if span.IsRecording() {
		span.SetAttributes(spans.Pool.String(ps.Name), spans.Replica.String(rep.Name))
	}
	var clock upstream.Clock
	defer clock.Stop()
	resp, _, res := g.send(ctx, span, sendSpec{ps: ps, rep: rep, clock: &clock, what: "tokenize ",
		build: func(hctx context.Context) (*http.Request, error) {
			return g.gatewayRequest(ctx, hctx, ps, rep, wire.Tokenize.Path(), body)
		}})
	if resp == nil {
		return 0, res.Err()
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxTokenizeAnswer))
	if err != nil {
		return 0, err
	}
	count := gjson.Result{}
	if resp.StatusCode == http.StatusOK && wire.CheckDepth(b, upstream.ReplicaDepth(x.snap.Config.Server.MaxJSONDepth)) {
		count = gjson.GetBytes(b, "count")
	}
	if count.Type != gjson.Number || count.Int() < 0 {
		return 0, &upstream.Failure{Status: resp.StatusCode, Msg: wire.ReadErrorMessage(bytes.NewReader(b))}
	}
	return int(count.Int()), nil
}

// errContextLength: the request does not fit a pool's context (its
// estimate does not, or a replica said so); a larger pool of the chain is
// asked.
var errContextLength = errors.New("the prompt does not fit the pool's context")

// fitsContext reports whether the request's prompt estimate and a minimal
// answer fit ps's max_model_len (always, when it is not set or the
// endpoint generates nothing).
func fitsContext(ps *poolState, x *exchange) bool {
	limit := ps.cfg.MaxModelLen
	if limit <= 0 || !x.ep.Generates() || x.info == nil {
		return true
	}
	return x.info.PromptTokens+wire.MinFitAnswer <= limit
}

// contextOverflow reports a replica's 400 that says the prompt exceeds its
// context (vLLM's wordings across versions).
func contextOverflow(status int, body []byte) bool {
	if status != http.StatusBadRequest {
		return false
	}
	b := bytes.ToLower(body)
	for _, w := range [...]string{"maximum context length", "max_model_len", "maximum model length", "context length"} {
		if bytes.Contains(b, []byte(w)) {
			return true
		}
	}
	return false
}
