package vllmsim

import (
	"fmt"
	"math"
	"net/http"
	"slices"
	"sort"
	"strings"

	"github.com/tidwall/gjson"
)

// endpoint is the API a request came in on.
type endpoint uint8

const (
	chatEndpoint       endpoint = iota // POST /v1/chat/completions
	completionEndpoint                 // POST /v1/completions
	responsesEndpoint                  // POST /v1/responses
	messagesEndpoint                   // POST /v1/messages
)

// outputMode is what a request's choices contain.
type outputMode uint8

const (
	modeText   outputMode = iota // words of the passage
	modeTool                     // tool calls (plan.calls)
	modeChoice                   // one label of a constrained choice
)

const (
	// maxN bounds the n parameter so one request cannot ask for unbounded work.
	maxN = 128
	// maxTopLogprobs is vLLM's default --max-logprobs.
	maxTopLogprobs = 20
)

// plan is a validated request: everything needed to produce its answer,
// decided before the first byte of the response is written.
type plan struct {
	ep           endpoint
	stream       bool
	includeUsage bool // stream_options.include_usage
	n            int  // choices per prompt
	prompts      int  // prompts in the request (completions batches); 1 for chat
	promptTokens int  // all prompts together
	steps        int  // tokens per choice
	finish       string
	// engineFinish is vLLM's finished_reason metric label: "stop" or "length"
	// (a tool call finishes with "stop" in the engine).
	engineFinish string
	mode         outputMode
	// logprobs is set for chat "logprobs": true and for completions
	// "logprobs": N; topLogprobs is chat's top_logprobs or completions' N.
	logprobs    bool
	topLogprobs int
	calls       []toolCall     // modeTool, in order
	answers     []choiceAnswer // modeChoice: one per prompt
	// scripted are the tokens of a scenario's text answer (modeText);
	// nil for the passage.
	scripted []string
	// continueFrom, when > 0, is 1 + the passage token a continued answer
	// started at (continue_final_message), and offset the number of its
	// tokens the final assistant message already holds.
	continueFrom, offset int
	// reasoning is how many leading steps of a text choice are reasoning
	// (Profile.ReasoningTokens); reasonFrom and reasonOffset are to the
	// reasoning what continueFrom and offset are to the content.
	reasoning, reasonFrom, reasonOffset int
	// cache is each prompt's block hashes for the prefix cache (nil
	// without one); cached is the prompt tokens it held, set when the
	// request is admitted.
	cache  []cachedPrompt
	cached int
}

// thinkOpen and thinkClose delimit reasoning inside a final assistant
// message to continue, the way reasoning models' chat templates render a
// thinking turn: "<think>\n" + reasoning [+ "\n</think>\n\n" + content].
const (
	thinkOpen  = "<think>"
	thinkClose = "</think>"
)

// choiceAnswer is the label answered to one prompt of a modeChoice request.
type choiceAnswer struct {
	label   string
	logprob float64
	top     []labelLogprob // labels with probability > 0, most likely first
}

type labelLogprob struct {
	label   string
	logprob float64
}

// choices is the number of choices in the response.
func (p *plan) choices() int { return p.n * p.prompts }

// textStart is the passage token a text choice starts at: the beginning of a
// sentence that depends on the prompt size and the choice index.
func (p *plan) textStart(choice int) int {
	if p.continueFrom > 0 {
		return p.continueFrom - 1
	}
	if p.reasonFrom > 0 {
		// Continued reasoning: the content starts where the uncut answer's
		// would have, the sentence before the reasoning's.
		i := slices.Index(sentenceStarts, p.reasonFrom-1)
		return sentenceStarts[(i+len(sentenceStarts)-1)%len(sentenceStarts)]
	}
	return sentenceStarts[(p.promptTokens+choice)%len(sentenceStarts)]
}

// reasonStart is the passage token a choice's reasoning starts at: the
// sentence after the one its content starts at.
func (p *plan) reasonStart(choice int) int {
	if p.reasonFrom > 0 {
		return p.reasonFrom - 1
	}
	return sentenceStarts[(p.promptTokens+choice+1)%len(sentenceStarts)]
}

// token is the text of token step of a choice ("" for a tool call's header).
func (p *plan) token(choice, step int) string {
	switch p.mode {
	case modeChoice:
		return p.answers[choice/p.n].label
	case modeTool:
		call, piece := p.toolStep(step)
		if piece < 0 {
			return ""
		}
		return p.calls[call].pieces[piece]
	}
	if p.scripted != nil {
		return p.scripted[step]
	}
	if step < p.reasoning {
		return textToken(p.reasonStart(choice), step+p.reasonOffset)
	}
	return textToken(p.textStart(choice), step-p.reasoning+p.offset)
}

// tokenLogprob is the logprob of token step of a choice.
func (p *plan) tokenLogprob(choice, step int) float64 {
	if p.mode == modeChoice {
		return p.answers[choice/p.n].logprob
	}
	return textLogprob(p.textStart(choice), step)
}

// topCount is the number of top_logprobs entries of each token. Completions
// always list at least the sampled token, as vLLM does.
func (p *plan) topCount(choice int) int {
	k := p.topLogprobs
	if p.ep == completionEndpoint && k < 1 {
		k = 1
	}
	if p.mode == modeChoice {
		k = min(k, len(p.answers[choice/p.n].top))
	}
	return k
}

// top is entry j of the top_logprobs of token step of a choice. Text lists the
// sampled token first, then less likely alternatives; a choice lists the labels.
func (p *plan) top(choice, step, j int) (string, float64) {
	if p.mode == modeChoice {
		t := p.answers[choice/p.n].top[j]
		return t.label, t.logprob
	}
	tok, lp := p.token(choice, step), p.tokenLogprob(choice, step)
	if j == 0 {
		return tok, lp
	}
	return alternative(tok, lp, j-1)
}

// parseRoot checks that body is a JSON object and that it names the served
// model (or none).
func (s *Server) parseRoot(body []byte) (gjson.Result, *apiError) {
	if !gjson.ValidBytes(body) {
		return gjson.Result{}, badRequest("the request body is not valid JSON")
	}
	root := gjson.ParseBytes(body)
	if !root.IsObject() {
		return gjson.Result{}, badRequest("the request body must be a JSON object")
	}
	if m := root.Get("model"); m.Exists() && m.Type != gjson.Null {
		if m.Type != gjson.String {
			return gjson.Result{}, badRequest("model: must be a string")
		}
		if m.Str != s.profile.Model {
			return gjson.Result{}, &apiError{status: http.StatusNotFound, message: fmt.Sprintf("The model `%s` does not exist.", m.Str)}
		}
	}
	return root, nil
}

// parseCommon reads the fields chat and completions share: stream,
// stream_options.include_usage and n.
func parseCommon(root gjson.Result, p *plan) *apiError {
	var e *apiError
	if p.stream, e = boolField(root, "stream"); e != nil {
		return e
	}
	if p.includeUsage, e = boolField(root, "stream_options.include_usage"); e != nil {
		return e
	}
	n, set, e := intField(root, "n", 1, maxN)
	if e != nil {
		return e
	}
	p.n = 1
	if set {
		p.n = n
	}
	return nil
}

// parseChat validates a chat completion request.
func (s *Server) parseChat(body []byte) (*plan, *apiError) {
	root, e := s.parseRoot(body)
	if e != nil {
		return nil, e
	}
	p := &plan{ep: chatEndpoint, prompts: 1}
	if e = parseCommon(root, p); e != nil {
		return nil, e
	}
	maxTokens, explicit, e := intField(root, "max_completion_tokens", 1, math.MaxInt32)
	if e == nil && !explicit {
		maxTokens, explicit, e = intField(root, "max_tokens", 1, math.MaxInt32)
	}
	if e != nil {
		return nil, e
	}
	if p.logprobs, e = boolField(root, "logprobs"); e != nil {
		return nil, e
	}
	if p.topLogprobs, _, e = intField(root, "top_logprobs", 0, maxTopLogprobs); e != nil {
		return nil, e
	}
	labels, e := choiceLabels(root)
	if e != nil {
		return nil, e
	}

	msgs := root.Get("messages")
	if !msgs.IsArray() {
		return nil, badRequest("messages: field required (a non-empty array)")
	}
	var (
		chars, count int
		lastRole     string
		lastContent  gjson.Result
		messages     []Message // collected only for a Chooser
		h            history
	)
	// The prefix cache's view of the prompt: tools first, as chat
	// templates render them into the system turn, then the messages.
	bh := s.newBlockHasher()
	if t := root.Get("tools"); t.IsArray() {
		bh.write(t.Raw)
	}
	msgs.ForEach(func(_, m gjson.Result) bool {
		role := m.Get("role")
		if !m.IsObject() || role.Type != gjson.String {
			e = badRequest("messages[%d]: role: field required", count)
			return false
		}
		text, n, ok := contentText(m.Get("content"), labels != nil)
		if !ok {
			e = badRequest("messages[%d]: content: must be a string, an array of content parts or null", count)
			return false
		}
		chars += n
		bh.writeContent(m.Get("content"))
		m.Get("tool_calls").ForEach(func(_, tc gjson.Result) bool {
			chars += len(tc.Get("function.name").Str) + len(tc.Get("function.arguments").Str)
			bh.write(tc.Get("function.name").Str)
			bh.write(tc.Get("function.arguments").Str)
			return true
		})
		if labels != nil {
			messages = append(messages, Message{Role: role.Str, Content: text})
		}
		if role.Str == "assistant" {
			h.assistant(len(m.Get("tool_calls").Array()) > 0)
		}
		if role.Str == "user" {
			h.user(userText(m.Get("content")))
		}
		lastRole, lastContent = role.Str, m.Get("content")
		count++
		return true
	})
	if e != nil {
		return nil, e
	}
	if count == 0 {
		return nil, badRequest("messages: field required (a non-empty array)")
	}

	tools, e := parseTools(root)
	if e != nil {
		return nil, e
	}
	chars += tools.chars
	p.promptTokens = estimateTokens(chars)
	if e = s.fitContext(p, p.promptTokens, maxTokens, explicit); e != nil {
		return nil, e
	}
	p.cacheable(bh, p.promptTokens)
	// budget is what may cut a natural length: max_tokens, else the room
	// the context leaves.
	budget := math.MaxInt32
	switch {
	case explicit:
		budget = maxTokens
	case s.profile.MaxModelLen > 0:
		budget = s.profile.MaxModelLen - p.promptTokens
	}
	if s.profile.NaturalLengths {
		p.natural(s.naturalLength(h, h.turns), budget)
	}

	think := s.profile.ReasoningTokens
	if root.Get("chat_template_kwargs.enable_thinking").Type == gjson.False {
		think = 0
	}
	cont, e := boolField(root, "continue_final_message")
	if e != nil {
		return nil, e
	}
	if cont && labels == nil && lastRole == "assistant" && lastContent.Type == gjson.String {
		// vLLM continues the final assistant message instead of starting
		// a new one. A prefix this simulator wrote itself is continued
		// where it left off, so prefix and continuation read as one
		// answer of the length an uncut one would have had.
		if k := p.continuePrefix(lastContent.Str, think); k > 0 {
			// The prefix is k tokens of an answer whose natural length
			// is the default (a Responses or Messages answer is; a chat
			// one is too without max_tokens): the rest of it, or less
			// when max_tokens says so. A chat answer that asked for more
			// than the default is continued to the default only.
			rest := max(1, s.defaultMaxTokens-k)
			switch {
			case s.profile.NaturalLengths:
				// The answer the prefix starts (the final assistant
				// message is not an answer before it): the same natural
				// length, of which k tokens are written.
				p.natural(max(1, s.naturalLength(h, h.turns-1)-k), budget)
			case !explicit:
				p.steps = max(1, p.steps-k)
			case rest < p.steps:
				p.steps, p.finish, p.engineFinish = rest, "stop", "stop"
			}
		}
		p.reasoning = min(p.reasoning, p.steps)
		return p, nil
	}

	switch {
	case labels != nil:
		a, e := s.choose(ChoiceRequest{Choices: labels, Messages: messages, ToolsCount: tools.count})
		if e != nil {
			return nil, e
		}
		p.setChoice([]choiceAnswer{a})
	default:
		h.toolResult = lastRole == "tool"
		if s.answerTurn(p, tools, h) {
			p.reasoning = min(think, p.steps)
		}
	}
	return p, nil
}

// continuePrefix sets p up to continue prefix, a final assistant message,
// and returns how many tokens of the answer it holds (0 when it is not an
// answer this simulator wrote). With think > 0 the prefix may hold
// reasoning: "<think>" + reasoning, still open (the reasoning continues,
// then the content), or closed by "</think>" and followed by the content
// so far (the content continues).
func (p *plan) continuePrefix(prefix string, think int) int {
	rest, ok := strings.CutPrefix(prefix, thinkOpen)
	if think == 0 || !ok {
		start, k, ok := findPrefix(prefix)
		if !ok {
			return 0
		}
		p.continueFrom, p.offset = start+1, k
		return k
	}
	reasoning, content, closed := strings.Cut(rest, thinkClose)
	reasoning = strings.Trim(reasoning, "\n")
	held := 0
	if start, k, ok := findPrefix(reasoning); ok {
		p.reasonFrom, p.reasonOffset, held = start+1, k, k
	}
	if !closed {
		p.reasoning = max(0, think-held)
		return held
	}
	if start, k, ok := findPrefix(strings.TrimLeft(content, "\n")); ok {
		p.continueFrom, p.offset = start+1, k
		held += k
	}
	return held
}

// parseCompletion validates a legacy completion request.
func (s *Server) parseCompletion(body []byte) (*plan, *apiError) {
	root, e := s.parseRoot(body)
	if e != nil {
		return nil, e
	}
	p := &plan{ep: completionEndpoint}
	if e = parseCommon(root, p); e != nil {
		return nil, e
	}
	maxTokens, explicit, e := intField(root, "max_tokens", 1, math.MaxInt32)
	if e != nil {
		return nil, e
	}
	if p.topLogprobs, p.logprobs, e = intField(root, "logprobs", 0, maxTopLogprobs); e != nil {
		return nil, e
	}
	labels, e := choiceLabels(root)
	if e != nil {
		return nil, e
	}

	// A prompt is a string, a list of strings, a list of token ids, or a list
	// of lists of token ids; a list other than of token ids is a batch.
	var (
		texts     []string // prompt texts, for a Chooser
		maxPrompt int
	)
	// Each prompt of a batch is a request of its own to vLLM's engine, and
	// looks the prefix cache up on its own.
	addPrompt := func(tokens int, text string, bh *blockHasher) {
		p.prompts++
		p.promptTokens += tokens
		maxPrompt = max(maxPrompt, tokens)
		if labels != nil {
			texts = append(texts, text)
		}
		if bh != nil {
			p.cache = append(p.cache, cachedPrompt{tokens: tokens, blocks: bh.blocks})
		}
	}
	textBlocks := func(text string) *blockHasher {
		bh := s.newBlockHasher()
		bh.write(text)
		return bh
	}
	prompt := root.Get("prompt")
	switch {
	case prompt.Type == gjson.String:
		addPrompt(estimateTokens(len(prompt.Str)), prompt.Str, textBlocks(prompt.Str))
	case prompt.IsArray():
		var ids int
		idBlocks := s.newTokenIDHasher()
		prompt.ForEach(func(_, el gjson.Result) bool {
			switch {
			case el.Type == gjson.String && ids == 0:
				addPrompt(estimateTokens(len(el.Str)), el.Str, textBlocks(el.Str))
			case el.Type == gjson.Number && p.prompts == 0:
				ids++
				idBlocks.writeTokenID(el.Raw)
			case el.IsArray() && ids == 0:
				n, ok := countTokenIDs(el)
				if !ok || n == 0 {
					e = badRequest("prompt: a list of token ids must hold integers only and not be empty")
					return false
				}
				bh := s.newTokenIDHasher()
				el.ForEach(func(_, id gjson.Result) bool {
					bh.writeTokenID(id.Raw)
					return true
				})
				addPrompt(n, "", bh)
			default:
				e = badRequest("prompt: must be a string, a list of strings, a list of token ids or a list of such lists")
				return false
			}
			return true
		})
		if e != nil {
			return nil, e
		}
		if ids > 0 {
			addPrompt(ids, "", idBlocks)
		}
		if p.prompts == 0 {
			return nil, badRequest("prompt: must not be empty")
		}
	default:
		return nil, badRequest("prompt: field required (a string or a list)")
	}
	if e = s.fitContext(p, maxPrompt, maxTokens, explicit); e != nil {
		return nil, e
	}
	if labels != nil {
		answers := make([]choiceAnswer, len(texts))
		for i, text := range texts {
			if answers[i], e = s.choose(ChoiceRequest{Choices: labels, Prompt: text}); e != nil {
				return nil, e
			}
		}
		p.setChoice(answers)
	}
	return p, nil
}

// fitContext sets the completion length and rejects a request that cannot fit
// the context, with vLLM's message. Without an explicit max_tokens the
// default length is shortened to fit, as vLLM caps it at the room left.
func (s *Server) fitContext(p *plan, maxPrompt, maxTokens int, explicit bool) *apiError {
	want := s.defaultMaxTokens
	p.finish, p.engineFinish = "stop", "stop"
	if explicit {
		want = maxTokens
		p.finish, p.engineFinish = "length", "length"
	}
	p.steps = want
	limit := s.profile.MaxModelLen
	if limit <= 0 || maxPrompt+want <= limit {
		return nil
	}
	if explicit || maxPrompt >= limit {
		return badRequest("This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion). Please reduce the length of the messages or completion.",
			limit, maxPrompt+want, maxPrompt, want)
	}
	p.steps = limit - maxPrompt
	p.finish, p.engineFinish = "length", "length"
	return nil
}

// natural sets p's length to an answer of natural length n under budget:
// n tokens ending with "stop", or budget tokens ending with "length" when
// the budget is smaller.
func (p *plan) natural(n, budget int) {
	p.steps, p.finish, p.engineFinish = n, "stop", "stop"
	if budget < n {
		p.steps, p.finish, p.engineFinish = max(budget, 1), "length", "length"
	}
}

// fnvAdd hashes s and a separator into h.
func fnvAdd(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(s[i])) * fnvPrime
	}
	return (h ^ 0xff) * fnvPrime
}

// setChoice turns p into a constrained-choice answer: one token, the label.
func (p *plan) setChoice(answers []choiceAnswer) {
	p.mode = modeChoice
	p.answers = answers
	p.steps = 1
	p.finish, p.engineFinish = "stop", "stop"
}

// choose asks the Chooser for a label and turns its probabilities into
// logprobs.
func (s *Server) choose(req ChoiceRequest) (choiceAnswer, *apiError) {
	label, probs := s.chooser(req)
	known := false
	for _, c := range req.Choices {
		known = known || c == label
	}
	if !known {
		return choiceAnswer{}, &apiError{status: http.StatusInternalServerError,
			message: fmt.Sprintf("simulator chooser answered %q, which is not one of the choices", label)}
	}
	if probs == nil {
		probs = map[string]float64{label: 1}
	}
	a := choiceAnswer{label: label, logprob: logOf(probs[label])}
	seen := make(map[string]bool, len(req.Choices))
	for _, c := range req.Choices {
		if p := probs[c]; p > 0 && !seen[c] {
			seen[c] = true
			a.top = append(a.top, labelLogprob{label: c, logprob: math.Log(p)})
		}
	}
	sort.SliceStable(a.top, func(i, j int) bool { return a.top[i].logprob > a.top[j].logprob })
	return a, nil
}

// logOf is log(p), with vLLM's floor for impossible tokens.
func logOf(p float64) float64 {
	if p <= 0 || math.IsNaN(p) {
		return minLogprob
	}
	return math.Log(p)
}

// choiceLabels reads structured_outputs.choice (current vLLM) or the older
// top-level guided_choice (removed in vLLM 0.12); nil when the request has
// neither.
func choiceLabels(root gjson.Result) ([]string, *apiError) {
	field := "structured_outputs.choice"
	v := root.Get(field)
	if !v.Exists() || v.Type == gjson.Null {
		field = "guided_choice"
		v = root.Get(field)
	}
	if !v.Exists() || v.Type == gjson.Null {
		return nil, nil
	}
	if !v.IsArray() {
		return nil, badRequest("%s: must be a list of strings", field)
	}
	var labels []string
	ok := true
	v.ForEach(func(_, l gjson.Result) bool {
		ok = l.Type == gjson.String
		labels = append(labels, l.Str)
		return ok
	})
	if !ok || len(labels) == 0 {
		return nil, badRequest("%s: must be a non-empty list of strings", field)
	}
	return labels, nil
}

// readTools counts the tools of a request (each checked by check, its
// index given) and their size; a tools field that is not a list is an
// error made by errf, as each API words it.
func readTools(root gjson.Result, errf func(format string, args ...any) *apiError, check func(i int, tool gjson.Result) *apiError) (offeredTools, *apiError) {
	var t offeredTools
	tools := root.Get("tools")
	if !tools.Exists() || tools.Type == gjson.Null {
		return t, nil
	}
	if !tools.IsArray() {
		return t, errf("tools: must be a list")
	}
	var e *apiError
	tools.ForEach(func(_, tool gjson.Result) bool {
		if e = check(t.count, tool); e != nil {
			return false
		}
		t.count++
		return true
	})
	t.chars = len(tools.Raw)
	return t, e
}

// parseTools reads tools, tool_choice and parallel_tool_calls (default
// true, as in vLLM). Every function may be called, or the one tool_choice
// names; "required" or a named function forces a call, "none" calls
// nothing.
func parseTools(root gjson.Result) (offeredTools, *apiError) {
	tools := root.Get("tools")
	t, e := readTools(root, badRequest, func(i int, tool gjson.Result) *apiError {
		if name := tool.Get("function.name"); name.Type != gjson.String || name.Str == "" {
			return badRequest("tools[%d]: function.name: field required", i)
		}
		return nil
	})
	if e != nil {
		return t, e
	}
	if t.parallel, e = boolFieldDefault(root, "parallel_tool_calls", true); e != nil {
		return t, e
	}

	choice := root.Get("tool_choice")
	named := ""
	switch {
	case !choice.Exists() || choice.Type == gjson.Null || choice.Str == "auto":
	case choice.Str == "required":
		t.forced = true
	case choice.Str == "none":
		return t, nil
	case choice.IsObject():
		if named = choice.Get("function.name").Str; named == "" {
			return t, badRequest("tool_choice: function.name: field required")
		}
		t.forced = true
	default:
		return t, badRequest("tool_choice: must be \"none\", \"auto\", \"required\" or a named function")
	}
	if t.count == 0 {
		if named != "" || choice.Str == "required" {
			return t, badRequest("When using `tool_choice`, `tools` must be set.")
		}
		return t, nil
	}
	tools.ForEach(func(_, tool gjson.Result) bool {
		fn := tool.Get("function")
		if named == "" || fn.Get("name").Str == named {
			t.callable = append(t.callable, offeredTool{name: fn.Get("name").Str, schema: fn.Get("parameters")})
		}
		return true
	})
	if named != "" && len(t.callable) == 0 {
		return t, badRequest("Tool '%s' has not been passed in `tools`.", named)
	}
	if named != "" {
		t.callable = t.callable[:1]
	}
	return t, nil
}

// contentText is the text of a message's content: a string, or the "text" of
// each part of a list. n is its length; text is built only when want is set.
// ok is false for a content of another JSON type.
func contentText(c gjson.Result, want bool) (text string, n int, ok bool) {
	switch {
	case !c.Exists() || c.Type == gjson.Null:
		return "", 0, true
	case c.Type == gjson.String:
		return c.Str, len(c.Str), true
	case c.IsArray():
		var b strings.Builder
		c.ForEach(func(_, part gjson.Result) bool {
			if t := part.Get("text"); t.Type == gjson.String {
				n += len(t.Str)
				if want {
					b.WriteString(t.Str)
				}
			}
			return true
		})
		return b.String(), n, true
	}
	return "", 0, false
}

// countTokenIDs counts the integers of a token-id list; ok is false if it
// holds anything else.
func countTokenIDs(list gjson.Result) (n int, ok bool) {
	ok = true
	list.ForEach(func(_, id gjson.Result) bool {
		ok = id.Type == gjson.Number && id.Num == math.Trunc(id.Num)
		n++
		return ok
	})
	return n, ok
}

// estimateTokens is the simulator's tokenizer: about four bytes a token, at
// least one token.
func estimateTokens(bytes int) int {
	return max(1, bytes/4)
}

// intField reads an optional integer field within [lo, hi]; set is false when
// it is absent or null.
func intField(root gjson.Result, path string, lo, hi int) (v int, set bool, e *apiError) {
	r := root.Get(path)
	if !r.Exists() || r.Type == gjson.Null {
		return 0, false, nil
	}
	if r.Type != gjson.Number || r.Num != math.Trunc(r.Num) {
		return 0, false, badRequest("%s: must be an integer", path)
	}
	if r.Num < float64(lo) || r.Num > float64(hi) {
		return 0, false, badRequest("%s: must be between %d and %d, got %s", path, lo, hi, r.Raw)
	}
	return int(r.Num), true, nil
}

// boolFieldDefault reads an optional boolean field; absent or null is def.
func boolFieldDefault(root gjson.Result, path string, def bool) (bool, *apiError) {
	if r := root.Get(path); !r.Exists() || r.Type == gjson.Null {
		return def, nil
	}
	return boolField(root, path)
}

// boolField reads an optional boolean field; absent or null is false.
func boolField(root gjson.Result, path string) (bool, *apiError) {
	switch r := root.Get(path); r.Type {
	case gjson.True:
		return true, nil
	case gjson.False, gjson.Null: // an absent field has type Null
		return false, nil
	}
	return false, badRequest("%s: must be a boolean", path)
}
