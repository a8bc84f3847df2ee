package router

import (
	"bytes"
	"testing"
)

// FuzzParseRequest: the request reader never panics, and what it accepts
// has the fields routing relies on.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{
		`{"model":"auto","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"auto","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"system","content":[{"type":"text","text":"x"}]},{"role":"user","content":"y"}],"tools":[{"type":"function","function":{"name":"f"}}],"user":"u"}`,
		`{"model":"auto","prompt":["a","b"]}`,
		`{"model":1}`, `[]`, `{"model":"m","messages":"x"}`, `{"model":"m","messages":[1]}`, ``, `{`, `{"a":"\ud800"}`,
	} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, body []byte, completions bool) {
		ep := chatEndpoint
		if completions {
			ep = completionsEndpoint
		}
		info, err := parseRequest(body, ep)
		if err != nil {
			if _, ok := err.(*apiError); !ok {
				t.Fatalf("error %T is not an API error", err)
			}
			return
		}
		if info.Model == "" || info.Messages <= 0 || info.PromptTokens < 0 || info.Tools < 0 {
			t.Fatalf("accepted %q with %+v", body, info)
		}
		_ = classifierInput(info)
	})
}

// FuzzSSE: splitting a stream into events loses and invents no byte, and
// dropping "usage":null leaves the rest of the event intact.
func FuzzSSE(f *testing.F) {
	f.Add([]byte("data: {\"a\":1,\"usage\":null}\n\ndata: [DONE]\n\n"))
	f.Add([]byte("data: x\r\n\r\ndata: y\n\n"))
	f.Add([]byte("data: {\"usage\":null,\"b\":2}\n\npartial"))
	f.Fuzz(func(t *testing.T, stream []byte) {
		var got []byte
		rest := stream
		for {
			ev, n := nextEvent(rest)
			if ev == nil {
				break
			}
			if n <= 0 || n > len(rest) || !bytes.Equal(ev, rest[:n]) {
				t.Fatalf("bad event boundary %d in %q", n, rest)
			}
			got = append(got, ev...)
			_ = hasToken(ev)
			_ = eventData(ev)
			dropped := dropUsageNull(bytes.Clone(ev))
			if len(dropped) > len(ev) {
				t.Fatalf("dropUsageNull grew %q", ev)
			}
			rest = rest[n:]
		}
		if !bytes.Equal(append(got, rest...), stream) {
			t.Fatalf("events do not reassemble the stream")
		}
	})
}
