package classifier

import (
	"fmt"
	"hash/maphash"
	"strconv"
	"strings"
)

// Input is what a classifier reads of a request: the turn being decided,
// in the user's own words and the tools' own output, with the task's
// opening as context. The router fills it from the body; truncate bounds
// it before it is sent or hashed.
type Input struct {
	// System is the system (or developer) prompt.
	System string
	// LastUser is the current instruction: the last user message that
	// holds words of the user's own (agent boilerplate such as
	// <system-reminder> blocks removed). For a turn that returns tool
	// output it is the instruction the loop works on.
	LastUser string
	// Opening is the task's first instruction, when the current one is a
	// later one ("" otherwise): context for the current turn.
	Opening string
	// ToolResult is the text of the latest tool results, when the last
	// message returns tool output ("" otherwise).
	ToolResult string
	// Tools are the names of the tools offered.
	Tools []string
	// Turns is the number of messages; Instructions the number of user
	// instructions among them (0: not counted).
	Turns, Instructions int
	// Prompt is the prompt of a /v1/completions request.
	Prompt string
	// Last says what the conversation's last message is: LastInstruction
	// (a user message with text), LastToolResult, or "" (unknown: a
	// completions prompt, an assistant prefill). With it, the summary
	// describes the turn: Last, Steps, PromptTokens and MaxTokens.
	Last string
	// Steps is the number of assistant turns since the last user message
	// with text (0 when the last message is that message).
	Steps int
	// PromptTokens is the request's prompt size estimate; MaxTokens the
	// answer length it asks for (0: none). The summary shows both in
	// bands (band), so nearby sizes read, hash and cache alike.
	PromptTokens, MaxTokens int
}

// What Input.Last says of the last message.
const (
	LastInstruction = "instruction"
	LastToolResult  = "tool_result"
)

// Summary is the text the model classifier is sent for in (the user turn
// of its request) once in is bounded to limit characters: the cache and
// the shared calls are keyed on it, so two requests share an answer
// exactly when the classifier would read the same thing.
func Summary(in Input, limit int) string {
	in.truncate(limit)
	return in.summary()
}

// Section headings of the summary, in the order they appear: what the
// turn is first, then its evidence, then the context.
const (
	headInstruction = "Current instruction:\n"
	headToolResult  = "Latest tool result (excerpt):\n"
	headOpening     = "Task opening (context):\n"
	headSystem      = "System prompt (start):\n"
)

// summary renders in as the classifier reads it.
func (in *Input) summary() string {
	var sb strings.Builder
	if in.Prompt != "" {
		sb.Grow(len("Completion prompt:\n") + len(in.Prompt))
		sb.WriteString("Completion prompt:\n")
		sb.WriteString(in.Prompt)
		return sb.String()
	}
	// The lines describing the turn first, on the stack, so that the
	// summary is allocated once at its exact size.
	var buf [1024]byte
	h := append(buf[:0], "Turns: "...)
	h = strconv.AppendInt(h, int64(in.Turns), 10)
	if in.Instructions > 0 {
		h = append(h, " (user instructions: "...)
		h = strconv.AppendInt(h, int64(in.Instructions), 10)
		h = append(h, ')')
	}
	h = append(h, '\n')
	switch in.Last {
	case LastInstruction:
		h = append(h, "Last message: a new instruction from the user\n"...)
	case LastToolResult:
		h = append(h, "Last message: a tool result, "...)
		h = strconv.AppendInt(h, int64(in.Steps), 10)
		h = append(h, " assistant steps after the user's last message\n"...)
	}
	if in.Last != "" {
		h = append(h, "Prompt: "...)
		h = appendBand(h, in.PromptTokens)
		h = append(h, " tokens\nAnswer budget: "...)
		if in.MaxTokens > 0 {
			h = appendBand(h, in.MaxTokens)
			h = append(h, " tokens"...)
		} else {
			h = append(h, "not set"...)
		}
		h = append(h, '\n')
	}
	if len(in.Tools) > 0 {
		h = append(h, "Tools ("...)
		h = strconv.AppendInt(h, int64(len(in.Tools)), 10)
		h = append(h, "): "...)
		for i, t := range in.Tools {
			if i > 0 {
				h = append(h, ", "...)
			}
			h = append(h, t...)
		}
		h = append(h, '\n')
	} else {
		h = append(h, "Tools: none\n"...)
	}
	n := len(h) + len(headInstruction) + len(in.LastUser) + 1
	for _, part := range [...]struct{ head, text string }{{headToolResult, in.ToolResult}, {headOpening, in.Opening}, {headSystem, in.System}} {
		if part.text != "" {
			n += len(part.head) + len(part.text) + 1
		}
	}
	sb.Grow(n)
	sb.Write(h)
	// The current instruction always has its heading; the evidence and
	// context after it only when there is some.
	for _, part := range [...]struct{ head, text string }{
		{headInstruction, in.LastUser}, {headToolResult, in.ToolResult}, {headOpening, in.Opening}, {headSystem, in.System},
	} {
		if part.text != "" || part.head == headInstruction {
			sb.WriteString(part.head)
			sb.WriteString(part.text)
			sb.WriteString("\n")
		}
	}
	return sb.String()
}

// answerBand is band for an answer length, "not set" for none.
func answerBand(n int) string {
	if n <= 0 {
		return "not set"
	}
	return band(n)
}

// appendBand appends band(n) to b without allocating.
func appendBand(b []byte, n int) []byte {
	if n < 1024 {
		return append(b, "under 1k"...)
	}
	lo := 1
	for lo*2*1024 <= n && lo < 128 {
		lo *= 2
	}
	if lo >= 128 {
		return append(b, "128k or more"...)
	}
	b = strconv.AppendInt(b, int64(lo), 10)
	b = append(b, "k-"...)
	b = strconv.AppendInt(b, int64(lo*2), 10)
	return append(b, 'k')
}

// band writes n tokens as the band it falls in: under 1k, then doubling
// bands (1k-2k, 2k-4k, ...) up to 128k and more.
func band(n int) string {
	if n < 1024 {
		return "under 1k"
	}
	lo := 1
	for lo*2*1024 <= n && lo < 128 {
		lo *= 2
	}
	if lo >= 128 {
		return "128k or more"
	}
	return fmt.Sprintf("%dk-%dk", lo, lo*2)
}

// truncate bounds every part a client writes within limit characters in
// all, so no request can make the classifier's own call overflow its
// model's context. The split of the budget:
//
//   - tool names: at most maxTools names of at most maxToolName bytes,
//     within an eighth of limit;
//   - the system prompt's start: an eighth;
//   - the task's opening (its first instruction, when the current one is
//     a later one): its start, within an eighth;
//   - the rest is shared by the current instruction and the latest tool
//     result (head and tail of each): the tool result gets at least a
//     third of it, and whatever the instruction leaves.
//
// The prompt of a completions request, which has no other part, may use
// all of limit.
func (in *Input) truncate(limit int) {
	if len(in.Tools) > maxTools {
		in.Tools = in.Tools[:maxTools]
	}
	toolBudget := limit / 8
	used := 0
	var tools []string // a copy once a name is cut: never write the caller's slice
	for i, t := range in.Tools {
		cut := head(t, min(maxToolName, toolBudget))
		if cut == "" {
			if tools == nil {
				tools = in.Tools[:i]
			}
			break
		}
		if cut != t && tools == nil {
			tools = append(make([]string, 0, len(in.Tools)), in.Tools[:i]...)
		}
		if tools != nil {
			tools = append(tools, cut)
		}
		toolBudget -= len(cut)
		used += len(cut) + 2 // ", " between names
	}
	if tools != nil {
		in.Tools = tools
	}
	in.System = head(in.System, limit/8)
	in.Opening = head(in.Opening, limit/8)
	rest := max(0, limit-used-len(in.System)-len(in.Opening))
	if in.ToolResult != "" {
		in.ToolResult = headTail(in.ToolResult, max(rest/3, rest-len(in.LastUser)))
	}
	in.LastUser = headTail(in.LastUser, max(0, rest-len(in.ToolResult)))
	in.Prompt = headTail(in.Prompt, limit)
}

// ResultBudget is how many bytes of the latest tool results the summary
// of in holds within limit, its other parts as they are: a reader that
// cuts the tool output to it is not cut again by truncate.
func ResultBudget(in Input, limit int) int {
	in.ToolResult = "x"
	in.truncate(limit)
	used := 0
	for _, t := range in.Tools {
		used += len(t) + 2
	}
	rest := max(0, limit-used-len(in.System)-len(in.Opening))
	return max(rest/3, rest-len(in.LastUser))
}

// The bounds of the tool names the classifier sees: OpenAI's function
// names are at most 64 characters.
const (
	maxTools    = 32
	maxToolName = 64
)

func head(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return validUTF8Prefix(s[:n])
}

func headTail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const sep = "\n…\n"
	if n <= len(sep)+2 {
		return head(s, n)
	}
	h := (n - len(sep)) / 2
	t := n - len(sep) - h
	return validUTF8Prefix(s[:h]) + sep + validUTF8Suffix(s[len(s)-t:])
}

func validUTF8Prefix(s string) string {
	for len(s) > 0 && !utf8ValidEnd(s) {
		s = s[:len(s)-1]
	}
	return s
}

func validUTF8Suffix(s string) string {
	for len(s) > 0 && s[0]&0xC0 == 0x80 {
		s = s[1:]
	}
	return s
}

func utf8ValidEnd(s string) bool {
	// Walk back over continuation bytes to the last rune start.
	i := len(s) - 1
	for i > 0 && s[i]&0xC0 == 0x80 && len(s)-i < 4 {
		i--
	}
	r := s[i:]
	need := 1
	switch b := r[0]; {
	case b >= 0xF0:
		need = 4
	case b >= 0xE0:
		need = 3
	case b >= 0xC0:
		need = 2
	}
	return len(r) >= need
}

// hash identifies what would be sent, for the cache and shared calls: a
// hash of the summary itself (in is already truncated). Two requests
// share a key exactly when the classifier would read the same text, so a
// new instruction or a new tool result is always judged.
func (in *Input) hash(seed maphash.Seed) uint64 {
	return maphash.String(seed, in.summary())
}
