package features

import (
	"testing"

	"github.com/switchyard/switchyard/classifier"
	"github.com/switchyard/switchyard/router/internal/wire"
)

// TestTurnOf: what the classifier is told of a turn, on the three APIs.
func TestTurnOf(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ep    wire.Endpoint
		body  string
		last  string
		steps int
	}{
		{"chat instruction", wire.Chat, `{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"fix it"}]}`, classifier.LastInstruction, 0},
		{"chat tool loop", wire.Chat, `{"model":"m","messages":[{"role":"user","content":"fix it"},
			{"role":"assistant","tool_calls":[{"id":"1","type":"function","function":{"name":"read","arguments":"{}"}}]},{"role":"tool","tool_call_id":"1","content":"x"},
			{"role":"assistant","tool_calls":[{"id":"2","type":"function","function":{"name":"read","arguments":"{}"}}]},{"role":"tool","tool_call_id":"2","content":"y"}]}`, classifier.LastToolResult, 2},
		{"chat new instruction after a loop", wire.Chat, `{"model":"m","messages":[{"role":"user","content":"fix it"},
			{"role":"assistant","content":"done"},{"role":"user","content":[{"type":"text","text":"now test it"}]}]}`, classifier.LastInstruction, 0},
		{"chat image only", wire.Chat, `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:,"}}]}]}`, classifier.LastInstruction, 0},
		{"assistant prefill", wire.Chat, `{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"Sure"}]}`, "", 1},
		{"messages tool_result", wire.Messages, `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"fix it"},
			{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"Read","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"x"}]}]}`, classifier.LastToolResult, 1},
		{"responses one answer of several items", wire.Responses, `{"model":"m","input":[{"type":"message","role":"user","content":"fix it"},
			{"type":"reasoning","summary":[]},{"type":"function_call","call_id":"a","name":"exec","arguments":"{}"},{"type":"function_call","call_id":"b","name":"exec","arguments":"{}"},
			{"type":"function_call_output","call_id":"a","output":"x"},{"type":"function_call_output","call_id":"b","output":"y"}]}`, classifier.LastToolResult, 1},
		{"responses string input", wire.Responses, `{"model":"m","input":"fix it"}`, classifier.LastInstruction, 0},
		{"completions", wire.Completions, `{"model":"m","prompt":"fix it"}`, "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			info, err := wire.Parse([]byte(tc.body), tc.ep, 64)
			if err != nil {
				t.Fatal(err)
			}
			in := Read(info, 4000).Input
			if last, steps := in.Last, in.Steps; last != tc.last || steps != tc.steps {
				t.Errorf("turnOf = %q, %d; want %q, %d", last, steps, tc.last, tc.steps)
			}
		})
	}
}
