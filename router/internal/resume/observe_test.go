package resume

import (
	"strings"
	"testing"

	"github.com/switchyard/switchyard/router/internal/wire"
)

// TestResponsesObserveBreaks: a Responses stream is not resumable once it
// sent a tool call, a refusal, an error, its end, another item type, or a
// delta outside its item.
func TestResponsesObserveBreaks(t *testing.T) {
	created := `{"type":"response.created","response":{"id":"resp_1","object":"response","status":"in_progress","output":[]}}`
	for _, tc := range []struct {
		name, event, want string
	}{
		{"text", `{"type":"response.output_item.added","output_index":0,"item":{"id":"m","type":"message"}}`, ""},
		{"function call", `{"type":"response.output_item.added","output_index":0,"item":{"type":"function_call"}}`, "a tool call was being sent"},
		{"custom tool call", `{"type":"response.output_item.added","output_index":0,"item":{"type":"custom_tool_call"}}`, "a tool call was being sent"},
		{"arguments", `{"type":"response.function_call_arguments.delta","delta":"{"}`, "a tool call was being sent"},
		{"web search", `{"type":"response.output_item.added","output_index":0,"item":{"type":"web_search_call"}}`, `an output item of type "web_search_call" was being sent`},
		{"delta outside an item", `{"type":"response.output_text.delta","delta":"x"}`, "a delta came outside its output item"},
		{"refusal", `{"type":"response.refusal.delta","delta":"no"}`, "a refusal was being sent"},
		{"error", `{"type":"error","message":"x"}`, "the replica sent an error event"},
		{"finished", `{"type":"response.completed","response":{}}`, "the answer had finished"},
		{"incomplete", `{"type":"response.incomplete","response":{}}`, "the answer had finished"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := New(wire.Responses, []byte(`{}`), 1<<20, nil)
			observe(rs, created, tc.event)
			if rs.Broken != tc.want {
				t.Errorf("Broken %q, want %q", rs.Broken, tc.want)
			}
		})
	}
}

// TestUnstarted: a typed stream cut before its first event has nothing a
// continuation could follow.
func TestUnstarted(t *testing.T) {
	for _, tc := range []struct {
		ep           wire.Endpoint
		first, wants string
	}{
		{wire.Responses, `{"type":"response.created","response":{"id":"resp_1"}}`, "the stream had not sent response.created"},
		{wire.Messages, `{"type":"message_start","message":{"usage":{"input_tokens":1}}}`, "the stream had not sent message_start"},
	} {
		rs := New(tc.ep, []byte(`{}`), 1<<20, nil)
		if got := rs.Typed.Unstarted(); got != tc.wants {
			t.Errorf("%v before its first event: %q, want %q", tc.ep, got, tc.wants)
		}
		observe(rs, tc.first)
		if got := rs.Typed.Unstarted(); got != "" {
			t.Errorf("%v after its first event: %q", tc.ep, got)
		}
	}
}

// TestRequestNotTranslatable: a typed request that chat completions
// cannot express is not continued, and the error says why.
func TestRequestNotTranslatable(t *testing.T) {
	body := `{"model":"auto","stream":true,"max_tokens":24,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"tool_use","name":"f","input":{}}]},{"role":"user","content":"y"}]}`
	rs := New(wire.Messages, []byte(body), 1<<20, nil)
	if _, _, err := rs.Request([]byte(body)); err == nil || !strings.Contains(err.Error(), "cannot be continued through chat completions") {
		t.Errorf("Request = %v, want the reason it cannot be continued", err)
	}
}
