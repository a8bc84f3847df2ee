package features

import (
	"crypto/sha256"
	"hash/maphash"
	"io"
	"iter"
	"strings"

	"github.com/switchyard/switchyard/classifier"
	"github.com/switchyard/switchyard/router/internal/wire"
	"github.com/tidwall/gjson"
)

// Turn is what the policy and the classifier read of a request: its
// latest turn on its own evidence (the current instruction, the latest
// tool results, the trajectory of tool calls), with the task's opening as
// context, and the opening's canonical key for an implicit session.
type Turn struct {
	// Input is the classifier's input, not yet bounded (the classifier
	// bounds it to max_input_chars; every text in it is already an
	// excerpt of at most a few times that).
	Input classifier.Input
	// ToolError says why the latest tool result reads as a failure
	// ("is_error", "exit code 1", "traceback", "failing tests", "not
	// found", "error"), "" when none does or the turn is not a tool
	// result.
	ToolError string
	// RepeatedCall names the tool whose latest call repeats one of the
	// conversation's last repeatWindow calls with identical arguments (the
	// agent is spinning), "" when none does.
	RepeatedCall string
	// opening is what OpeningKey digests, kept so that only a request
	// that needs an implicit session id pays for the digest.
	opening   openingState
	promptKey string
	// completion: a /v1/completions prompt, keyed by promptKey.
	completion bool
}

// openingState is what the opening key digests.
type openingState struct {
	systemRaw inline[string]
	parts     inline[openingPart]
}

// OpeningKey is a digest of the conversation's opening, canonicalised
// (see Read): the implicit session id.
func (t Turn) OpeningKey() [16]byte {
	if t.completion {
		sum := sha256.Sum256([]byte(t.promptKey))
		return [16]byte(sum[:16])
	}
	return t.opening.key(t.Input.Tools)
}

// repeatWindow is how many earlier tool calls a new one is compared with.
const repeatWindow = 8

// Read reads info's latest turn, with texts cut to about limit bytes each
// (the classifier's max_input_chars). One pass over the messages; a
// megabyte tool result or thousands of messages cost their scan, not
// their copy.
//
// The opening is canonicalised before it is hashed into OpeningKey: the
// text of its system prompt and of its messages up to the first user
// instruction, with boilerplate blocks and date lines removed, and the
// tools' names. Cache hints (cache_control), ids and an agent's reminders
// that change from one request to the next do not change it.
func Read(info *wire.Info, limit int) Turn {
	var t Turn
	in := &t.Input
	if !info.RawMessages.Exists() {
		in.Turns = info.Messages
		if info.RawPrompt.Type == gjson.String {
			in.Prompt = excerpt(info.RawPrompt.Raw, limit)
		} else {
			in.Prompt = excerpt(info.RawPrompt.Get("0").Raw, limit)
		}
		t.promptKey, t.completion = info.RawPrompt.Raw, true
		return t
	}
	in.Tools = allToolNames(info)
	w := walker{limit: limit}
	if info.RawSystem.Exists() {
		w.system(rawString(info.RawSystem))
	}
	w.eachMessage(info.RawMessages.Raw)
	in.Turns = info.Messages
	in.Instructions = w.instructions
	in.Last, in.Steps = w.last, w.steps
	if in.Last != "" {
		in.PromptTokens, in.MaxTokens = info.PromptTokens, info.MaxTokens
	}
	in.System = w.systemText
	if w.firstAt != w.latestAt {
		in.Opening = w.first
	}
	in.LastUser = w.latest
	if w.last == classifier.LastToolResult {
		// Read as much tool output as the summary will hold (at least
		// a few kilobytes, where a run says how it ended).
		w.readResults(max(classifier.ResultBudget(*in, limit), min(limit, 2048)))
		in.ToolResult = w.results
		t.ToolError = w.failure
		t.RepeatedCall = w.repeated
	}
	t.opening = openingState{systemRaw: w.systemRaw, parts: w.opening}

	return t
}

// walker is Read's state over one pass of the messages.
type walker struct {
	limit int

	systemRaw  inline[string] // the system prompt's text parts, raw, for the key
	systemText string
	opening    inline[openingPart] // up to the first instruction, for the key
	openDone   bool

	last         string
	steps        int
	inAssistant  bool
	instructions int
	first        string // the first instruction's words
	latest       string // the latest instruction's words
	firstAt      int    // message indexes of those (-1: none)
	latestAt     int
	index        int

	// The tool results since the last assistant turn (the first
	// maxResults of them), and what they say.
	pending  [maxResults]pendingResult
	npending int
	results  string
	failure  string
	newCalls int // calls of the latest assistant turn
	// calls are digests of the tool calls seen, the last repeatWindow
	// before the latest turn's and the latest turn's own.
	calls    [repeatWindow + 16]uint64
	names    [repeatWindow + 16]string
	ncalls   int
	repeated string
}

type pendingResult struct {
	out     string // raw
	isError bool
}

// maxResults bounds the tool results of one turn that are read.
const maxResults = 16

type openingPart struct {
	role, text string
}

func (w *walker) system(s string) {
	if strings.HasPrefix(s, `"`) {
		w.systemText = headExcerpt(s, w.limit/8) // its start is what the classifier reads
		w.systemRaw.add(s)
		return
	}
	w.systemText = contentExcerpt(s, w.limit)
	elements(s, func(part string) bool {
		if t := member(part, "text"); t != "" {
			w.systemRaw.add(t)
		}
		return true
	})
}

// fields are the members of a message or item the walker reads, found
// in one scan of it.
type fields struct {
	role, typ                                     string
	content, output, toolCalls, name, args, input string // raw
}

func fieldsOf(m string) fields {
	var f fields
	members(m, f.set)
	return f
}

// set keeps a member the walker reads.
func (f *fields) set(k, v string) bool {
	switch k {
	case "role":
		f.role = str(v)
	case "type":
		f.typ = str(v)
	case "content":
		f.content = v
	case "output":
		f.output = v
	case "tool_calls":
		f.toolCalls = v
	case "name":
		f.name = v
	case "arguments":
		f.args = v
	case "input":
		f.input = v
	}
	return true
}

// eachMessage reads each message (or item) of the raw array arr, in one
// scan of its bytes.
func (w *walker) eachMessage(arr string) {
	i := skipSpace(arr, 0)
	if i >= len(arr) || arr[i] != '[' {
		return
	}
	i++
	var f fields
	set := f.set
	for {
		i = skipSpace(arr, i)
		if i >= len(arr) || arr[i] == ']' {
			return
		}
		f = fields{}
		end := objectAt(arr, i, set)
		w.message(&f)
		i = skipSpace(arr, end)
		if i >= len(arr) || arr[i] != ',' {
			return
		}
		i++
	}
}

func (w *walker) message(f *fields) {
	defer func() { w.index++ }()
	role, typ := f.role, f.typ
	switch {
	case role == "assistant" || typ == "function_call" || typ == "custom_tool_call" || typ == "reasoning":
		if !w.inAssistant {
			w.steps++
			w.newCalls = 0
			w.npending = 0
		}
		w.inAssistant, w.last = true, ""
		w.assistantCalls(f)
		w.opened(role, "")
		return
	case role == "system" || role == "developer":
		if w.systemText == "" {
			w.system(f.content)
		} else if !w.openDone {
			w.opening.add(openingPart{role, contentExcerpt(f.content, w.limit)})
		}
		w.inAssistant = false
		return
	case role == "tool" || role == "function" || typ == "function_call_output" || typ == "custom_tool_call_output":
		out := f.content
		if typ != "" {
			out = f.output
		}
		w.toolResult(out, false)
		w.inAssistant = false
		return
	case role != "user":
		return // an item the gateway does not read (additional_tools, …)
	}
	w.inAssistant = false
	c := f.content
	hasResults := false
	if strings.HasPrefix(c, "[") {
		elements(c, func(part string) bool {
			pf := fieldsOf(part)
			if pf.typ == "tool_result" {
				hasResults = true
				w.toolResult(pf.content, member(part, "is_error") == "true")
			}
			return true
		})
	}
	words := contentExcerpt(c, w.limit)
	switch {
	case words != "":
		w.instruction(words)
	case hasResults:
		// tool_result blocks only (with reminders, maybe)
	case hasNonText(c):
		w.instruction("") // an image or a file alone is an instruction too
	default:
		return // boilerplate only: neither an instruction nor a result
	}
	w.opened("user", words)
}

// hasNonText reports whether a content array holds a part other than
// text (an image, a file, audio).
func hasNonText(c string) bool {
	found := false
	elements(c, func(part string) bool {
		if t := str(member(part, "type")); t != "" && t != "text" && t != "input_text" && t != "tool_result" {
			found = true
		}
		return !found
	})
	return found
}

func (w *walker) instruction(words string) {
	w.last, w.steps = classifier.LastInstruction, 0
	w.npending = 0
	w.instructions++
	if w.instructions == 1 {
		w.first, w.firstAt = words, w.index
	}
	w.latest, w.latestAt = words, w.index
}

// opened adds a message to the opening until the first instruction.
func (w *walker) opened(role, words string) {
	if w.openDone {
		return
	}
	w.opening.add(openingPart{role, words})
	if role == "user" && words != "" {
		w.openDone = true
	}
}

func (w *walker) toolResult(out string, isError bool) {
	if w.last != classifier.LastToolResult {
		w.npending = 0
	}
	w.last = classifier.LastToolResult
	if w.npending < len(w.pending) {
		w.pending[w.npending] = pendingResult{out, isError}
		w.npending++
	}
}

// readResults reads the latest tool results, once the pass is over:
// their excerpts, within limit in all, and the first failure.
func (w *walker) readResults(limit int) {
	if w.npending == 1 { // the usual turn: one call, one result
		r := w.pending[0]
		w.results = resultExcerpt(r.out, limit)
		if w.failure = "is_error"; !r.isError {
			w.failure = failureOf(w.results)
		}
		return
	}
	var sb strings.Builder
	for _, r := range w.pending[:w.npending] {
		room := limit - sb.Len()
		if room <= 0 {
			break
		}
		text := resultExcerpt(r.out, room)
		if w.failure == "" {
			if r.isError {
				w.failure = "is_error"
			} else {
				w.failure = failureOf(text)
			}
		}
		if sb.Len() > 0 {
			sb.WriteString("\n---\n")
		}
		sb.WriteString(text)
	}
	w.results = sb.String()
}

// assistantCalls records the tool calls of an assistant message or item,
// and whether one repeats an earlier call.
func (w *walker) assistantCalls(f *fields) {
	switch f.typ {
	case "function_call":
		w.call(str(f.name), f.args)
	case "custom_tool_call":
		w.call(str(f.name), f.input)
	default:
		elements(f.toolCalls, func(c string) bool {
			fn := fieldsOf(member(c, "function"))
			w.call(str(fn.name), fn.args)
			return true
		})
		if strings.HasPrefix(f.content, "[") {
			elements(f.content, func(part string) bool {
				if pf := fieldsOf(part); pf.typ == "tool_use" {
					w.call(str(pf.name), pf.input)
				}
				return true
			})
		}
	}
}

// call records one tool call: the latest turn's calls are compared with
// the repeatWindow calls before that turn.
func (w *walker) call(name, args string) {
	d := callDigest(name, args)
	if w.newCalls == 0 {
		w.repeated = "" // a new assistant turn: only its own calls count
	}
	// The calls before this turn are the last ncalls-newCalls entries.
	earlier := min(w.ncalls-w.newCalls, repeatWindow)
	for i := 1; i <= earlier && w.repeated == ""; i++ {
		j := (w.ncalls - w.newCalls - i) % len(w.calls)
		if w.calls[j] == d && w.names[j] == name {
			w.repeated = name
		}
	}
	w.calls[w.ncalls%len(w.calls)] = d
	w.names[w.ncalls%len(w.names)] = name
	w.ncalls++
	if w.newCalls < 16 {
		w.newCalls++
	}
}

// openingKey digests the canonical opening: the system prompt's text
// without date lines, each opening message's role and words (boilerplate
// and date lines removed), the tools' names. SHA-256, so that the key is
// the same on every instance.
func (o *openingState) key(tools []string) [16]byte {
	h := sha256.New()
	h.Write([]byte("opening\x00"))
	for _, raw := range o.systemRaw.all() {
		writeUndated(h, raw)
		h.Write([]byte{0})
	}
	for _, p := range o.parts.all() {
		io.WriteString(h, p.role)
		h.Write([]byte{0})
		writeUndated(h, p.text)
		h.Write([]byte{0})
	}
	h.Write([]byte("tools\x00"))
	for _, t := range tools {
		io.WriteString(h, t)
		h.Write([]byte{0})
	}
	var out [16]byte
	copy(out[:], h.Sum(nil))
	return out
}

// callDigest identifies a tool call by its name and arguments, as sent.
func callDigest(name, args string) uint64 {
	var h maphash.Hash
	h.SetSeed(callSeed)
	h.WriteString(name)
	h.WriteByte(0)
	h.WriteString(args)
	return h.Sum64()
}

var callSeed = maphash.MakeSeed()

// allToolNames are the names of every tool the request offers, those of
// additional_tools input items included.
func allToolNames(info *wire.Info) []string {
	out := toolNames(info.RawTools, make([]string, 0, info.Tools))
	for _, t := range info.AdditionalTools {
		out = toolNames(t, out)
	}
	return out
}

// toolNames appends the names of the tools offered: chat's
// function.name, the Responses and Messages APIs' name, and the tools
// inside a Responses namespace group.
func toolNames(tools gjson.Result, out []string) []string {
	tools.ForEach(func(_, t gjson.Result) bool {
		switch {
		case t.Get("function.name").Exists():
			out = append(out, t.Get("function.name").String())
		case t.Get("tools").IsArray():
			out = toolNames(t.Get("tools"), out)
		case t.Get("name").Exists():
			out = append(out, t.Get("name").String())
		}
		return true
	})
	return out
}

// SystemText is the whole text of the request's system prompt (the
// system or instructions field, else its first system or developer
// message): what the policy's system_contains conditions read. Read only
// when a route has one.
func SystemText(info *wire.Info) string {
	if info.RawSystem.Exists() {
		return fullText(info.RawSystem)
	}
	out := ""
	info.RawMessages.ForEach(func(_, m gjson.Result) bool {
		if r := m.Get("role").Str; r == "system" || r == "developer" {
			out = fullText(m.Get("content"))
			return false
		}
		return true
	})
	return out
}

// fullText is a content's whole text: the string, or its text parts
// joined.
func fullText(c gjson.Result) string {
	if c.Type == gjson.String {
		return c.Str
	}
	var sb strings.Builder
	c.ForEach(func(_, part gjson.Result) bool {
		if t := part.Get("text"); t.Exists() {
			if sb.Len() > 0 {
				sb.WriteByte('\n')
			}
			sb.WriteString(t.String())
		}
		return true
	})
	return sb.String()
}

// inline keeps its first four items in place and the rest in a slice: an
// opening is a few messages, read on every request.
type inline[T any] struct {
	arr  [4]T
	n    int
	more []T
}

func (l *inline[T]) add(v T) {
	if l.n < len(l.arr) {
		l.arr[l.n] = v
		l.n++
		return
	}
	l.more = append(l.more, v)
}

// all yields the items in order.
func (l *inline[T]) all() iter.Seq2[int, T] {
	return func(yield func(int, T) bool) {
		for i, v := range l.arr[:l.n] {
			if !yield(i, v) {
				return
			}
		}
		for i, v := range l.more {
			if !yield(l.n+i, v) {
				return
			}
		}
	}
}
