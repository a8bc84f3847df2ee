package pump

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/switchyard/switchyard/router/internal/wire"

	"github.com/tidwall/gjson"
)

// sseEvents parses a stream as a browser's EventSource does (the SSE
// specification's algorithm, line by line) and returns the data of each
// dispatched event. It is the reference the pump is checked against.
func sseEvents(b []byte) []string {
	var out []string
	var data []string
	has := false
	for len(b) > 0 {
		i := bytes.IndexAny(b, "\r\n")
		if i < 0 {
			break // an incomplete last line is never processed
		}
		line := b[:i]
		n := i + 1
		if b[i] == '\r' && i+1 < len(b) && b[i+1] == '\n' {
			n++
		}
		b = b[n:]
		if len(line) == 0 {
			if has {
				out = append(out, strings.Join(data, "\n"))
			}
			data, has = nil, false
			continue
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		if string(field) == "data" {
			data = append(data, string(value))
			has = true
		}
	}
	return out
}

// chunkedReader returns its data in reads cut at the given offsets.
type chunkedReader struct {
	data []byte
	cuts []int
}

func (r *chunkedReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := len(r.data)
	if len(r.cuts) > 0 {
		n = max(1, min(n, r.cuts[0]))
		r.cuts = r.cuts[1:]
	}
	n = copy(p, r.data[:n])
	r.data = r.data[n:]
	return n, nil
}

// FuzzPump runs the stream pump itself over a reader that splits the
// replica's bytes at arbitrary offsets. Whatever the split, the client must
// see the events the replica sent, up to [DONE], in order and intact, the
// pump's verdict must not depend on the split, with usage injected no
// usage may reach the client, and what the client gets is valid UTF-8 with
// no lone surrogate escape (the replica's events with each invalid byte
// U+FFFD, wire.ValidUTF8, and each lone half \ufffd, wire.ValidEscapes).
func FuzzPump(f *testing.F) {
	seeds := []string{
		"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}],\"usage\":null}\n\ndata: [DONE]\n\n",
		"event: message\r\ndata: {\"choices\":[]}\r\n\r\ndata:[DONE]\r\n\r\n",
		"data: x\r\rdata: [DONE]\r\r",
		"data: a\ndata: b\n\n: comment\n\nid: 7\nretry: 10\ndata: c\n\ndata: [DONE]",
		"data: {\"choices\":[{\"index\":0}],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2}}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":3}}\n\ndata: [DONE]\n\n",
		"data: {\"choices\":[{\"delta\":{\"content\":\"cut\"}}]}\n\ndata: {\"cho",
		"data: {\"choices\":[{\"delta\":{\"content\":\"a\xff\xfe\xe2\x82\"}}]}\n\n: \xc3\n\ndata: [DONE]\n\n",
		"data: {\"choices\":[{\"delta\":{\"content\":\"\\ud83d \\ud83d\\ude00 \\\\ud800\"}}]}\n\ndata: [DONE]\n\n",
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"},\"finish_reason\":\"stop\"}]}\n\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"b\"}},{\"index\":1,\"text\":\"c\"}],\"usage\":null}\n\ndata: [DONE]\n\n",
	}
	for _, c := range duplicateUsage {
		seeds = append(seeds, "data: "+c.data+"\n\ndata: [DONE]\n\n")
	}
	for _, s := range seeds {
		f.Add([]byte(s), uint64(0), false)
		f.Add([]byte(s), uint64(0x0123456789abcdef), true)
	}
	f.Fuzz(func(t *testing.T, stream []byte, seed uint64, injected bool) {
		run := func(cuts []int) (string, *Pump, error) {
			rec := httptest.NewRecorder()
			p := &Pump{W: rec, RC: http.NewResponseController(rec), Injected: injected}
			err := p.Run(&chunkedReader{data: bytes.Clone(stream), cuts: cuts})
			return rec.Body.String(), p, err
		}
		whole, wp, werr := run(nil)
		var cuts []int
		for s := seed; s != 0 && len(cuts) < 64; s >>= 3 {
			cuts = append(cuts, int(s&7)+1)
		}
		split, sp, serr := run(cuts)
		if (werr == nil) != (serr == nil) || wp.SawDone != sp.SawDone || wp.Usage().SawUsage != sp.Usage().SawUsage || wp.Usage().Completion != sp.Usage().Completion {
			t.Fatalf("verdict depends on the split: %v/%v done %t/%t usage %t/%t", werr, serr, wp.SawDone, sp.SawDone, wp.Usage().SawUsage, sp.Usage().SawUsage)
		}
		if werr != nil && !errors.Is(werr, ErrStreamCut) {
			t.Fatalf("error %v is not a cut stream", werr)
		}
		if !utf8.ValidString(whole) || !utf8.ValidString(split) {
			t.Fatalf("the client got invalid UTF-8: %q / %q", whole, split)
		}
		// In what a client reads (the events' data: a line that is no
		// field of an event is ignored by SSE clients, and relayed as
		// sent).
		for _, d := range sseEvents([]byte(whole)) {
			if string(wire.ValidEscapes([]byte(d))) != d {
				t.Fatalf("the client got a lone surrogate escape: %q in %q", d, whole)
			}
		}
		stream = wire.ValidEscapes(wire.ValidUTF8(stream))
		gotWhole, gotSplit := sseEvents([]byte(whole)), sseEvents([]byte(split))
		if !slices.Equal(gotWhole, gotSplit) {
			t.Fatalf("events depend on the split:\n%q\n%q", gotWhole, gotSplit)
		}
		want := sseEvents(stream)
		if i := slices.IndexFunc(want, func(d string) bool { return strings.TrimSpace(d) == "[DONE]" }); i >= 0 {
			want = want[:i+1]
		}
		if j := slices.IndexFunc(want, notObject); j >= 0 {
			// An event that is not one JSON object ends the stream as
			// cut: the client has the events before it.
			if werr == nil {
				t.Fatalf("event %q, not a JSON object, did not end the stream", want[j])
			}
			want = want[:j]
		}
		if after := afterFinish(gotWhole); after != "" {
			t.Fatalf("content after a finish reason reached the client: %q", after)
		}
		if slices.ContainsFunc(want, finishes) {
			// Content after a finish reason is dropped: the client's
			// events are not the replica's (checked above).
			return
		}
		if injected {
			for _, d := range gotWhole {
				if topUsage(d) {
					t.Fatalf("usage reached a client that did not ask for it: %q", d)
				}
			}
			return
		}
		if !wp.SawDone {
			// Without [DONE] the events before the cut must all be there.
			if !slices.Equal(gotWhole, want) {
				t.Fatalf("events differ from the replica's:\n got %q\nwant %q", gotWhole, want)
			}
			return
		}
		if !slices.Equal(gotWhole, want) && !slices.Equal(gotWhole, sseEvents(append(bytes.Clone(stream), "\n\n"...))[:len(gotWhole)]) {
			t.Fatalf("events differ from the replica's:\n got %q\nwant %q", gotWhole, want)
		}
	})
}

// notObject reports whether an event's data is neither [DONE] nor one
// JSON object.
func notObject(d string) bool {
	t := strings.TrimSpace(d)
	return t != "[DONE]" && (!strings.HasPrefix(t, "{") || !gjson.Valid(t))
}

// afterFinish returns the first event that brings a choice something
// after the choice's finish reason ("" if none).
func afterFinish(events []string) string {
	var ended []int64
	for _, d := range events {
		// Member names as the API spells them, as the pump and the JSON
		// parsers of JavaScript and Python read them (Go's encoding/json
		// folds case, "ChoiCes" is its "choices": a replica's game the
		// pump does not follow).
		if !gjson.Valid(d) {
			continue
		}
		var finishing []int64
		for _, c := range choicesOf(d) {
			if slices.Contains(ended, c.Get("index").Int()) && carries(c) {
				return d
			}
			if c.Get("finish_reason").Type == gjson.String {
				finishing = append(finishing, c.Get("index").Int())
			}
		}
		ended = append(ended, finishing...)
	}
	return ""
}

// choicesOf is every choice of every top-level "choices" array of d.
func choicesOf(d string) []gjson.Result {
	var out []gjson.Result
	for _, m := range topMembers([]byte(d), "choices") {
		if m.val.IsArray() {
			out = append(out, m.val.Array()...)
		}
	}
	return out
}

// finishes reports whether the data of a chat event gives a choice its
// finish reason.
func finishes(d string) bool {
	if !gjson.Valid(d) {
		return false
	}
	return slices.ContainsFunc(topMembers([]byte(d), "choices"), func(m member) bool {
		return slices.ContainsFunc(m.val.Array(), func(c gjson.Result) bool { return c.Get("finish_reason").Type == gjson.String })
	})
}

// topUsage reports whether a client's parser finds a top-level usage in d.
func topUsage(d string) bool {
	var m map[string]json.RawMessage
	if json.Unmarshal([]byte(d), &m) != nil {
		return false
	}
	_, ok := m["usage"]
	return ok
}

func TestPumpDuplicateUsage(t *testing.T) {
	for _, c := range duplicateUsage {
		for _, injected := range []bool{true, false} {
			stream := "data: " + c.data + "\n\ndata: [DONE]\n\n"
			rec := httptest.NewRecorder()
			p := &Pump{W: rec, RC: http.NewResponseController(rec), Injected: injected}
			if err := p.Run(strings.NewReader(stream)); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			got := sseEvents(rec.Body.Bytes())
			if p.Usage().Prompt != c.prompt || p.Usage().Completion != c.completion {
				t.Errorf("%s (injected %t): counted %d/%d, want the last member's %d/%d", c.name, injected, p.Usage().Prompt, p.Usage().Completion, c.prompt, c.completion)
			}
			if !injected {
				if len(got) != 2 || got[0] != c.data {
					t.Errorf("%s: a client that asked for usage got %q, want the chunk unchanged", c.name, got)
				}
				continue
			}
			if kept := len(got) == 2; kept != c.kept {
				t.Errorf("%s: chunk kept %t, want %t (%q)", c.name, kept, c.kept, got)
			}
			for _, d := range got {
				if topUsage(d) {
					t.Errorf("%s: usage reached a client that did not ask for it: %q", c.name, d)
				}
			}
			if c.kept && len(got) == 2 && strings.Contains(c.data, `"delta":{"content":"a","usage":null}`) &&
				!strings.Contains(got[0], `"delta":{"content":"a","usage":null}`) {
				t.Errorf("%s: a nested usage key was edited: %q", c.name, got[0])
			}
		}
	}
}

// A chunk nesting deeper than the bound is not parsed (a recursive parser
// on hostile nesting costs memory without bound) and not relayed (it may
// carry usage): the stream ends as cut after the events before it.
func TestPumpRefusesDeepChunk(t *testing.T) {
	deep := `{"x":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `,"usage":{"prompt_tokens":1,"completion_tokens":2}}`
	stream := "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: " + deep + "\n\ndata: [DONE]\n\n"
	rec := httptest.NewRecorder()
	p := &Pump{W: rec, RC: http.NewResponseController(rec), Injected: true}
	err := p.Run(strings.NewReader(stream))
	if !errors.Is(err, ErrStreamCut) || !strings.Contains(err.Error(), "deeper than 80") {
		t.Fatalf("run = %v, want a cut stream naming the depth", err)
	}
	if got := sseEvents(rec.Body.Bytes()); len(got) != 1 || !strings.Contains(got[0], `"content":"a"`) {
		t.Fatalf("client got %q, want only the first chunk", got)
	}
}

// duplicateUsage are replica chunks whose "usage" members a client's JSON
// parser (which keeps the last duplicate) and a first-match reader would
// read differently; FuzzPump found the first.
var duplicateUsage = []struct {
	name, data string
	// kept: the chunk reaches a client that did not ask for usage.
	kept bool
	// prompt and completion: the usage counted (the last member's).
	prompt, completion int64
}{
	{"array then object", `{"x":[],"usage":[],"usage":{}}`, false, 0, 0},
	{"null then object", `{"choices":[{"delta":{"content":"a"}}],"usage":null,"usage":{"prompt_tokens":3,"completion_tokens":4}}`, true, 3, 4},
	{"two objects", `{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1},"usage":{"prompt_tokens":5,"completion_tokens":6}}`, false, 5, 6},
	{"nested and top-level", `{"choices":[{"delta":{"content":"a","usage":null}}],"usage":null}`, true, 0, 0},
	{"nested only", `{"choices":[{"delta":{"content":"a","usage":null}}]}`, true, 0, 0},
	{"escaped key", `{"choices":[{"delta":{"content":"a"}}],"us\u0061ge":{"prompt_tokens":1,"completion_tokens":2}}`, true, 1, 2},
	{"null then object, no choices", `{"usage":null,"usage":{"prompt_tokens":7,"completion_tokens":8}}`, false, 7, 8},
}
