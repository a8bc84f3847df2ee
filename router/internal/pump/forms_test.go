package pump

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/switchyard/switchyard/router/internal/wire"
)

// runChat pumps a chat stream and returns what the client got, the pump
// and its verdict.
func runChat(t *testing.T, injected bool, stream string) (string, *Pump, error) {
	t.Helper()
	rec := httptest.NewRecorder()
	p := &Pump{W: rec, RC: http.NewResponseController(rec), Injected: injected}
	err := p.Run(strings.NewReader(stream))
	return rec.Body.String(), p, err
}

// TestSSEForms: streams that end in any form the SSE specification allows
// are complete answers, passed on byte for byte.
func TestSSEForms(t *testing.T) {
	chunk := `{"choices":[{"index":0,"delta":{"content":"hi"}}]}`
	for _, tc := range []struct{ name, raw, out string }{
		{"no space after data", "data:" + chunk + "\n\ndata:[DONE]\n\n", ""},
		{"event line before done", "data: " + chunk + "\n\nevent: done\ndata: [DONE]\n\n", ""},
		{"CR line ends", "data: " + chunk + "\r\rdata: [DONE]\r\r", ""},
		{"CRLF line ends", "data: " + chunk + "\r\n\r\ndata: [DONE]\r\n\r\n", ""},
		{"comments, id and retry", ": keep-alive\n\nid: 1\nretry: 100\ndata: " + chunk + "\n\ndata: [DONE]\n\n", ""},
		{"multi-line data", "data: {\"choices\":\ndata: [{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n", ""},
		{"done without its blank line", "data: " + chunk + "\n\ndata: [DONE]", "data: " + chunk + "\n\ndata: [DONE]\n\n"},
		{"done cut after CR", "data: {\"choices\":[]}\r\rdata: [DONE]\r", "data: {\"choices\":[]}\r\rdata: [DONE]\r\n\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, p, err := runChat(t, false, tc.raw)
			want := tc.out
			if want == "" {
				want = tc.raw
			}
			if err != nil || !p.SawDone || out != want {
				t.Errorf("run = %v, done %t; the client got %q, want %q", err, p.SawDone, out, want)
			}
		})
	}
}

// TestUsageStrippedEverywhere: a client that did not ask for usage gets
// none, wherever the replica puts it (running totals in chunks with
// choices, a final usage chunk, data split over lines), and the pump
// counts the last totals; each event stays well formed.
func TestUsageStrippedEverywhere(t *testing.T) {
	raw := `data: {"choices":[{"index":0,"delta":{"content":"a"}}],"usage":{"prompt_tokens":5,"completion_tokens":1}}` + "\n\n" +
		`data: {"usage": {"prompt_tokens":5,"completion_tokens":2}, "choices":[{"index":0,"delta":{"content":"b"}}]}` + "\n\n" +
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"c\"}}],\ndata: \"usage\":null}\n\n" +
		`data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2}}` + "\n\n" +
		"data: [DONE]\n\n"
	out, p, err := runChat(t, true, raw)
	if err != nil || strings.Contains(out, "usage") || !strings.HasSuffix(out, "data: [DONE]\n\n") {
		t.Fatalf("run = %v; the client got %q", err, out)
	}
	for _, c := range []string{"a", "b", "c"} {
		if !strings.Contains(out, `"content":"`+c+`"`) {
			t.Errorf("content %q lost: %q", c, out)
		}
	}
	for _, d := range sseEvents([]byte(out)) {
		if d != "[DONE]" && !json.Valid([]byte(d)) {
			t.Errorf("event data %q is not JSON", d)
		}
	}
	// Counted once, from the last totals (vLLM's continuous_usage_stats),
	// whether or not the client asked for usage.
	if u := p.Usage(); !u.SawUsage || u.Prompt != 5 || u.Completion != 2 {
		t.Errorf("usage %+v, want 5 prompt and 2 completion tokens", u)
	}
	if _, p, err := runChat(t, false, raw); err != nil || p.Usage().Prompt != 5 || p.Usage().Completion != 2 {
		t.Errorf("a client that asked for usage: %v, usage %+v", err, p.Usage())
	}
}

// TestErrorEventOnFreshLine: a replica that dies in the middle of an event
// leaves no partial line for the error event to be glued to.
func TestErrorEventOnFreshLine(t *testing.T) {
	first := `data: {"choices":[{"index":0,"delta":{"content":"a"}}]}` + "\n\n"
	out, p, err := runChat(t, false, first+`data: {"choi`)
	if err == nil || out != first {
		t.Fatalf("run = %v; partial event passed on: %q", err, out)
	}
	p.Fail(&wire.APIError{Status: 502, Type: "server_error", Code: "stream_interrupted", Message: "cut"})
	out = p.W.(*httptest.ResponseRecorder).Body.String()
	if ev := sseEvents([]byte(out)); len(ev) != 2 || !strings.Contains(ev[1], "stream_interrupted") || !strings.HasSuffix(out, "}}\n\n") {
		t.Errorf("events %q of %q", ev, out)
	}
}

// TestLargeEventsPassIntact: an event larger than the stream buffer, and
// events split across many small reads, reach the client byte for byte.
func TestLargeEventsPassIntact(t *testing.T) {
	big := `data: {"choices":[{"index":0,"delta":{"content":"` + strings.Repeat("x", 100<<10) + `"}}]}` + "\n\n"
	small := `data: {"choices":[{"index":0,"delta":{"content":"y"}}]}` + "\n\n"
	stream := small + big + small + "data: [DONE]\n\n"
	var cuts []int
	for range len(stream)/977 + 1 {
		cuts = append(cuts, 977) // odd-sized reads split events anywhere
	}
	rec := httptest.NewRecorder()
	p := &Pump{W: rec, RC: http.NewResponseController(rec)}
	if err := p.Run(&chunkedReader{data: []byte(stream), cuts: cuts}); err != nil || rec.Body.String() != stream {
		t.Errorf("run = %v; %d bytes out of a %d-byte stream, or not the same", err, rec.Body.Len(), len(stream))
	}
}

// firstToken counts FirstToken calls.
type firstToken struct{ n int }

func (f *firstToken) FirstToken() { f.n++ }

// TestCommentsAreNotTokens: keep-alive comments and a role chunk are not
// the first token (the time to first token, Token); the first content
// delta is, told once.
func TestCommentsAreNotTokens(t *testing.T) {
	role := `data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}` + "\n\n"
	content := `data: {"choices":[{"index":0,"delta":{"content":"a"}}]}` + "\n\n"
	for _, tc := range []struct {
		name, stream string
		want         int
	}{
		{"comments", ": ping\n\n: ping\n\n" + role, 0},
		{"content", ": ping\n\n" + role + content + content + "data: [DONE]\n\n", 1},
	} {
		rec := httptest.NewRecorder()
		tok := &firstToken{}
		p := &Pump{W: rec, RC: http.NewResponseController(rec), Token: tok}
		_ = p.Run(strings.NewReader(tc.stream))
		if tok.n != tc.want {
			t.Errorf("%s: FirstToken told %d times, want %d", tc.name, tok.n, tc.want)
		}
	}
}

// TestFailEndsEachAPI: a cut stream ends with its API's error event: a
// data line on chat, "event: error" numbered on after the last event on
// the Responses API, and Anthropic's error on the Messages API.
func TestFailEndsEachAPI(t *testing.T) {
	cut := &wire.APIError{Type: "upstream_error", Code: "stream_interrupted", Message: "the stream was interrupted"}
	for _, tc := range []struct {
		ep           wire.Endpoint
		stream, want string
	}{
		{wire.Chat, `data: {"choices":[{"index":0,"delta":{"content":"a"}}]}` + "\n\n", `data: {"error":`},
		{wire.Responses, "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_1\",\"object\":\"response\"}}\n\n", "event: error\ndata: "},
		{wire.Messages, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n", "event: error\ndata: "},
	} {
		out, p, err := runTyped(t, tc.ep, tc.stream)
		if !errors.Is(err, ErrStreamCut) {
			t.Fatalf("%v: run = %v, want a cut stream", tc.ep, err)
		}
		p.Fail(cut)
		last := strings.TrimPrefix(p.W.(*httptest.ResponseRecorder).Body.String(), out)
		data := gjson.Parse(last[strings.Index(last, "data: ")+6:])
		ok := strings.HasPrefix(last, tc.want)
		switch tc.ep {
		case wire.Chat:
			ok = ok && data.Get("error.code").Str == "stream_interrupted"
		case wire.Responses:
			ok = ok && data.Get("code").Str == "stream_interrupted" && data.Get("sequence_number").Int() == 1
		case wire.Messages:
			ok = ok && data.Get("type").Str == "error" && data.Get("error.type").Str == "api_error"
		}
		if !ok {
			t.Errorf("%v: the stream ends %q", tc.ep, last)
		}
	}
}
