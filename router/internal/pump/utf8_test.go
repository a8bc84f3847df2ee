package pump

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/switchyard/switchyard/router/internal/resume"
	"github.com/switchyard/switchyard/router/internal/wire"

	"github.com/tidwall/gjson"
)

// bad is what a replica may put inside a text delta: bytes that are not
// UTF-8 ("\xff\xfe"), the first two bytes of a three-byte character cut
// short ("\xe2\x82"), and a valid character after them.
const bad = "a\xff\xfe b\xe2\x82 é"

// clean is bad as every stream sends it: each byte that is not part of a
// UTF-8 character is U+FFFD, as encoding/json writes it (and so as a
// continuation's events, which it writes, carry it).
const clean = "a\uFFFD\uFFFD b\uFFFD\uFFFD é"

// TestInvalidUTF8Sanitised: a replica's invalid UTF-8 reaches the client
// of every API as U+FFFD, the same in the deltas and in the events that
// repeat the text (.done, the terminal event), so the client's JSON is
// valid UTF-8 and the deltas add up to the done text (issue 31 item 7).
// Before the fix the direct Responses and Messages streams (and chat's)
// passed the bytes through raw.
func TestInvalidUTF8Sanitised(t *testing.T) {
	for _, c := range []struct {
		ep     wire.Endpoint
		stream string
		// deltas and dones are the gjson paths of the text, by event type.
		deltas, dones map[string]string
	}{
		{wire.Chat, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"" + bad + "\"},\"finish_reason\":null}]}\n\n" +
			"data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n",
			map[string]string{"": "choices.0.delta.content"}, nil},
		{wire.Responses, "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"output\":[]}}\n\n" +
			"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":1,\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\"delta\":\"" + bad + "\"}\n\n" +
			"event: response.output_text.done\ndata: {\"type\":\"response.output_text.done\",\"sequence_number\":2,\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\"text\":\"" + bad + "\"}\n\n" +
			"event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":3,\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"output\":[{\"type\":\"message\",\"id\":\"msg_1\",\"content\":[{\"type\":\"output_text\",\"text\":\"" + bad + "\"}]}]}}\n\n",
			map[string]string{"response.output_text.delta": "delta"},
			map[string]string{"response.output_text.done": "text", "response.completed": "response.output.0.content.0.text"}},
		{wire.Messages, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n" +
			"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
			"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"" + bad + "\"}}\n\n" +
			"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
			"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
			map[string]string{"content_block_delta": "delta.text"}, nil},
	} {
		t.Run(c.ep.Path(), func(t *testing.T) {
			rec := httptest.NewRecorder()
			p := &Pump{W: rec, RC: http.NewResponseController(rec), API: c.ep}
			if err := p.Run(strings.NewReader(c.stream)); err != nil {
				t.Fatalf("run: %v", err)
			}
			out := rec.Body.Bytes()
			if !utf8.Valid(out) {
				t.Fatalf("the client got invalid UTF-8:\n%q", out)
			}
			var sent strings.Builder
			dones := 0
			for _, d := range sseEvents(out) {
				if !gjson.Valid(d) {
					if d != "[DONE]" {
						t.Errorf("not JSON: %q", d)
					}
					continue
				}
				typ := gjson.Get(d, "type").Str
				if path, ok := c.deltas[typ]; ok {
					sent.WriteString(gjson.Get(d, path).Str)
				}
				if path, ok := c.dones[typ]; ok {
					dones++
					if got := gjson.Get(d, path).Str; got != clean {
						t.Errorf("%s text %q, want %q", typ, got, clean)
					}
				}
			}
			if sent.String() != clean || dones != len(c.dones) {
				t.Errorf("deltas %q (%d done events), want %q (%d)", sent.String(), dones, clean, len(c.dones))
			}
		})
	}
}

// TestOversizeEventSanitised: a chat event over the size limit passes
// through unparsed in pieces, its invalid bytes replaced all the same, and
// a character cut by the end of a piece is held back for the next, not
// replaced.
func TestOversizeEventSanitised(t *testing.T) {
	head := "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\xff"
	pad := strings.Repeat("x", maxEvent-len(head)-1)
	stream := head + pad + "é\"}}]}\n\ndata: [DONE]\n\n" // é's two bytes straddle the end of the first piece
	rec := httptest.NewRecorder()
	p := &Pump{W: rec, RC: http.NewResponseController(rec)}
	if err := p.Run(strings.NewReader(stream)); err != nil {
		t.Fatalf("run: %v", err)
	}
	out := rec.Body.String()
	if want := strings.Replace(stream, "\xff", "\uFFFD", 1); out != want {
		t.Errorf("the client got %d bytes (valid UTF-8 %t), want the %d of the stream with U+FFFD for its one bad byte", len(out), utf8.ValidString(out), len(want))
	}
}

// continueResponses runs a Responses stream cut after one text delta
// carrying delta, then its chat continuation cont, through one pump, and
// returns what the client got.
func continueResponses(t *testing.T, delta, cont string) []byte {
	t.Helper()
	rec := httptest.NewRecorder()
	rs := resume.New(wire.Responses, []byte(`{"model":"m","input":"hi","stream":true}`), 1<<20, func() uint64 { return 7 })
	p := &Pump{W: rec, RC: http.NewResponseController(rec), API: wire.Responses, Resume: rs}
	cut := "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"output\":[],\"status\":\"in_progress\"}}\n\n" +
		"event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"sequence_number\":1,\"output_index\":0,\"item\":{\"type\":\"message\",\"id\":\"msg_1\",\"content\":[],\"role\":\"assistant\",\"status\":\"in_progress\"}}\n\n" +
		"event: response.content_part.added\ndata: {\"type\":\"response.content_part.added\",\"sequence_number\":2,\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\"part\":{\"type\":\"output_text\",\"text\":\"\"}}\n\n" +
		"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":3,\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\"delta\":\"" + delta + "\"}\n\n"
	if err := p.Run(strings.NewReader(cut)); err == nil || rs.Broken != "" {
		t.Fatalf("the cut stream: %v, not resumable: %q", err, rs.Broken)
	}
	if _, _, err := rs.Request([]byte(`{"model":"m","input":"hi","stream":true}`)); err != nil {
		t.Fatal(err)
	}
	rs.Begin()
	p.Refused, p.SawDone = nil, false
	if err := p.Run(strings.NewReader(cont)); err != nil {
		t.Fatalf("the continuation: %v", err)
	}
	return rec.Body.Bytes()
}

// itemText is the text a Responses client got three ways: the deltas, the
// item's done event and the completed response.
func itemText(out []byte) (deltas, done, completed string) {
	for _, d := range sseEvents(out) {
		switch gjson.Get(d, "type").Str {
		case "response.output_text.delta":
			deltas += gjson.Get(d, "delta").Str
		case "response.output_text.done":
			done = gjson.Get(d, "text").Str
		case "response.completed":
			completed = gjson.Get(d, "response.output.0.content.0.text").Str
		}
	}
	return deltas, done, completed
}

// TestInvalidUTF8ContinuedAgrees: a Responses stream cut after a delta
// with invalid UTF-8 and continued (resume) closes its item with the text
// the client was sent: the continuation's .done and response.completed
// repeat the U+FFFD the deltas carried. Before the fix the deltas carried
// the raw bytes and the continuation's closing events, which encoding/json
// writes, U+FFFD: the deltas no longer added up to the done text.
func TestInvalidUTF8ContinuedAgrees(t *testing.T) {
	out := continueResponses(t, bad, "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"}}]}\n\n"+
		"data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" more\"}}]}\n\n"+
		"data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	if !utf8.Valid(out) {
		t.Fatalf("the client got invalid UTF-8:\n%q", out)
	}
	if deltas, done, completed := itemText(out); deltas != clean+" more" || done != deltas || completed != deltas {
		want := clean + " more"
		t.Errorf("deltas %q, done %q, completed %q; want %q in each", deltas, done, completed, want)
	}
}

// TestLoneSurrogateEscapeSanitised: the \u escape of a lone UTF-16
// surrogate, which JavaScript's and Python's parsers turn into a string
// that is not Unicode (and a continuation, which decodes and re-encodes the
// text, into U+FFFD), reaches the client of every API as \ufffd; a pair,
// and an escaped backslash before "u", pass as they are. Before the fix the
// escape passed through.
func TestLoneSurrogateEscapeSanitised(t *testing.T) {
	const text = `a\ud83d b\ud83d\ude00 c\\ud800 d\udfff`
	const want = `a\ufffd b\ud83d\ude00 c\\ud800 d\ufffd`
	for _, c := range []struct {
		ep     wire.Endpoint
		stream string
	}{
		{wire.Chat, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"" + text + "\"}}]}\n\ndata: [DONE]\n\n"},
		{wire.Responses, "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":1,\"output_index\":0,\"delta\":\"" + text + "\"}\n\n" +
			"event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":2,\"response\":{\"id\":\"resp_1\",\"object\":\"response\"}}\n\n"},
		{wire.Messages, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"" + text + "\"}}\n\n" +
			"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"},
	} {
		rec := httptest.NewRecorder()
		p := &Pump{W: rec, RC: http.NewResponseController(rec), API: c.ep}
		if err := p.Run(strings.NewReader(c.stream)); err != nil {
			t.Fatalf("%s: run: %v", c.ep.Path(), err)
		}
		if out := rec.Body.String(); !strings.Contains(out, `"`+want+`"`) || strings.Contains(out, `a\ud83d `) {
			t.Errorf("%s: the client got\n%s\nwant the text %s", c.ep.Path(), out, want)
		}
	}
}

// TestContinuationContentAfterFinishDropped: a continuation (resume) that
// sends content after its finish reason has it dropped, as a first
// attempt's would be: the client's deltas, the item's done text and the
// completed response hold the answer up to the finish (issue 42, low
// finding; issue 31 item 7 asked for it: the continuation's translation
// relayed it).
func TestContinuationContentAfterFinishDropped(t *testing.T) {
	out := continueResponses(t, "Hello", "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" world\"}}]}\n\n"+
		"data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n"+
		"data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" EXTRA\"}}]}\n\n"+
		"data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4,\"total_tokens\":7}}\n\ndata: [DONE]\n\n")
	if deltas, done, completed := itemText(out); deltas != "Hello world" || done != deltas || completed != deltas {
		want := "Hello world"
		t.Errorf("deltas %q, done %q, completed %q; want %q in each", deltas, done, completed, want)
	}
}

// TestChatContinuationContentAfterFinishDropped: the same for a chat
// stream continued as chat.
func TestChatContinuationContentAfterFinishDropped(t *testing.T) {
	rec := httptest.NewRecorder()
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`)
	rs := resume.New(wire.Chat, body, 1<<20, func() uint64 { return 7 })
	p := &Pump{W: rec, RC: http.NewResponseController(rec), API: wire.Chat, Resume: rs}
	cut := "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hello\"}}]}\n\n"
	if err := p.Run(strings.NewReader(cut)); err == nil || rs.Broken != "" {
		t.Fatalf("the cut stream: %v, not resumable: %q", err, rs.Broken)
	}
	if _, _, err := rs.Request(body); err != nil {
		t.Fatal(err)
	}
	rs.Begin()
	p.Refused, p.SawDone = nil, false
	cont := "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" world\"}}]}\n\n" +
		"data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n" +
		"data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" EXTRA\"}}]}\n\ndata: [DONE]\n\n"
	if err := p.Run(strings.NewReader(cont)); err != nil {
		t.Fatalf("the continuation: %v", err)
	}
	var text string
	for _, d := range sseEvents(rec.Body.Bytes()) {
		text += gjson.Get(d, "choices.0.delta.content").Str
	}
	if text != "Hello world" {
		t.Errorf("the client got %q, want %q", text, "Hello world")
	}
}
