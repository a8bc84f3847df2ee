package router

import (
	"context"
	"crypto/sha256"
	"net/http"
	"strconv"
	"strings"

	"github.com/switchyard/switchyard/router/internal/wire"

	"github.com/switchyard/switchyard/classifier"
	"github.com/switchyard/switchyard/policy"
	"github.com/tidwall/gjson"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
)

// decide evaluates the policy, classifying lazily.
func (g *Gateway) decide(ctx context.Context, r *http.Request, x *exchange, explain bool) policy.Decision {
	s := x.snap
	info := x.info
	ctx, span := g.startSpan(ctx, "switchyard.route")
	defer span.End()
	key := ""
	if x.key != nil {
		key = x.key.name
	}
	var preq *policy.Request
	var in classifier.Input
	preq, in, x.sess.id = policyRequest(s, r, key, info)
	x.sess.set, x.sess.key = true, preq.Session
	d := s.Policy.Decide(preq, func() policy.Classification {
		if x.classify.force != "" {
			// explain --class: the class stands in for the classifier's
			// answer; everything else is decided as serving decides.
			return policy.Classification{Label: x.classify.force, Scores: map[string]float64{x.classify.force: 1}}
		}
		return g.classify(ctx, x, in)
	}, explain)
	if d.Sticky && d.Classified && s.classifier != nil {
		s.classifier.CountSticky(d.Class)
	}
	if span.IsRecording() {
		span.SetAttributes(attribute.String("switchyard.route", d.Route), attribute.StringSlice("switchyard.pools", d.Pools))
	}
	if !explain && g.opts.ShadowPath != "" {
		g.shadowDecide(ctx, x, d, preq, in)
	}
	return d
}

// policyRequest is what the policy and the classifier see of a request,
// and its session id. With a session, a conversation is decided on its
// opening alone, so every turn, on any instance, reaches the decision its
// first turn did; its decision is kept per API key and model name, so a
// session id cannot carry one key's (or model's) route to another.
func policyRequest(s *Snapshot, r *http.Request, key string, info *wire.Info) (*policy.Request, classifier.Input, string) {
	preq := &policy.Request{
		Model: info.Model, Stream: info.Stream, Tools: info.Tools, Messages: info.Messages,
		PromptTokens: info.PromptTokens, MaxTokens: info.MaxTokens, Header: r.Header, Key: key,
	}
	id, open, in := sessionID(s, r, info)
	if id == "" {
		in = classifierInput(info)
	}
	preq.System = in.System
	// The classifier reads the turn itself, a session's too: what its
	// last message is, how far into the loop, its sizes.
	if in.Last, in.Steps = turnOf(info); in.Last != "" {
		in.PromptTokens, in.MaxTokens = info.PromptTokens, info.MaxTokens
	}
	if id == "" {
		return preq, in, ""
	}
	preq.Session = id + key + "\x00" + info.Model
	preq.Messages, preq.PromptTokens = open.messages, open.promptTokens
	return preq, in, id
}

// turnOf says what the conversation's last message is (a user message
// with text, or a tool result: a tool message, a user message of
// tool_result blocks only, a function_call_output item) and how many
// assistant turns followed the last user message with text (consecutive
// assistant items, such as a Responses answer's reasoning and calls, are
// one turn). "" for a request without messages.
func turnOf(info *wire.Info) (last string, steps int) {
	inAssistant := false
	info.RawMessages.ForEach(func(_, m gjson.Result) bool {
		role, typ := m.Get("role").Str, m.Get("type").Str
		switch {
		case role == "assistant" || typ == "function_call" || typ == "custom_tool_call" || typ == "reasoning":
			if !inAssistant {
				steps++
			}
			inAssistant, last = true, ""
			return true
		case role == "tool" || typ == "function_call_output" || typ == "custom_tool_call_output":
			last = classifier.LastToolResult
		case role == "user" && contentText(m.Get("content")) != "":
			last, steps = classifier.LastInstruction, 0
		case role == "user" && m.Get(`content.#(type=="tool_result")`).Exists():
			last = classifier.LastToolResult // tool_result blocks only
		case role == "user":
			last, steps = classifier.LastInstruction, 0
		}
		inAssistant = false
		return true
	})
	return last, steps
}

// sessionHeaders are the session ids real agents send without being
// asked: Codex's session-id and Claude Code's x-claude-code-session-id.
var sessionHeaders = [...]string{"session-id", "x-claude-code-session-id"}

// sessionID is a fixed-size digest of the request's session id, "" when
// it has none (or session: is not configured). The id is, in order: the
// configured session header; an id agents send on their own (the
// sessionHeaders, then the body's prompt_cache_key); the body's user field
// with session.from_user; and with session.implicit, the conversation's
// opening. Ids are client input of any length; hashing them keeps every
// session key the same small size, and the same on every instance.
//
// With an id it also returns the conversation's opening and the classifier
// input read from it, computed once.
func sessionID(s *Snapshot, r *http.Request, info *wire.Info) (string, opening, classifier.Input) {
	se := s.Config.Session
	if se == nil {
		return "", opening{}, classifier.Input{}
	}
	id := ""
	if se.Header != "" {
		id = r.Header.Get(se.Header)
	}
	for _, h := range sessionHeaders {
		if id == "" {
			id = r.Header.Get(h)
		}
	}
	if id == "" {
		id = info.CacheKey
	}
	if id == "" && se.FromUser {
		id = info.User
	}
	if id == "" && !se.Implicit {
		return "", opening{}, classifier.Input{}
	}
	open, in := openingOf(info)
	if id != "" {
		sum := sha256.Sum256([]byte("id\x00" + id))
		return string(sum[:16]), open, in
	}
	h := sha256.New()
	h.Write([]byte("opening\x00"))
	for _, raw := range open.raw {
		h.Write([]byte(raw))
		h.Write([]byte{0})
	}
	h.Write([]byte(info.RawTools.Raw))
	return string(h.Sum(nil)[:16]), open, in
}

// opening is a conversation's first turn: the system and developer
// messages before the first user message, and that message.
type opening struct {
	raw          []string // the messages' JSON, as sent
	messages     int
	promptTokens int
}

// openingOf returns the opening of info's conversation and the classifier
// input read from it (the tools are the request's). A completions prompt
// is its own opening.
func openingOf(info *wire.Info) (opening, classifier.Input) {
	var o opening
	in := classifier.Input{}
	if !info.RawMessages.Exists() {
		in = classifierInput(info)
		o.raw = []string{info.RawPrompt.Raw}
		o.messages, o.promptTokens = 1, info.PromptTokens
		return o, in
	}
	size := len(info.RawSystem.Raw)
	if info.RawSystem.Exists() {
		o.raw = append(o.raw, info.RawSystem.Raw)
		in.System = contentText(info.RawSystem)
	}
	info.RawMessages.ForEach(func(_, m gjson.Result) bool {
		o.raw = append(o.raw, m.Raw)
		size += len(m.Raw) + 1
		switch m.Get("role").Str {
		case "system", "developer":
			if in.System == "" {
				in.System = contentText(m.Get("content"))
			}
			return true
		case "user":
			in.LastUser = contentText(m.Get("content"))
			return false
		}
		return true
	})
	o.messages = len(o.raw)
	if info.RawSystem.Exists() {
		o.messages-- // the instructions or system field is not a message
	}
	in.Turns = o.messages
	o.promptTokens = wire.EstimateTokens(size + 1)
	if info.RawTools.IsArray() {
		o.promptTokens += wire.EstimateTokens(len(info.RawTools.Raw))
	}
	in.Tools = allToolNames(info)
	return o, in
}

func (g *Gateway) classify(ctx context.Context, x *exchange, in classifier.Input) policy.Classification {
	c := x.snap.classifier
	if c == nil {
		return policy.Classification{}
	}
	ctx, span := g.startSpan(ctx, "switchyard.classify")
	defer span.End()
	res := c.Classify(ctx, in)
	if span.IsRecording() {
		if res.Label != "" {
			span.SetAttributes(attribute.String("switchyard.class", res.Label))
		}
		if res.Outcome != "" {
			span.SetAttributes(attribute.String("switchyard.classifier.result", res.Outcome))
		}
	}
	x.classify.res = res
	if res.Err != nil {
		span.SetStatus(codes.Error, res.Err.Error())
		if res.Outcome != classifier.OutcomeCircuitOpen { // the breaker logs when it opens and closes
			g.log.Warn("classifier failed; using on_error label", "request_id", x.id, "label", res.Label, "result", res.Outcome, "error", res.Err.Error())
		}
	}
	return policy.Classification{Label: res.Label, Scores: res.Scores, Fallback: res.Fallback()}
}

// classifierInput reads what the classifier looks at from the body fields.
func classifierInput(info *wire.Info) classifier.Input {
	in := classifier.Input{Turns: info.Messages}
	if info.RawPrompt.Exists() {
		if info.RawPrompt.Type == gjson.String {
			in.Prompt = info.RawPrompt.Str
		} else {
			in.Prompt = info.RawPrompt.Get("0").String()
		}
		return in
	}
	if info.RawSystem.Exists() {
		in.System = contentText(info.RawSystem)
	}
	info.RawMessages.ForEach(func(_, m gjson.Result) bool {
		switch m.Get("role").Str {
		case "system", "developer":
			if in.System == "" {
				in.System = contentText(m.Get("content"))
			}
		case "user":
			if t := contentText(m.Get("content")); t != "" {
				in.LastUser = t // not a turn of tool results only
			}
		}
		return true
	})
	in.Tools = allToolNames(info)
	return in
}

// allToolNames are the names of every tool the request offers, those of
// additional_tools input items included.
func allToolNames(info *wire.Info) []string {
	out := toolNames(info.RawTools)
	for _, t := range info.AdditionalTools {
		out = append(out, toolNames(t)...)
	}
	return out
}

// toolNames lists the names of the tools offered: chat's function.name,
// the Responses and Messages APIs' name, and the tools inside a Responses
// namespace group.
func toolNames(tools gjson.Result) []string {
	var out []string
	tools.ForEach(func(_, t gjson.Result) bool {
		switch {
		case t.Get("function.name").Exists():
			out = append(out, t.Get("function.name").String())
		case t.Get("tools").IsArray():
			out = append(out, toolNames(t.Get("tools"))...)
		case t.Get("name").Exists():
			out = append(out, t.Get("name").String())
		}
		return true
	})
	return out
}

// contentText returns a message content's text: the string, or the text
// parts of a content array joined.
func contentText(c gjson.Result) string {
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

// affinityKey groups requests sharing a prompt prefix: the session id when
// there is one, else a hash of the leading depth messages.
func affinityKey(x *exchange, r *http.Request, depth int) string {
	if !x.sess.set { // a request no policy decided (a pinned pool)
		x.sess.id, _, _ = sessionID(x.snap, r, x.info)
		x.sess.set = true
	}
	if x.sess.id != "" {
		return "s:" + x.sess.id
	}
	var h uint64 = 14695981039346656037
	n := 0
	src := x.info.RawMessages
	if !src.Exists() {
		src = x.info.RawPrompt
	}
	hash := func(raw string) {
		for i := 0; i < len(raw); i++ {
			h = (h ^ uint64(raw[i])) * 1099511628211
		}
	}
	if src.IsArray() {
		src.ForEach(func(_, m gjson.Result) bool {
			hash(m.Raw)
			n++
			return n < depth
		})
	} else {
		hash(src.Raw)
	}
	return "p:" + strconv.FormatUint(h, 16)
}
