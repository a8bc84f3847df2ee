package resume

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/tidwall/gjson"

	"github.com/switchyard/switchyard/router/internal/wire"
)

// relay reads the events of out as the pump relays them: each is fed
// back to rs.Typed.Observe, and their data lines are returned.
func relay(t *testing.T, rs *State, out []byte) []string {
	t.Helper()
	var lines []string
	for _, line := range strings.Split(string(out), "\n") {
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			root := gjson.Parse(data)
			rs.Typed.Observe(root.Get("type").Str, root)
			lines = append(lines, data)
		}
	}
	return lines
}

func observe(rs *State, events ...string) {
	for _, ev := range events {
		root := gjson.Parse(ev)
		rs.Typed.Observe(root.Get("type").Str, root)
	}
}

// TestMessagesContinuation: a Messages stream cut in its text is continued
// through chat completions: the request carries the thinking and text sent
// as a partial message, and the continuation's chunks become the same
// block's text deltas, closed by message_delta (vLLM's stop reason, the
// prompt's exact input tokens, the output counting the text sent before)
// and message_stop.
func TestMessagesContinuation(t *testing.T) {
	body := []byte(`{"model":"m","max_tokens":50,"stream":true,"messages":[{"role":"user","content":"q"}]}`)
	rs := New(wire.Messages, body, 1<<20, func() uint64 { return 0xab })
	if got := rs.Typed.Unstarted(); got == "" {
		t.Error("a stream with no message_start reads as started")
	}
	observe(rs,
		`{"type":"message_start","message":{"id":"msg_1","usage":{"input_tokens":12,"output_tokens":1}}}`,
		`{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Hmm"}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"s"}}`,
		`{"type":"content_block_stop","index":0}`,
		`{"type":"ping"}`,
		`{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}`,
		`{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Yes"}}`,
	)
	if rs.Broken != "" || rs.Typed.Unstarted() != "" {
		t.Fatalf("not resumable: %q %q", rs.Broken, rs.Typed.Unstarted())
	}
	path, req, err := rs.Request(body)
	if err != nil || path != wire.Chat.Path() {
		t.Fatalf("Request: %q %v", path, err)
	}
	if got := gjson.GetBytes(req, "messages.#(role==\"assistant\").content").Str; got != "<think>\nHmm\n</think>\n\nYes" {
		t.Errorf("partial message %q", got)
	}
	rs.Begin()
	var lines []string
	for _, chunk := range []string{
		`{"choices":[{"index":0,"delta":{"reasoning":" and"}}]}`, // after content: text
		`{"choices":[{"index":0,"delta":{"content":" no."}}]}`,
	} {
		out, err := rs.Typed.Translate(0, rs.ReadChatDelta([]byte(chunk)), false)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, relay(t, rs, out)...)
	}
	rs.Finish, rs.Usage = "length", gjson.Parse(`{"prompt_tokens":20,"completion_tokens":2}`)
	out, err := rs.Typed.Translate(0, ChatDelta{}, true)
	if err != nil {
		t.Fatal(err)
	}
	lines = append(lines, relay(t, rs, out)...)
	want := []string{
		`{"type":"content_block_delta","delta":{"type":"text_delta","text":" and"},"index":1}`,
		`{"type":"content_block_delta","delta":{"type":"text_delta","text":" no."},"index":1}`,
		`{"type":"content_block_stop","index":1}`,
		`{"type":"message_delta","delta":{"stop_reason":"max_tokens","stop_sequence":null},"usage":{"input_tokens":12,"output_tokens":4}}`,
		`{"type":"message_stop"}`,
	}
	if diff := cmp.Diff(want, lines); diff != "" {
		t.Errorf("translated events (-want +got):\n%s", diff)
	}
}

// TestMessagesContinuationOpensBlocks: a continuation of the thinking
// goes on in the thinking block; its first text closes it (with a
// signature, as vLLM sends one) and opens a text block after it.
func TestMessagesContinuationOpensBlocks(t *testing.T) {
	rs := New(wire.Messages, []byte(`{}`), 1<<20, func() uint64 { return 1 })
	observe(rs,
		`{"type":"message_start","message":{"usage":{"input_tokens":3}}}`,
		`{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Hmm"}}`,
	)
	if _, _, err := rs.Request([]byte(`{"model":"m","max_tokens":9,"messages":[{"role":"user","content":"q"}]}`)); err != nil {
		t.Fatal(err)
	}
	rs.Begin()
	out, err := rs.Typed.Translate(0, rs.ReadChatDelta([]byte(`{"choices":[{"index":0,"delta":{"reasoning":" more","content":"Done"}}]}`)), false)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`{"type":"content_block_delta","delta":{"type":"thinking_delta","thinking":" more"},"index":0}`,
		`{"type":"content_block_delta","delta":{"type":"signature_delta","signature":"00000000000000010000000000000001"},"index":0}`,
		`{"type":"content_block_stop","index":0}`,
		`{"type":"content_block_start","content_block":{"type":"text","text":""},"index":1}`,
		`{"type":"content_block_delta","delta":{"type":"text_delta","text":"Done"},"index":1}`,
	}
	if diff := cmp.Diff(want, relay(t, rs, out)); diff != "" {
		t.Errorf("translated events (-want +got):\n%s", diff)
	}
	if _, err := rs.Typed.Translate(0, ChatDelta{}, true); !errors.Is(err, ErrNotContinued) {
		t.Errorf("a continuation without a finish reason: %v; want ErrNotContinued", err)
	}
}

// TestMessagesObserveBreaks: a Messages stream is not resumable once it
// sent a tool call, another block type, its end, or an event unknown here.
func TestMessagesObserveBreaks(t *testing.T) {
	start := `{"type":"message_start","message":{"usage":{"input_tokens":3}}}`
	for _, tc := range []struct {
		name, event, want string
	}{
		{"tool use", `{"type":"content_block_start","index":0,"content_block":{"type":"tool_use"}}`, "a tool call was being sent"},
		{"image block", `{"type":"content_block_start","index":0,"content_block":{"type":"image"}}`, `a content block of type "image" was being sent`},
		{"delta outside a block", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x"}}`, "a delta came outside its content block"},
		{"finished", `{"type":"message_delta","delta":{"stop_reason":"end_turn"}}`, "the answer had finished"},
		{"unknown event", `{"type":"mystery"}`, `the replica sent an event of type "mystery"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := New(wire.Messages, []byte(`{}`), 1<<20, nil)
			observe(rs, start, tc.event)
			if rs.Broken != tc.want {
				t.Errorf("Broken %q, want %q", rs.Broken, tc.want)
			}
		})
	}
}
