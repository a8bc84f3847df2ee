package tokenize

import (
	"bytes"
	"context"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/switchyard/switchyard/router/internal/translate"
	"github.com/switchyard/switchyard/router/internal/upstream"
	"github.com/switchyard/switchyard/router/internal/wire"
)

const (
	// The band, as shares of max_model_len, where the estimate could be
	// wrong either way.
	bandLow  = 0.75
	bandHigh = 1.5
	// Timeout bounds the call: a slow answer leaves the estimate to
	// decide.
	Timeout = 2 * time.Second
	// MaxAnswer bounds its answer (the token ids of a 131,072-token
	// prompt are about 1 MiB of JSON).
	MaxAnswer = 16 << 20
)

// What a count found: the results of switchyard_context_tokenize_total.
const (
	Fits    = "fits"
	TooLong = "too_long"
	Failed  = "error"
)

// Estimate reports whether info's prompt estimate and a minimal answer
// fit limit, a pool's max_model_len (always, when it is not set or ep
// generates nothing).
func Estimate(ep wire.Endpoint, info *wire.Info, limit int) bool {
	if limit <= 0 || !ep.Generates() || info == nil {
		return true
	}
	return info.PromptTokens+wire.MinFitAnswer <= limit
}

// Decide reports whether info's prompt and a minimal answer fit limit:
// Estimate, or, in the band where the estimate could be wrong either way,
// the count that count returns. result is what the count found (Fits,
// TooLong, or Failed with its error, the estimate then deciding), or ""
// when it was not asked or ctx ended while it was.
func Decide(ctx context.Context, ep wire.Endpoint, info *wire.Info, limit int, count func() (int, error)) (fits bool, result string, err error) {
	estimate := Estimate(ep, info, limit)
	if limit <= 0 || !ep.Generates() || info == nil {
		return estimate, "", nil
	}
	need := float64(info.PromptTokens + wire.MinFitAnswer)
	if need < bandLow*float64(limit) || need > bandHigh*float64(limit) {
		return estimate, "", nil
	}
	n, err := count()
	switch {
	case err != nil && ctx.Err() != nil:
		return estimate, "", nil // the client left: nothing to count
	case err != nil:
		return estimate, Failed, err
	case n+wire.MinFitAnswer <= limit:
		return true, Fits, nil
	}
	return false, TooLong, nil
}

// Body is a prompt as vLLM's /tokenize takes it, for model: a chat
// request's (messages and tools, with the generation prompt) or a
// completion's prompt. Responses and Messages requests are translated as
// vLLM translates them into chat.
func Body(ep wire.Endpoint, info *wire.Info, body []byte, model string) ([]byte, error) {
	var messages, tools, prompt gjson.Result
	switch ep {
	case wire.Chat:
		messages, tools = info.RawMessages, info.RawTools
	case wire.Completions:
		if info.RawPrompt.Type != gjson.String {
			return nil, translate.ErrNotTranslatable
		}
		prompt = info.RawPrompt
	case wire.Responses, wire.Messages:
		toChat := translate.ResponsesToChat
		if ep == wire.Messages {
			toChat = translate.MessagesToChat
		}
		chat, err := toChat(body)
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

// ReadCount is the token count of a /tokenize answer of status, whose
// JSON may nest depth levels at most; any other answer is a Failure
// carrying the replica's message.
func ReadCount(status int, answer []byte, depth int) (int, error) {
	count := gjson.Result{}
	if status == http.StatusOK && wire.CheckDepth(answer, depth) {
		count = gjson.GetBytes(answer, "count")
	}
	if count.Type != gjson.Number || count.Int() < 0 {
		return 0, &upstream.Failure{Status: status, Msg: wire.ReadErrorMessage(bytes.NewReader(answer))}
	}
	return int(count.Int()), nil
}

// Replica is what Pick reads of a pool's replica.
type Replica interface {
	Available(now time.Time) bool
	Inflight() int64
}

// Turns rotates a pool's counting calls among its equally loaded
// replicas; the zero value is ready.
type Turns struct{ n atomic.Uint64 }

// Pick is the available replica of reps with the fewest requests in
// flight, ties taken in turn, so that the calls spread over the pool (they
// are not counted in flight: a tokenization is CPU work on the server,
// not a slot of its engine). ok is false when none is available.
func Pick[R Replica](turns *Turns, reps []R, now time.Time) (best R, ok bool) {
	if len(reps) == 0 {
		return best, false
	}
	start := int(turns.n.Add(1) % uint64(len(reps)))
	for i := range reps {
		r := reps[(start+i)%len(reps)]
		if r.Available(now) && (!ok || r.Inflight() < best.Inflight()) {
			best, ok = r, true
		}
	}
	return best, ok
}

// Overflow reports a replica's 400 that says the prompt exceeds its
// context (vLLM's wordings across versions).
func Overflow(status int, body []byte) bool {
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
