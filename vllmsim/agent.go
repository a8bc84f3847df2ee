package vllmsim

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/tidwall/gjson"
)

// What an agent loop gets from the simulator. Agents (Claude Code, Codex,
// the OpenAI Agents SDK) call the model in a loop until it answers with
// text; a simulator that answers every request offering tools with a call
// never lets them finish. The simulator therefore reads the conversation
// as an agent loop: how many times the model has answered (turns), how
// many of those answers called tools (tool rounds), and whether the last
// message is a tool result.

// DefaultMaxToolRounds is how many tool rounds a conversation gets with
// tool_choice "auto" before the simulator answers a further user turn with
// text (Scenario.MaxToolRounds overrides it). Three rounds let an agent
// read, act and check before it is told the task is done.
const DefaultMaxToolRounds = 3

// maxParallelCalls is the most calls the simulator makes in one turn on
// its own (a scenario may make more).
const maxParallelCalls = 3

// history is what a request's conversation says about its agent loop.
type history struct {
	turns      int  // assistant answers in the conversation
	rounds     int  // those that called tools
	toolResult bool // the last message is a tool result
	// firstUser is the first user message's text, once one is seen
	// (seenUser): with turns it keys an answer's natural length.
	firstUser string
	seenUser  bool
}

// user notes a user message's text: the first one keys natural lengths.
func (h *history) user(text string) {
	if !h.seenUser {
		h.firstUser, h.seenUser = text, true
	}
}

// assistant counts an assistant answer: one that called tools when calls.
func (h *history) assistant(calls bool) {
	h.turns++
	if calls {
		h.rounds++
	}
}

// offeredTool is a tool the simulator may call: its name and the JSON
// schema of its arguments.
type offeredTool struct {
	name   string
	schema gjson.Result
}

// offeredTools is what a request says about tools.
type offeredTools struct {
	count int
	chars int // size of the tool definitions, for the prompt estimate
	// callable are the tools a call may name, in request order: every
	// function tool, the one tool_choice names, or none for tool_choice
	// "none".
	callable []offeredTool
	// forced is set when tool_choice demands a call ("required", Anthropic's
	// "any", or a named tool): vLLM then constrains the output to calls.
	forced bool
	// parallel allows several calls in one answer (parallel_tool_calls,
	// or Anthropic's disable_parallel_tool_use unset).
	parallel bool
}

// schemaOf is the argument schema of the callable tool name, and whether
// there is one.
func (t offeredTools) schemaOf(name string) (gjson.Result, bool) {
	for _, o := range t.callable {
		if o.name == name {
			return o.schema, true
		}
	}
	return gjson.Result{}, false
}

// answerTurn decides what p answers: the scenario's turn, tool calls or
// text. It reports whether the answer is the default text, which the
// caller may begin with reasoning. The rules, in order:
//
//   - a scenario turn for this turn number is answered as written;
//   - with no callable tool (none offered, or tool_choice "none"): text;
//   - a forced tool_choice: calls;
//   - after a tool result: text;
//   - once the conversation has had MaxToolRounds tool rounds: text;
//   - otherwise: calls.
//
// Calls name distinct tools, chosen deterministically from the prompt's
// size and the turn number, so the same request always gets the same
// answer: one call, or with parallel calls allowed and several tools
// offered one to three.
func (s *Server) answerTurn(p *plan, t offeredTools, h history) (text bool) {
	if turn, ok := s.scenario.turn(h.turns + 1); ok {
		if turn.calls == nil {
			p.script(turn.text)
			return false
		}
		calls := make([]toolCall, len(turn.calls))
		for i, c := range turn.calls {
			args := c.args
			if args == "" {
				schema, _ := t.schemaOf(c.tool)
				args = exampleArguments(schema)
			}
			calls[i] = newToolCall(c.tool, args)
		}
		p.callTools(calls)
		return false
	}
	n := len(t.callable)
	switch {
	case n == 0:
		return true
	case t.forced:
	case h.toolResult, h.rounds >= s.scenario.maxToolRounds():
		return true
	}
	seed := mix(uint64(p.promptTokens)<<20 ^ uint64(h.turns))
	k := 1
	if t.parallel && n > 1 {
		k = min(n, 1+int(seed%maxParallelCalls))
	}
	first := int((seed >> 32) % uint64(n))
	calls := make([]toolCall, k)
	for i := range calls {
		o := t.callable[(first+i)%n]
		calls[i] = newToolCall(o.name, exampleArguments(o.schema))
	}
	p.callTools(calls)
	return false
}

// mix is splitmix64's finalizer: a well-spread hash of x.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// toolCall is one call a modeTool answer makes.
type toolCall struct {
	name   string
	args   string
	pieces []string // args cut into streamed tokens
}

func newToolCall(name, args string) toolCall {
	return toolCall{name: name, args: args, pieces: splitArguments(args)}
}

// tokens is the call's length in tokens: the header (id and name), then
// each argument piece.
func (c toolCall) tokens() int { return 1 + len(c.pieces) }

// callTools makes p answer with calls, made one after the other in the
// stream. A tool call is not cut at max_tokens: its arguments stay valid
// JSON.
func (p *plan) callTools(calls []toolCall) {
	p.mode = modeTool
	p.calls = calls
	p.steps = 0
	for _, c := range calls {
		p.steps += c.tokens()
	}
	p.finish, p.engineFinish = "tool_calls", "stop"
}

// toolStep is the call token step of a modeTool answer belongs to, and its
// argument piece (-1 for the call's header).
func (p *plan) toolStep(step int) (call, piece int) {
	for i, c := range p.calls {
		if step < c.tokens() {
			return i, step - 1
		}
		step -= c.tokens()
	}
	return len(p.calls) - 1, step // not reached for steps < p.steps
}

// script makes p answer with the text tokens (a scenario's text), cut at
// the length fitContext allowed.
func (p *plan) script(tokens []string) {
	p.mode = modeText
	p.scripted = tokens
	p.reasoning = 0
	if len(tokens) <= p.steps {
		p.steps = max(1, len(tokens))
		p.finish, p.engineFinish = "stop", "stop"
	} else {
		p.finish, p.engineFinish = "length", "length"
	}
}

// splitText cuts text into tokens as the passage is cut: each word with the
// white space before it. The tokens concatenate back to text (trailing
// space joins the last token); an empty text is one empty token.
func splitText(text string) []string {
	var tokens []string
	for i := 0; i < len(text); {
		j := i
		for j < len(text) {
			r, size := utf8.DecodeRuneInString(text[j:])
			if !unicode.IsSpace(r) {
				break
			}
			j += size
		}
		for j < len(text) {
			r, size := utf8.DecodeRuneInString(text[j:])
			if unicode.IsSpace(r) {
				break
			}
			j += size
		}
		tokens = append(tokens, text[i:j])
		i = j
	}
	if len(tokens) > 1 && strings.TrimSpace(tokens[len(tokens)-1]) == "" {
		tokens[len(tokens)-2] += tokens[len(tokens)-1]
		tokens = tokens[:len(tokens)-1]
	}
	if len(tokens) == 0 {
		tokens = []string{""}
	}
	return tokens
}
