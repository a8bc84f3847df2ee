package pump

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/switchyard/switchyard/router/internal/wire"

	"github.com/tidwall/gjson"
)

// runTyped pumps a Responses or Messages stream and returns what the
// client got, the pump and its verdict.
func runTyped(t *testing.T, ep wire.Endpoint, stream string) (string, *Pump, error) {
	t.Helper()
	rec := httptest.NewRecorder()
	p := &Pump{W: rec, RC: http.NewResponseController(rec), API: ep, IDTag: "0123456789ab", IDs: wire.ResponseIDs{Secret: []byte("s")}}
	err := p.Run(strings.NewReader(stream))
	return rec.Body.String(), p, err
}

// TestDoneBeforeTerminalEvent: on the Responses and Messages APIs a [DONE]
// before the API's terminal event ends an incomplete stream; before the
// fix it was taken as success.
func TestDoneBeforeTerminalEvent(t *testing.T) {
	for _, c := range []struct {
		ep           wire.Endpoint
		head, ending string
	}{
		{wire.Responses, "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_1\",\"object\":\"response\"}}\n\n",
			"event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":1,\"response\":{\"id\":\"resp_1\",\"object\":\"response\"}}\n\n"},
		{wire.Messages, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n",
			"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"},
	} {
		if _, _, err := runTyped(t, c.ep, c.head+"data: [DONE]\n\n"); !errors.Is(err, ErrStreamCut) {
			t.Errorf("%v: [DONE] without the terminal event: %v, want a cut stream", c.ep, err)
		}
		if out, _, err := runTyped(t, c.ep, c.head+c.ending+"data: [DONE]\n\n"); err != nil || strings.Contains(out, "[DONE]") {
			t.Errorf("%v: a whole stream: %v %q", c.ep, err, out)
		}
	}
}

// TestLargeTerminalEvent: a Responses stream whose response.completed
// echoes 4.5 MB of metadata (over the 4 MiB a chat event may hold) is
// still read whole: complete, with its ids rewritten. Before the fix the
// event passed through unparsed, the gateway appended an error event after
// it, logged 502 and counted a 5xx against the replica.
func TestLargeTerminalEvent(t *testing.T) {
	meta := `{"k":"` + strings.Repeat("m", 4500<<10) + `"}`
	resp := `{"id":"resp_1","object":"response","metadata":` + meta + `}`
	stream := "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":" + resp + "}\n\n" +
		"event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":1,\"response\":" + resp + "}\n\n"
	out, p, err := runTyped(t, wire.Responses, stream)
	if err != nil || !p.complete() {
		t.Fatalf("run = %v, complete %t", err, p.complete())
	}
	want := p.IDs.Encode("0123456789ab", "resp_1")
	for _, ev := range sseEvents([]byte(out)) {
		if id := gjson.Get(ev, "response.id").Str; id != want {
			t.Errorf("%s: response.id %.40q, want %s", gjson.Get(ev, "type").Str, id, want)
		}
	}
	// One past the bound is refused, never passed through unread.
	huge := "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"r\",\"metadata\":\"" + strings.Repeat("m", maxTypedEvent) + "\"}}\n\n"
	if _, _, err := runTyped(t, wire.Responses, huge); !errors.Is(err, ErrStreamCut) || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("an event over %d bytes: %v", maxTypedEvent, err)
	}
}

// TestDeepTypedEventRefused: replica data is as untrusted as a client's:
// a Responses or Messages event nesting deeper than the bound is not
// parsed and ends the stream.
func TestDeepTypedEventRefused(t *testing.T) {
	deep := strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000)
	for _, ep := range []wire.Endpoint{wire.Responses, wire.Messages} {
		_, _, err := runTyped(t, ep, "event: x\ndata: {\"type\":\"message_delta\",\"usage\":"+deep+"}\n\n")
		if !errors.Is(err, ErrStreamCut) || !strings.Contains(err.Error(), "deeper") {
			t.Errorf("%v: %v", ep, err)
		}
	}
}

// TestEchoAtTheRequestBoundPasses: a replica's event may nest deeper than
// requests may (it echoes the request inside its own structure): a
// request at the bound must not have its answer refused and its replica
// charged (review finding).
func TestEchoAtTheRequestBoundPasses(t *testing.T) {
	params := strings.Repeat(`{"a":`, 62) + "1" + strings.Repeat("}", 62)
	ev := "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"r\",\"object\":\"response\",\"tools\":[{\"type\":\"function\",\"parameters\":" + params + "}]}}\n\n" +
		"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"r\",\"object\":\"response\"}}\n\n"
	if _, p, err := runTyped(t, wire.Responses, ev); err != nil || !p.complete() {
		t.Fatalf("an echo of a request at the bound: %v", err)
	}
}

// TestErrorEventSequenceNeverGoesBack: a replica whose sequence numbers go
// backwards (7, then 3) and then cuts the stream: the error event the
// gateway ends it with follows the highest number the client was sent (8),
// so a client that checks the order never sees it go back (issue 31).
// Before the fix it followed the last one (4).
func TestErrorEventSequenceNeverGoesBack(t *testing.T) {
	stream := "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":7,\"response\":{\"id\":\"resp_1\",\"object\":\"response\"}}\n\n" +
		"event: response.in_progress\ndata: {\"type\":\"response.in_progress\",\"sequence_number\":3,\"response\":{\"id\":\"resp_1\",\"object\":\"response\"}}\n\n"
	rec := httptest.NewRecorder()
	p := &Pump{W: rec, RC: http.NewResponseController(rec), API: wire.Responses}
	if err := p.Run(strings.NewReader(stream)); !errors.Is(err, ErrStreamCut) {
		t.Fatalf("run = %v, want a cut stream", err)
	}
	p.Fail(&wire.APIError{Status: http.StatusBadGateway, Type: "upstream_error", Code: "upstream_failed", Message: "cut"})
	out := rec.Body.String()
	i := strings.LastIndex(out, "data: ")
	if got := gjson.Get(out[i+len("data: "):], "sequence_number").Int(); got != 8 {
		t.Errorf("the error event's sequence_number is %d, want 8 (after the 7 the client saw)\n%s", got, out)
	}
}

// TestChatEventNotJSONRefused: a chat or completions event that is not
// one JSON object (text, a NUL, a bare number) ends the stream as cut,
// a replica's error, and is never relayed (issue 42: they were relayed).
func TestChatEventNotJSONRefused(t *testing.T) {
	head := "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n"
	for _, bad := range []string{"hello there", "{\"a\":\"\x00\"}", "\x00", "42", "{\"choices\":[", "[1,2]"} {
		for _, ep := range []wire.Endpoint{wire.Chat, wire.Completions} {
			rec := httptest.NewRecorder()
			p := &Pump{W: rec, RC: http.NewResponseController(rec), API: ep}
			err := p.Run(strings.NewReader(head + "data: " + bad + "\n\n" + "data: [DONE]\n\n"))
			if !errors.Is(err, ErrStreamCut) || p.Refused == nil {
				t.Errorf("%v, event %q: %v (refused %v), want a cut stream", ep, bad, err, p.Refused)
			}
			if out := rec.Body.String(); strings.Contains(out, bad) || !strings.Contains(out, `"Hi"`) {
				t.Errorf("%v, event %q: the client got %q", ep, bad, out)
			}
		}
	}
}

// failAfter reads its stream, then fails as a dropped connection does.
type failAfter struct{ r io.Reader }

func (f failAfter) Read(p []byte) (int, error) {
	if n, err := f.r.Read(p); err != io.EOF {
		return n, err
	}
	return 0, io.ErrUnexpectedEOF
}

// TestCompletedThenReset: a typed stream whose replica sent its terminal
// event and then dropped the connection is complete: no error, nothing
// after the terminal event, its usage read.
func TestCompletedThenReset(t *testing.T) {
	stream := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m1\",\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":2}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	rec := httptest.NewRecorder()
	p := &Pump{W: rec, RC: http.NewResponseController(rec), API: wire.Messages}
	if err := p.Run(failAfter{strings.NewReader(stream)}); err != nil || !p.complete() {
		t.Fatalf("run = %v, complete %t; want a complete stream", err, p.complete())
	}
	if out := rec.Body.String(); !strings.HasSuffix(out, `data: {"type":"message_stop"}`+"\n\n") {
		t.Errorf("the client got %q", out)
	}
	if u := p.Usage(); u.Completion != 2 || u.Prompt != 3 {
		t.Errorf("usage %+v, want 3 prompt and 2 completion tokens", u)
	}
}
