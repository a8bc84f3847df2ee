package features

import (
	"strings"

	"github.com/switchyard/switchyard/classifier"
	"github.com/switchyard/switchyard/router/internal/wire"
	"github.com/tidwall/gjson"
)

// turnOf says what the conversation's last message is (a user message
// with text, or a tool result: a tool message, a user message of
// tool_result blocks only, a function_call_output item) and how many
// assistant turns followed the last user message with text (consecutive
// assistant items, such as a Responses answer's reasoning and calls, are
// one turn). "" for a request without messages.
func TurnOf(info *wire.Info) (last string, steps int) {
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

// opening is a conversation's first turn: the system and developer
// messages before the first user message, and that message.
type Opening struct {
	Raw          []string // the messages' JSON, as sent
	Messages     int
	PromptTokens int
}

// openingOf returns the opening of info's conversation and the classifier
// input read from it (the tools are the request's). A completions prompt
// is its own opening.
func OpeningOf(info *wire.Info) (Opening, classifier.Input) {
	var o Opening
	in := classifier.Input{}
	if !info.RawMessages.Exists() {
		in = ClassifierInput(info)
		o.Raw = []string{info.RawPrompt.Raw}
		o.Messages, o.PromptTokens = 1, info.PromptTokens
		return o, in
	}
	size := len(info.RawSystem.Raw)
	if info.RawSystem.Exists() {
		o.Raw = append(o.Raw, info.RawSystem.Raw)
		in.System = contentText(info.RawSystem)
	}
	info.RawMessages.ForEach(func(_, m gjson.Result) bool {
		o.Raw = append(o.Raw, m.Raw)
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
	o.Messages = len(o.Raw)
	if info.RawSystem.Exists() {
		o.Messages-- // the instructions or system field is not a message
	}
	in.Turns = o.Messages
	o.PromptTokens = wire.EstimateTokens(size + 1)
	if info.RawTools.IsArray() {
		o.PromptTokens += wire.EstimateTokens(len(info.RawTools.Raw))
	}
	in.Tools = allToolNames(info)
	return o, in
}

// classifierInput reads what the classifier looks at from the body fields.
func ClassifierInput(info *wire.Info) classifier.Input {
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
