package features

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/switchyard/switchyard/classifier"
	"github.com/switchyard/switchyard/router/internal/wire"
)

// FuzzRead: whatever a client sends in any API's shape (tool results of
// any size and shape, invalid UTF-8, broken escapes at every cut, many
// messages), Read returns a bounded, valid summary and never panics.
func FuzzRead(f *testing.F) {
	f.Add(0, `{"model":"m","messages":[{"role":"user","content":"fix it"},{"role":"assistant","tool_calls":[{"id":"1","type":"function","function":{"name":"bash","arguments":"{}"}}]},{"role":"tool","tool_call_id":"1","content":"exit status 1"}]}`)
	f.Add(1, `{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"<environment_context>x</environment_context>"}]},{"type":"function_call","call_id":"a","name":"e","arguments":"{}"},{"type":"function_call_output","call_id":"a","output":[{"type":"input_text","text":"Traceback (most recent call last)"}]}]}`)
	f.Add(2, `{"model":"m","max_tokens":5,"system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","is_error":true,"content":[{"type":"text","text":"\u00e9\ud83d"}]}]}]}`)
	f.Add(0, `{"model":"m","messages":[{"role":"user","content":"<system-reminder>a</system-reminder><system-reminder>b"}]}`)
	f.Fuzz(func(t *testing.T, api int, body string) {
		eps := [...]wire.Endpoint{wire.Chat, wire.Responses, wire.Messages, wire.Completions}
		ep := eps[(api%len(eps)+len(eps))%len(eps)]
		// Long outputs and many messages, from small inputs.
		if strings.Contains(body, "REPEAT") {
			body = strings.ReplaceAll(body, "REPEAT", strings.Repeat(`x\n\"\u00e9`, 5000))
		}
		info, err := wire.Parse([]byte(body), ep, 64)
		if err != nil {
			return
		}
		for _, limit := range []int{64, 4000} {
			tr := Read(info, limit)
			for _, s := range []string{tr.Input.LastUser, tr.Input.Opening, tr.Input.ToolResult, tr.Input.System, tr.Input.Prompt} {
				if !utf8.ValidString(s) {
					t.Fatalf("invalid UTF-8 in %q", s)
				}
			}
			if n := len(tr.Input.ToolResult); n > 2*limit+64 {
				t.Fatalf("limit %d: tool result excerpt of %d bytes", limit, n)
			}
			sum := classifier.Summary(tr.Input, limit)
			if len(sum) > limit+1024 || !utf8.ValidString(sum) {
				t.Fatalf("limit %d: summary of %d bytes", limit, len(sum))
			}
		}
	})
}
