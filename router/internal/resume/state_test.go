package resume

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/switchyard/switchyard/router/internal/wire"
)

// TestContinuationRelabelsReasoning: a continuation of the content (the
// cut came after content was sent) relays what the continuing replica's
// reasoning parser calls reasoning as content, since a thinking block
// closes once; a continuation of the reasoning relays it unchanged.
func TestContinuationRelabelsReasoning(t *testing.T) {
	for _, tc := range []struct {
		name      string
		inContent bool
		in, want  string
	}{
		{"after content", true, `{"id":"b","choices":[{"index":0,"delta":{"reasoning":" more"}}]}`, `{"id":"a","choices":[{"index":0,"delta":{"content":" more"}}]}`},
		{"after content, old field", true, `{"id":"b","choices":[{"index":0,"delta":{"reasoning_content":" more"}}]}`, `{"id":"a","choices":[{"index":0,"delta":{"content":" more"}}]}`},
		{"while reasoning", false, `{"id":"b","choices":[{"index":0,"delta":{"reasoning":" more"}}]}`, `{"id":"a","choices":[{"index":0,"delta":{"reasoning":" more"}}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := &State{maxBuffer: 1 << 20}
			rs.Observe([]byte(`{"id":"a","choices":[{"index":0,"delta":{"reasoning":"Think"}}]}`))
			if tc.inContent {
				rs.Observe([]byte(`{"id":"a","choices":[{"index":0,"delta":{"content":"Answer"}}]}`))
			}
			body, err := rs.resumeBody([]byte(`{"messages":[{"role":"user","content":"q"}]}`))
			if err != nil {
				t.Fatal(err)
			}
			want := "<think>\nThink"
			if tc.inContent {
				want += "\n</think>\n\nAnswer"
			}
			if got := gjson.GetBytes(body, "messages.1.content").Str; got != want {
				t.Errorf("partial message %q, want %q", got, want)
			}
			rs.roleDropped = true
			out, keep := rs.Continuation([]byte(tc.in))
			if !keep || string(out) != tc.want {
				t.Errorf("continuation %s, want %s", out, tc.want)
			}
		})
	}
}

// TestNewRefuses: a stream is resumable only for chat, Responses and
// Messages, with one choice and no logprobs.
func TestNewRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		ep   wire.Endpoint
		body string
		want string
	}{
		{"chat", wire.Chat, `{"model":"m"}`, ""},
		{"responses", wire.Responses, `{"model":"m"}`, ""},
		{"messages", wire.Messages, `{"model":"m"}`, ""},
		{"completions", wire.Completions, `{"model":"m"}`, "not a chat completion (nor a Responses or Messages stream)"},
		{"n > 1", wire.Chat, `{"model":"m","n":2}`, "n > 1"},
		{"logprobs", wire.Chat, `{"model":"m","logprobs":true}`, "logprobs were requested"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := New(tc.ep, []byte(tc.body), 1<<20, func() uint64 { return 1 })
			if rs.Broken != tc.want {
				t.Errorf("Broken %q, want %q", rs.Broken, tc.want)
			}
			if (rs.Typed != nil) != (tc.ep == wire.Responses || tc.ep == wire.Messages) {
				t.Errorf("Typed %T for %v", rs.Typed, tc.ep)
			}
		})
	}
}

// TestObserveBreaks: what a chat stream sends that a continuation could not
// follow marks it not resumable, and nothing after changes that.
func TestObserveBreaks(t *testing.T) {
	chunk := func(choice string) string { return `{"id":"c","choices":[` + choice + `]}` }
	for _, tc := range []struct {
		name   string
		events []string
		want   string
	}{
		{"text only", []string{chunk(`{"index":0,"delta":{"role":"assistant"}}`), chunk(`{"index":0,"delta":{"content":"Hi"}}`)}, ""},
		{"second choice", []string{chunk(`{"index":1,"delta":{"content":"x"}}`)}, "more than one choice"},
		{"finished", []string{chunk(`{"index":0,"delta":{},"finish_reason":"stop"}`)}, "the answer had finished"},
		{"logprobs", []string{chunk(`{"index":0,"delta":{"content":"x"},"logprobs":{"content":[]}}`)}, "logprobs were sent"},
		{"tool call", []string{chunk(`{"index":0,"delta":{"tool_calls":[{"index":0}]}}`)}, "a tool call was being sent"},
		{"reasoning after content", []string{chunk(`{"index":0,"delta":{"content":"A"}}`), chunk(`{"index":0,"delta":{"reasoning":"B"}}`)}, "reasoning came after content"},
		{"both in one delta after content", []string{chunk(`{"index":0,"delta":{"content":"A"}}`), chunk(`{"index":0,"delta":{"reasoning_content":"B","content":"C"}}`)}, "reasoning came after content"},
		{"outgrew the buffer", []string{chunk(`{"index":0,"delta":{"content":"` + strings.Repeat("x", 40) + `"}}`)}, "the answer outgrew resume.max_buffer"},
		{"broken stays broken", []string{chunk(`{"index":1,"delta":{}}`), chunk(`{"index":0,"delta":{"content":"x"}}`)}, "more than one choice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := New(wire.Chat, []byte(`{}`), 32, nil)
			for _, ev := range tc.events {
				rs.Observe([]byte(ev))
			}
			if rs.Broken != tc.want {
				t.Errorf("Broken %q, want %q", rs.Broken, tc.want)
			}
		})
	}
}

// TestRequestContinuesTheAnswer: the continuation's request is the
// client's with the text sent so far as a partial assistant message to
// continue, and max_tokens less what was generated (at least 1); with
// nothing sent it is the client's request unchanged.
func TestRequestContinuesTheAnswer(t *testing.T) {
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"q"}],"max_tokens":3,"max_completion_tokens":100}`)
	rs := New(wire.Chat, body, 1<<20, nil)
	path, got, err := rs.Request(body)
	if err != nil || path != "" || string(got) != string(body) {
		t.Fatalf("nothing sent: %q %s %v; want the request unchanged", path, got, err)
	}
	for _, d := range []string{`"reasoning":"Let me"`, `"reasoning":" think"`, `"content":"The answer"`, `"content":" is"`} {
		rs.Observe([]byte(`{"id":"c","choices":[{"index":0,"delta":{` + d + `}}]}`))
	}
	path, got, err = rs.Request(body)
	if err != nil || path != "" {
		t.Fatalf("Request: %q %v", path, err)
	}
	r := gjson.ParseBytes(got)
	want := map[string]any{
		"messages.1.role":        "assistant",
		"messages.1.content":     "<think>\nLet me think\n</think>\n\nThe answer is",
		"continue_final_message": true,
		"add_generation_prompt":  false,
		"max_tokens":             1.0,
		"max_completion_tokens":  96.0,
	}
	for path, v := range want {
		if g := r.Get(path).Value(); g != v {
			t.Errorf("%s = %v, want %v", path, g, v)
		}
	}
	if rs.Offset != 4 {
		t.Errorf("Offset %d, want the 4 deltas sent", rs.Offset)
	}
}

// TestContinuationRewrites: a continuation's chunks carry the first
// chunk's id, created and model; its role chunk is dropped once; its
// usage counts the text already sent as completion, not prompt.
func TestContinuationRewrites(t *testing.T) {
	rs := New(wire.Chat, []byte(`{}`), 1<<20, nil)
	rs.Observe([]byte(`{"id":"chatcmpl-a","created":100,"model":"pool-model","choices":[{"index":0,"delta":{"content":"one"}}]}`))
	rs.Observe([]byte(`{"id":"chatcmpl-a","created":100,"model":"pool-model","choices":[{"index":0,"delta":{"content":" two"}}]}`))
	if _, _, err := rs.Request([]byte(`{"messages":[]}`)); err != nil {
		t.Fatal(err)
	}
	rs.Begin()
	for _, tc := range []struct {
		in, want string
		keep     bool
	}{
		{`{"id":"b","created":200,"model":"other","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`, ``, false},
		{`{"id":"b","created":200,"model":"other","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`,
			`{"id":"chatcmpl-a","created":100,"model":"pool-model","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`, true},
		{`{"id":"b","choices":[{"index":0,"delta":{"content":" three"}}]}`, `{"id":"chatcmpl-a","choices":[{"index":0,"delta":{"content":" three"}}]}`, true},
		{`{"id":"b","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":1,"total_tokens":11}}`,
			`{"id":"chatcmpl-a","choices":[],"usage":{"prompt_tokens":8,"completion_tokens":3,"total_tokens":11}}`, true},
		{`[DONE]`, `[DONE]`, true},
	} {
		out, keep := rs.Continuation([]byte(tc.in))
		if keep != tc.keep || (keep && string(out) != tc.want) {
			t.Errorf("Continuation(%s) = %s, %v; want %s, %v", tc.in, out, keep, tc.want, tc.keep)
		}
	}
}
