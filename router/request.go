package router

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"strconv"
	"unsafe"

	"github.com/tidwall/gjson"
)

// endpoint is the API a request came in on.
type endpoint int

const (
	chatEndpoint endpoint = iota
	completionsEndpoint
	// responsesEndpoint is OpenAI's Responses API (POST /v1/responses).
	responsesEndpoint
	// messagesEndpoint is Anthropic's Messages API (POST /v1/messages).
	messagesEndpoint
	// The endpoints below are passed to a pool named by the model, with
	// no policy and no classifier.
	countTokensEndpoint // POST /v1/messages/count_tokens
	embeddingsEndpoint  // POST /v1/embeddings
	tokenizeEndpoint    // POST /tokenize (vLLM)
	detokenizeEndpoint  // POST /detokenize (vLLM)
)

// endpointSpec is what the gateway does differently for one API. Every
// rule that depends on the API a request came in on reads it here.
type endpointSpec struct {
	// path is the endpoint's path, on the gateway and on vLLM.
	path string
	// operation is its gen_ai.operation.name.
	operation string
	// generates: the endpoint generates text; the policy routes it, and
	// its stream carries tokens and usage.
	generates bool
	// anthropic: errors and stream events take Anthropic's shapes.
	anthropic bool
	// typed: stream events name their type and the stream ends with a
	// terminal event of its own, not [DONE] (Responses, Messages).
	typed bool
	// asksUsage: a stream's usage is asked for on the client's behalf
	// (stream_options.include_usage) and removed again when the client
	// did not ask for it.
	asksUsage bool
	// missingModel404: a replica's 404 means the server lacks the pool's
	// model (it is retried elsewhere and marks the replica misconfigured).
	// Elsewhere a 404 may be an answer: a stored response that is not
	// there, or an endpoint this vLLM version lacks.
	missingModel404 bool
}

var endpoints = [...]endpointSpec{
	chatEndpoint:        {path: "/v1/chat/completions", operation: "chat", generates: true, asksUsage: true, missingModel404: true},
	completionsEndpoint: {path: "/v1/completions", operation: "text_completion", generates: true, asksUsage: true, missingModel404: true},
	responsesEndpoint:   {path: "/v1/responses", operation: "chat", generates: true, typed: true},
	messagesEndpoint:    {path: "/v1/messages", operation: "chat", generates: true, anthropic: true, typed: true},
	countTokensEndpoint: {path: "/v1/messages/count_tokens", operation: "chat", anthropic: true},
	embeddingsEndpoint:  {path: "/v1/embeddings", operation: "chat"},
	tokenizeEndpoint:    {path: "/tokenize", operation: "chat"},
	detokenizeEndpoint:  {path: "/detokenize", operation: "chat"},
}

func (e endpoint) spec() *endpointSpec { return &endpoints[e] }

func (e endpoint) path() string { return endpoints[e].path }

// anthropic reports whether the endpoint speaks Anthropic's API.
func (e endpoint) anthropic() bool { return endpoints[e].anthropic }

// generates reports whether the endpoint generates text.
func (e endpoint) generates() bool { return endpoints[e].generates }

// reqInfo holds the routing fields read from a request body. The body itself
// travels on as bytes; nothing here is re-encoded.
type reqInfo struct {
	Model        string
	Stream       bool
	IncludeUsage bool
	Tools        int
	Messages     int
	PromptTokens int
	User         string
	// CacheKey is prompt_cache_key, which Codex sets to its session id.
	CacheKey string
	// MaxTokens is the answer length asked for (max_completion_tokens,
	// else max_tokens; max_output_tokens), 0 when none is a positive
	// integer: what the policy's max_tokens conditions read.
	MaxTokens int
	// PreviousResponse is a Responses request's previous_response_id.
	PreviousResponse string
	// messages and prompt are the raw fields, kept for the classifier and
	// affinity keys (gjson results point into the body). For the
	// Responses API messages is the input items (a string input becomes
	// one user message) and system the instructions; for the Messages API
	// system is its system field.
	messages gjson.Result
	prompt   gjson.Result
	tools    gjson.Result
	system   gjson.Result
	input    gjson.Result
	// additional are the tool lists of a Responses request's
	// additional_tools input items.
	additional []gjson.Result
}

// readBody reads at most limit bytes; more is errTooLarge.
func readBody(r *http.Request, limit int64) ([]byte, error) {
	if r.ContentLength > limit {
		return nil, fmt.Errorf("%w: %d bytes is over the %d-byte limit", errTooLarge, r.ContentLength, limit)
	}
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, fmt.Errorf("%w: over the %d-byte limit", errTooLarge, limit)
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, fmt.Errorf("%w: the request body did not arrive within server.body_timeout", errBodyTimeout)
		}
		return nil, badRequest("", "could not read request body: "+err.Error())
	}
	return body, nil
}

// checkDepth reports whether JSON text nests arrays and objects more than
// max levels deep. It is a flat scan (strings and escapes skipped, no
// recursion), so it runs before any parser that recurses per level:
// gjson.ValidBytes overflows the stack on millions of nested brackets, and
// deep nesting costs memory far beyond the body's size. Malformed JSON is
// left to the validator.
func checkDepth(body []byte, max int) bool {
	_, ok := jsonNesting(body, max)
	return ok
}

// jsonNesting scans JSON text flatly (strings and escapes skipped) and
// returns how deeply its end nests in arrays and objects (-1 when it ends
// inside a string), or ok false as soon as it nests deeper than limit.
func jsonNesting(b []byte, limit int) (end int, ok bool) {
	depth := 0
	inString := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if inString {
			switch c {
			case '\\':
				i++
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '[', '{':
			depth++
			if depth > limit {
				return depth, false
			}
		case ']', '}':
			depth--
		}
	}
	if inString {
		return -1, true
	}
	return depth, true
}

// routingKeys are the top-level fields the gateway reads. Each must appear
// once: JSON parsers disagree on which duplicate wins (vLLM's keeps the
// last), so a duplicate could route on one value and run on another.
var routingKeys = [...]string{"model", "stream", "stream_options", "messages", "prompt", "input", "tools", "user",
	"instructions", "system", "previous_response_id", "prompt_cache_key"}

// parseRequest validates the body's JSON and reads the routing fields in one
// pass over the top-level keys. maxDepth bounds nesting (0: no bound).
func parseRequest(body []byte, ep endpoint, maxDepth int) (*reqInfo, error) {
	if len(body) == 0 {
		return nil, badRequest("", "request body is empty; expected a JSON object")
	}
	if maxDepth > 0 && !checkDepth(body, maxDepth) {
		return nil, badRequest("", fmt.Sprintf("request body nests JSON deeper than %d levels (server.max_json_depth)", maxDepth))
	}
	if !gjson.ValidBytes(body) {
		return nil, badRequest("", "request body is not valid JSON")
	}
	// The body is never modified after this point (rewrites make new
	// slices), so the results may point into it without a copy.
	root := gjson.Parse(unsafe.String(&body[0], len(body)))
	if !root.IsObject() {
		return nil, badRequest("", "request body must be a JSON object")
	}
	info, model, err := readFields(root, ep)
	if err != nil {
		return nil, err
	}
	info.Model = model.Str
	if err := info.readInput(ep); err != nil {
		return nil, err
	}
	if info.tools.IsArray() {
		info.Tools = countTools(info.tools)
		info.PromptTokens += estimateTokens(len(info.tools.Raw))
	}
	if ep == responsesEndpoint && info.input.IsArray() {
		// Codex sends its tools inside additional_tools input items (their
		// size is already in the input's).
		info.input.ForEach(func(_, it gjson.Result) bool {
			if it.Get("type").Str == "additional_tools" {
				info.additional = append(info.additional, it.Get("tools"))
				info.Tools += countTools(it.Get("tools"))
			}
			return true
		})
	}
	return info, nil
}

// readFields reads the top-level members the gateway routes on, in one
// pass, refusing a duplicated one and a model or stream of the wrong type.
func readFields(root gjson.Result, ep endpoint) (*reqInfo, gjson.Result, error) {
	info := &reqInfo{}
	var model gjson.Result
	var seen [len(routingKeys)]bool
	var dup, badStream string
	root.ForEach(func(k, v gjson.Result) bool {
		for i, rk := range routingKeys {
			if k.Str == rk {
				if seen[i] {
					dup = rk
					return false
				}
				seen[i] = true
				break
			}
		}
		switch k.Str {
		case "model":
			model = v
		case "stream":
			switch v.Type {
			case gjson.True:
				info.Stream = true
			case gjson.False, gjson.Null:
			default:
				badStream = v.Raw
			}
		case "stream_options":
			n := 0
			v.ForEach(func(k, o gjson.Result) bool {
				if k.Str == "include_usage" {
					n++
					info.IncludeUsage = o.Type == gjson.True
				}
				return true
			})
			if n > 1 {
				dup = "stream_options.include_usage"
				return false
			}
		case "messages":
			info.messages = v
		case "prompt":
			info.prompt = v
		case "tools":
			info.tools = v
		case "user":
			info.User = v.Str
		case "prompt_cache_key":
			info.CacheKey = v.Str
		case "input":
			info.input = v
		case "instructions":
			if ep == responsesEndpoint {
				info.system = v
			}
		case "system":
			if ep == messagesEndpoint {
				info.system = v
			}
		case "previous_response_id":
			info.PreviousResponse = v.Str
		case "max_completion_tokens", "max_output_tokens":
			// vLLM takes max_completion_tokens over max_tokens.
			if n := v.Int(); v.Type == gjson.Number && n > 0 {
				info.MaxTokens = int(min(n, math.MaxInt32))
			}
		case "max_tokens":
			if n := v.Int(); v.Type == gjson.Number && n > 0 && !root.Get("max_completion_tokens").Exists() {
				info.MaxTokens = int(min(n, math.MaxInt32))
			}
		}
		return true
	})
	switch {
	case dup != "":
		return nil, model, badRequest(dup, fmt.Sprintf("duplicate key %q in the request body", dup))
	case badStream != "":
		return nil, model, badRequest("stream", "'stream' must be a boolean")
	case !model.Exists() || model.Type != gjson.String || model.Str == "":
		return nil, model, badRequest("model", "you must provide a model parameter (a non-empty string)")
	}
	return info, model, nil
}

// readInput checks the endpoint's input (messages, input items, prompt),
// counts its messages and estimates its prompt tokens.
func (info *reqInfo) readInput(ep endpoint) error {
	switch ep {
	case chatEndpoint:
		if !info.messages.Exists() {
			return badRequest("messages", "missing required parameter: 'messages'")
		}
		if !info.messages.IsArray() {
			return badRequest("messages", "'messages' must be an array of message objects")
		}
		n := 0
		bad := false
		info.messages.ForEach(func(_, m gjson.Result) bool {
			n++
			bad = !m.IsObject()
			return !bad
		})
		if bad {
			return badRequest("messages", "each entry of 'messages' must be an object")
		}
		if n == 0 {
			return badRequest("messages", "'messages' must not be empty")
		}
		info.Messages = n
		info.PromptTokens = estimateTokens(len(info.messages.Raw))
	case messagesEndpoint, countTokensEndpoint:
		if !info.messages.IsArray() {
			return badRequest("messages", "'messages' must be an array of message objects")
		}
		info.messages.ForEach(func(_, _ gjson.Result) bool { info.Messages++; return true })
		info.PromptTokens = estimateTokens(len(info.messages.Raw) + len(info.system.Raw))
	case responsesEndpoint:
		switch {
		case info.input.Type == gjson.String:
			// A string input is one user message.
			b, _ := json.Marshal([]map[string]string{{"role": "user", "content": info.input.Str}})
			info.messages = gjson.ParseBytes(b)
		case info.input.IsArray():
			info.messages = info.input
		case !info.input.Exists() && info.PreviousResponse != "":
			info.messages = gjson.Parse("[]")
		default:
			return badRequest("input", "'input' must be a string or an array of input items")
		}
		info.messages.ForEach(func(_, _ gjson.Result) bool { info.Messages++; return true })
		info.PromptTokens = estimateTokens(len(info.input.Raw) + len(info.system.Raw))
	case completionsEndpoint:
		if !info.prompt.Exists() {
			return badRequest("prompt", "missing required parameter: 'prompt'")
		}
		if info.prompt.Type != gjson.String && !info.prompt.IsArray() {
			return badRequest("prompt", "'prompt' must be a string or an array")
		}
		info.Messages = 1
		info.PromptTokens = estimateTokens(len(info.prompt.Raw))
	}
	return nil
}

// countTools counts the tools the policy's tools feature sees: every entry
// of a tools array, and for a Responses namespace group each tool inside it
// (docs/agents.md).
func countTools(tools gjson.Result) int {
	n := 0
	tools.ForEach(func(_, t gjson.Result) bool {
		if t.Get("type").Str == "namespace" && t.Get("tools").IsArray() {
			n += countTools(t.Get("tools"))
		} else {
			n++
		}
		return true
	})
	return n
}

// estimateTokens is the cheap prompt-size estimate used by the
// prompt_tokens condition: about four bytes of JSON per token.
func estimateTokens(n int) int { return (n + 3) / 4 }

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
