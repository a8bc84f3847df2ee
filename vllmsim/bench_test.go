package vllmsim_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/switchyard/switchyard/vllmsim"
)

var benchBody = []byte(`{"model":"sim/test-model","max_tokens":16,"messages":[{"role":"system","content":"You are helpful."},{"role":"user","content":"Tell me about the harbor at dawn."}]}`)

// BenchmarkChatNonStream measures the simulator's own cost per request on the
// zero-delay path (no timers), which proxy-overhead benchmarks rely on.
func BenchmarkChatNonStream(b *testing.B) {
	sim := vllmsim.New(vllmsim.Profile{Model: testModel})
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(benchBody))
		w := httptest.NewRecorder()
		sim.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
}

// BenchmarkChatNonStreamSocket is the same over a real loopback connection.
func BenchmarkChatNonStreamSocket(b *testing.B) {
	_, ts := start(b, vllmsim.Profile{})
	client := ts.Client()
	b.ReportAllocs()
	for b.Loop() {
		resp, err := client.Post(ts.URL+"/v1/chat/completions", "application/json", bytes.NewReader(benchBody))
		if err != nil {
			b.Fatal(err)
		}
		var out struct{}
		err = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			b.Fatalf("status %d: %v", resp.StatusCode, err)
		}
	}
}

// FuzzRequestBodies feeds arbitrary bodies to both inference endpoints: the
// simulator must answer every one with a JSON error or a well-formed answer,
// never panic.
func FuzzRequestBodies(f *testing.F) {
	for _, seed := range []string{
		string(benchBody),
		`{"stream":true,"stream_options":{"include_usage":true},"n":2,"logprobs":true,"top_logprobs":3,"messages":[{"role":"user","content":"hi"}]}`,
		`{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"array","items":{"type":"object","properties":{"b":{"enum":[1]}}}}}}}}]}`,
		`{"messages":[{"role":"user","content":"x"}],"guided_choice":["a","b"],"logprobs":true,"top_logprobs":1}`,
		`{"prompt":[[1,2],[3]],"logprobs":3,"stream":true}`,
		`{"prompt":"\u2028\ud800","max_tokens":3}`,
		`{"messages":"nope"}`,
		`[]`,
		``,
	} {
		f.Add(seed)
	}
	sim := vllmsim.New(vllmsim.Profile{Model: testModel, MaxModelLen: 4096})
	f.Fuzz(func(t *testing.T, body string) {
		for _, path := range []string{"/v1/chat/completions", "/v1/completions"} {
			req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
			w := httptest.NewRecorder()
			sim.ServeHTTP(w, req)
			out := w.Body.Bytes()
			if w.Header().Get("Content-Type") == "text/event-stream" {
				for _, ev := range strings.Split(strings.TrimSpace(string(out)), "\n\n") {
					data, ok := strings.CutPrefix(ev, "data: ")
					if !ok || (data != "[DONE]" && !json.Valid([]byte(data))) {
						t.Fatalf("%s: bad event %q for body %q", path, ev, body)
					}
				}
				continue
			}
			if !json.Valid(out) {
				t.Fatalf("%s: status %d, invalid JSON %q for body %q", path, w.Code, out, body)
			}
		}
	})
}
