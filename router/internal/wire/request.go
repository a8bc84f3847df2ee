package wire

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"unsafe"

	"github.com/tidwall/gjson"
)

// Info holds the routing fields read from a request body. The body itself
// travels on as bytes; nothing here is re-encoded.
type Info struct {
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
	RawMessages gjson.Result
	RawPrompt   gjson.Result
	RawTools    gjson.Result
	RawSystem   gjson.Result
	RawInput    gjson.Result
	// additional are the tool lists of a Responses request's
	// additional_tools input items.
	AdditionalTools []gjson.Result
}

// DefaultMaxDepth bounds the nesting of JSON the gateway reads when the
// caller names no bound. It is server.max_json_depth's default, which wire
// does not import: router's tests fail to compile when the two differ.
const DefaultMaxDepth = 64

// CheckDepth reports whether JSON text nests arrays and objects more than
// max levels deep. It is a flat scan (strings and escapes skipped, no
// recursion), so it runs before any parser that recurses per level:
// gjson.ValidBytes overflows the stack on millions of nested brackets, and
// deep nesting costs memory far beyond the body's size. Malformed JSON is
// left to the validator.
func CheckDepth(body []byte, max int) bool {
	_, ok := JSONNesting(body, max)
	return ok
}

// JSONNesting scans JSON text flatly (strings and escapes skipped) and
// returns how deeply its end nests in arrays and objects (-1 when it ends
// inside a string), or ok false as soon as it nests deeper than limit.
func JSONNesting(b []byte, limit int) (end int, ok bool) {
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

// RoutingKeys are the top-level fields the gateway reads. Each must appear
// once: JSON parsers disagree on which duplicate wins (vLLM's keeps the
// last), so a duplicate could route on one value and run on another.
var RoutingKeys = [...]string{"model", "stream", "stream_options", "messages", "prompt", "input", "tools", "user",
	"instructions", "system", "previous_response_id", "prompt_cache_key"}

// Parse validates the body's JSON and reads the routing fields in one
// pass over the top-level keys. maxDepth bounds nesting (0: no bound).
func Parse(body []byte, ep Endpoint, maxDepth int) (*Info, error) {
	if len(body) == 0 {
		return nil, BadRequest("", "request body is empty; expected a JSON object")
	}
	if maxDepth > 0 && !CheckDepth(body, maxDepth) {
		return nil, BadRequest("", fmt.Sprintf("request body nests JSON deeper than %d levels (server.max_json_depth)", maxDepth))
	}
	if !gjson.ValidBytes(body) {
		return nil, BadRequest("", "request body is not valid JSON")
	}
	// The body is never modified after this point (rewrites make new
	// slices), so the results may point into it without a copy.
	root := gjson.Parse(unsafe.String(&body[0], len(body)))
	if !root.IsObject() {
		return nil, BadRequest("", "request body must be a JSON object")
	}
	info, model, err := readFields(root, ep)
	if err != nil {
		return nil, err
	}
	info.Model = model.Str
	if err := info.readInput(ep); err != nil {
		return nil, err
	}
	if info.RawTools.IsArray() {
		info.Tools = countTools(info.RawTools)
		info.PromptTokens += EstimateTokens(len(info.RawTools.Raw))
	}
	if ep == Responses && info.RawInput.IsArray() {
		// Codex sends its tools inside additional_tools input items (their
		// size is already in the input's).
		info.RawInput.ForEach(func(_, it gjson.Result) bool {
			if it.Get("type").Str == "additional_tools" {
				info.AdditionalTools = append(info.AdditionalTools, it.Get("tools"))
				info.Tools += countTools(it.Get("tools"))
			}
			return true
		})
	}
	return info, nil
}

// readFields reads the top-level members the gateway routes on, in one
// pass, refusing a duplicated one and a model or stream of the wrong type.
func readFields(root gjson.Result, ep Endpoint) (*Info, gjson.Result, error) {
	info := &Info{}
	var model gjson.Result
	var seen [len(RoutingKeys)]bool
	var dup, badStream string
	root.ForEach(func(k, v gjson.Result) bool {
		for i, rk := range RoutingKeys {
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
			info.RawMessages = v
		case "prompt":
			info.RawPrompt = v
		case "tools":
			info.RawTools = v
		case "user":
			info.User = v.Str
		case "prompt_cache_key":
			info.CacheKey = v.Str
		case "input":
			info.RawInput = v
		case "instructions":
			if ep == Responses {
				info.RawSystem = v
			}
		case "system":
			if ep == Messages {
				info.RawSystem = v
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
		return nil, model, BadRequest(dup, fmt.Sprintf("duplicate key %q in the request body", dup))
	case badStream != "":
		return nil, model, BadRequest("stream", "'stream' must be a boolean")
	case !model.Exists() || model.Type != gjson.String || model.Str == "":
		return nil, model, BadRequest("model", "you must provide a model parameter (a non-empty string)")
	}
	return info, model, nil
}

// readInput checks the endpoint's input (messages, input items, prompt),
// counts its messages and estimates its prompt tokens.
func (info *Info) readInput(ep Endpoint) error {
	switch ep {
	case Chat:
		if !info.RawMessages.Exists() {
			return BadRequest("messages", "missing required parameter: 'messages'")
		}
		if !info.RawMessages.IsArray() {
			return BadRequest("messages", "'messages' must be an array of message objects")
		}
		n := 0
		bad := false
		info.RawMessages.ForEach(func(_, m gjson.Result) bool {
			n++
			bad = !m.IsObject()
			return !bad
		})
		if bad {
			return BadRequest("messages", "each entry of 'messages' must be an object")
		}
		if n == 0 {
			return BadRequest("messages", "'messages' must not be empty")
		}
		info.Messages = n
		info.PromptTokens = EstimateTokens(len(info.RawMessages.Raw))
	case Messages, CountTokens:
		if !info.RawMessages.IsArray() {
			return BadRequest("messages", "'messages' must be an array of message objects")
		}
		info.RawMessages.ForEach(func(_, _ gjson.Result) bool { info.Messages++; return true })
		info.PromptTokens = EstimateTokens(len(info.RawMessages.Raw) + len(info.RawSystem.Raw))
	case Responses:
		switch {
		case info.RawInput.Type == gjson.String:
			// A string input is one user message.
			b, _ := json.Marshal([]map[string]string{{"role": "user", "content": info.RawInput.Str}})
			info.RawMessages = gjson.ParseBytes(b)
		case info.RawInput.IsArray():
			info.RawMessages = info.RawInput
		case !info.RawInput.Exists() && info.PreviousResponse != "":
			info.RawMessages = gjson.Parse("[]")
		default:
			return BadRequest("input", "'input' must be a string or an array of input items")
		}
		info.RawMessages.ForEach(func(_, _ gjson.Result) bool { info.Messages++; return true })
		info.PromptTokens = EstimateTokens(len(info.RawInput.Raw) + len(info.RawSystem.Raw))
	case Completions:
		if !info.RawPrompt.Exists() {
			return BadRequest("prompt", "missing required parameter: 'prompt'")
		}
		if info.RawPrompt.Type != gjson.String && !info.RawPrompt.IsArray() {
			return BadRequest("prompt", "'prompt' must be a string or an array")
		}
		info.Messages = 1
		info.PromptTokens = EstimateTokens(len(info.RawPrompt.Raw))
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

// EstimateTokens is the cheap prompt-size estimate used by the
// prompt_tokens condition: about four bytes of JSON per token.
func EstimateTokens(n int) int { return (n + 3) / 4 }

// BodyEncoding reads a request's Content-Encoding: ok when the body is
// plain (no header, or identity). A second header line is refused even when
// both say identity: a server and the replica behind it may each read a
// different line (identity, then gzip), so the only safe reading of two is
// none. ce is what to name in the refusal.
func BodyEncoding(h http.Header) (ce string, ok bool) {
	vs := h.Values("Content-Encoding")
	switch {
	case len(vs) == 0:
		return "", true
	case len(vs) > 1:
		return strings.Join(vs, ", "), false
	}
	for c := range strings.SplitSeq(vs[0], ",") {
		if c = strings.TrimSpace(c); c != "" && !strings.EqualFold(c, "identity") {
			return vs[0], false
		}
	}
	return vs[0], true
}
