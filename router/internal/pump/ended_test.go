package pump

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/switchyard/switchyard/router/internal/wire"

	"github.com/tidwall/gjson"
)

// relay pumps stream for ep and returns the data of the events the client
// got, compacted.
func relay(t *testing.T, ep wire.Endpoint, stream string) ([]string, *Pump) {
	t.Helper()
	rec := httptest.NewRecorder()
	p := &Pump{W: rec, RC: http.NewResponseController(rec), API: ep}
	if err := p.Run(strings.NewReader(stream)); err != nil {
		t.Fatalf("run: %v", err)
	}
	var out []string
	for _, d := range sseEvents(rec.Body.Bytes()) {
		if gjson.Valid(d) {
			d = gjson.Get(d, "@ugly").Raw
		}
		out = append(out, d)
	}
	return out, p
}

func dataStream(datas ...string) string {
	var b strings.Builder
	for _, d := range datas {
		b.WriteString("data: " + d + "\n\n")
	}
	return b.String()
}

// TestChatContentAfterFinishDropped: once a choice of a chat or
// completions stream has its finish reason, a later content, reasoning or
// tool-call delta for it is not relayed (a chunk left with nothing is
// dropped whole); another choice's deltas, the usage chunk and [DONE]
// still pass, and the dropped deltas count no tokens (issue 31 item 7).
// Before the fix every one of them reached the client.
func TestChatContentAfterFinishDropped(t *testing.T) {
	c := func(choices string) string {
		return `{"id":"c","object":"chat.completion.chunk","choices":[` + choices + `]}`
	}
	stream := dataStream(
		c(`{"index":0,"delta":{"role":"assistant","content":"a"},"finish_reason":null},{"index":1,"delta":{"content":"x"},"finish_reason":null}`),
		c(`{"index":0,"delta":{"content":"b"},"finish_reason":"stop"}`),
		c(`{"index":0,"delta":{"content":"after"},"finish_reason":null}`),
		c(`{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]},"finish_reason":null},{"index":1,"delta":{"content":"y"},"finish_reason":null}`),
		c(`{"index":0,"delta":{"reasoning_content":"hm"},"finish_reason":"length"}`),
		c(`{"index":0,"delta":{},"finish_reason":null}`),
		c(`{"index":1,"delta":{},"finish_reason":"stop"}`),
		c(`{"index":1,"delta":{"content":"z"},"finish_reason":null}`),
		`{"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":4}}`,
		"[DONE]")
	got, p := relay(t, wire.Chat, stream)
	want := []string{
		c(`{"index":0,"delta":{"role":"assistant","content":"a"},"finish_reason":null},{"index":1,"delta":{"content":"x"},"finish_reason":null}`),
		c(`{"index":0,"delta":{"content":"b"},"finish_reason":"stop"}`),
		c(`{"index":1,"delta":{"content":"y"},"finish_reason":null}`),
		c(`{"index":0,"delta":{},"finish_reason":null}`), // carries nothing: passed as it is
		c(`{"index":1,"delta":{},"finish_reason":"stop"}`),
		`{"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":4}}`,
		"[DONE]"}
	if !slices.Equal(got, want) {
		t.Errorf("client got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if p.Deltas() != 6 {
		t.Errorf("counted %d deltas, want 6 (the chunks relayed from the first token on, [DONE] aside)", p.Deltas())
	}

	// The completions API: text after the finish reason.
	comp := func(choice string) string { return `{"id":"c","object":"text_completion","choices":[` + choice + `]}` }
	got, _ = relay(t, wire.Completions, dataStream(comp(`{"index":0,"text":"a","finish_reason":"stop"}`), comp(`{"index":0,"text":"b","finish_reason":null}`), "[DONE]"))
	if want := []string{comp(`{"index":0,"text":"a","finish_reason":"stop"}`), "[DONE]"}; !slices.Equal(got, want) {
		t.Errorf("completions: client got %q, want %q", got, want)
	}
}

// TestTypedContentAfterEndDropped: a Responses stream's events for an
// output item after its response.output_item.done, and every event after
// its terminal event, are not relayed; nor are a Messages stream's events
// for a content block after its content_block_stop, content blocks after
// the message_delta that gives the stop reason, and every event after
// message_stop (issue 31 item 7). Before the fix they reached the client.
func TestTypedContentAfterEndDropped(t *testing.T) {
	ev := func(data string) string { return "event: " + gjson.Get(data, "type").Str + "\ndata: " + data + "\n\n" }
	delta := func(index, seq string) string {
		return `{"type":"response.output_text.delta","item_id":"msg_` + index + `","output_index":` + index + `,"content_index":0,"delta":"late","sequence_number":` + seq + `}`
	}
	resp := []string{
		`{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","object":"response","output":[]}}`,
		`{"type":"response.output_item.added","item":{"type":"message","id":"msg_0"},"output_index":0,"sequence_number":1}`,
		`{"type":"response.output_text.delta","item_id":"msg_0","output_index":0,"content_index":0,"delta":"hi","sequence_number":2}`,
		`{"type":"response.output_item.done","item":{"type":"message","id":"msg_0"},"output_index":0,"sequence_number":3}`,
		delta("0", "4"),
		`{"type":"response.output_item.added","item":{"type":"message","id":"msg_1"},"output_index":1,"sequence_number":5}`,
		delta("1", "6"),
		`{"type":"response.completed","sequence_number":7,"response":{"id":"resp_1","object":"response","output":[]}}`,
		delta("1", "8"),
		`{"type":"response.in_progress","sequence_number":9,"response":{"id":"resp_1","object":"response"}}`,
	}
	var b strings.Builder
	for _, d := range resp {
		b.WriteString(ev(d))
	}
	got, p := relay(t, wire.Responses, b.String())
	var ids []int64
	for _, d := range got {
		ids = append(ids, gjson.Get(d, "sequence_number").Int())
	}
	if want := []int64{0, 1, 2, 3, 5, 6, 7}; !slices.Equal(ids, want) {
		t.Errorf("Responses: the client got events %v, want %v", ids, want)
	}
	if p.Deltas() != 2 {
		t.Errorf("Responses: counted %d deltas, want 2", p.Deltas())
	}

	msgs := []string{
		`{"type":"message_start","message":{"id":"m","usage":{"input_tokens":1,"output_tokens":1}}}`,
		`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}`,
		`{"type":"content_block_stop","index":0}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"late 0"}}`,
		`{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}`,
		`{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"there"}}`,
		`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":3}}`,
		`{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"late 1"}}`,
		`{"type":"content_block_start","index":2,"content_block":{"type":"text","text":""}}`,
		`{"type":"message_stop"}`,
		`{"type":"content_block_delta","index":2,"delta":{"type":"text_delta","text":"late 2"}}`,
		`{"type":"ping"}`,
	}
	b.Reset()
	for _, d := range msgs {
		b.WriteString(ev(d))
	}
	got, p = relay(t, wire.Messages, b.String())
	if want := []string{msgs[0], msgs[1], msgs[2], msgs[3], msgs[5], msgs[6], msgs[7], msgs[10]}; !slices.Equal(got, want) {
		t.Errorf("Messages: client got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if p.Deltas() != 2 {
		t.Errorf("Messages: counted %d deltas, want 2", p.Deltas())
	}
}

// TestNoChoice: the fast path after a finish reason takes only a chunk
// whose one "choices" member is surely empty.
func TestNoChoice(t *testing.T) {
	for data, want := range map[string]bool{
		`{"choices":[],"usage":{"prompt_tokens":1}}`:                     true,
		`{"id":"c", "choices" : [ ] }`:                                   true,
		`{"choices":[{"index":0,"delta":{"content":"a"}}]}`:              false,
		`{"choices":[],"choices":[{"index":0,"delta":{"content":"a"}}]}`: false,
		`{"ch\u006fices":[{"index":0}],"choices":[]}`:                    false,
		`{"x":"choices","choices":[{"index":0}]}`:                        false,
		`{"usage":{}}`: false,
	} {
		if got := noChoice([]byte(data)); got != want {
			t.Errorf("noChoice(%s) = %t, want %t", data, got, want)
		}
	}
}

// TestReusedIndexNotDropped: a replica that numbers a new Responses item
// with the output_index of one that was done, or starts a new Messages
// block with the index of one that stopped, loses nothing: items end by
// their id, and a block's start begins it again.
func TestReusedIndexNotDropped(t *testing.T) {
	ev := func(data string) string { return "event: " + gjson.Get(data, "type").Str + "\ndata: " + data + "\n\n" }
	resp := []string{
		`{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","object":"response","output":[]}}`,
		`{"type":"response.output_item.added","item":{"type":"reasoning","id":"rs_0"},"output_index":0,"sequence_number":1}`,
		`{"type":"response.output_item.done","item":{"type":"reasoning","id":"rs_0"},"output_index":0,"sequence_number":2}`,
		`{"type":"response.output_item.added","item":{"type":"message","id":"msg_1"},"output_index":0,"sequence_number":3}`,
		`{"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"content_index":0,"delta":"hi","sequence_number":4}`,
		`{"type":"response.output_item.done","item":{"type":"message","id":"msg_1"},"output_index":0,"sequence_number":5}`,
		`{"type":"response.completed","sequence_number":6,"response":{"id":"resp_1","object":"response","output":[]}}`,
	}
	var b strings.Builder
	for _, d := range resp {
		b.WriteString(ev(d))
	}
	if got, _ := relay(t, wire.Responses, b.String()); len(got) != len(resp) {
		t.Errorf("Responses: the client got %d of the %d events:\n%s", len(got), len(resp), strings.Join(got, "\n"))
	}
	msgs := []string{
		`{"type":"message_start","message":{"id":"m"}}`,
		`{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}`,
		`{"type":"content_block_stop","index":0}`,
		`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}`,
		`{"type":"content_block_stop","index":0}`,
		`{"type":"message_stop"}`,
	}
	b.Reset()
	for _, d := range msgs {
		b.WriteString(ev(d))
	}
	if got, _ := relay(t, wire.Messages, b.String()); len(got) != len(msgs) {
		t.Errorf("Messages: the client got %d of the %d events:\n%s", len(got), len(msgs), strings.Join(got, "\n"))
	}
}
