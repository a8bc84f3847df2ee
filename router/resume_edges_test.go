package router_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/polltest"
)

// chatChunk is one chat stream event carrying delta (JSON).
func chatChunk(delta string) string {
	return `data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":` + delta + `,"finish_reason":null}]}` + "\n\n"
}

// chatEnd finishes a chat stream with usage and [DONE].
const chatEnd = `data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n" +
	`data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":1,"total_tokens":10}}` + "\n\ndata: [DONE]\n\n"

// TestResumeAfterRefusedEvent: a stream whose replica sent an event the
// gateway refuses (JSON nested too deep) is cut; the continuation starts
// afresh. (Before, the refusal stayed in the pump and every continuation
// stopped at its first event, each counted as the continuing replica's
// failure.)
func TestResumeAfterRefusedEvent(t *testing.T) {
	a := sseUpstream(t, chatChunk(`{"role":"assistant","content":""}`)+chatChunk(`{"content":"Hello"}`)+
		`data: {"x":`+strings.Repeat("[", 200)+strings.Repeat("]", 200)+`,"usage":{"prompt_tokens":1}}`+"\n\n", nil)
	b := sseUpstream(t, chatChunk(`{"role":"assistant","content":""}`)+chatChunk(`{"content":" more"}`)+chatEnd, nil)
	gw := startGateway(t, resumeConfig(t, a.URL, b.URL, ""))
	_, body := post(t, gw.API.URL+"/v1/chat/completions", streamReq, nil)
	if !strings.HasSuffix(string(body), "data: [DONE]\n\n") || strings.Contains(string(body), "stream_interrupted") || !strings.Contains(string(body), `" more"`) {
		t.Errorf("the client's stream: %q", body)
	}
	if v := adminReplicaView(t, gw, "p", "b"); v.LastError != "" {
		t.Errorf("the continuing replica was counted as failing: %+v", v)
	}
}

// TestResumeClientLeaves: a client that leaves while the continuation
// waits for its answer is logged 499 and not counted as a resume. (Before,
// it was counted "resumed", with status 200.)
func TestResumeClientLeaves(t *testing.T) {
	a := sseUpstream(t, chatChunk(`{"role":"assistant","content":""}`)+chatChunk(`{"content":"Hello"}`), nil)
	asked, stop := make(chan struct{}, 4), make(chan struct{})
	b := sseUpstream(t, "", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // so that the server sees the gateway hang up
		asked <- struct{}{}
		select { // never answers
		case <-r.Context().Done():
		case <-stop:
		}
	})
	t.Cleanup(func() { close(stop) }) // before b closes
	gw := startGateway(t, resumeConfig(t, a.URL, b.URL, ""))
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, gw.API.URL+"/v1/chat/completions", strings.NewReader(streamReq))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, resp.Body) }()
	select {
	case <-asked:
	case <-time.After(10 * time.Second):
		t.Fatal("no continuation was asked for")
	}
	cancel()
	polltest.Eventually(t, 5*time.Second, "the access line", func() bool { return strings.Contains(gw.Logs.String(), `"msg":"request"`) })
	if !strings.Contains(gw.Logs.String(), `"status":499`) || !strings.Contains(gw.Logs.String(), "the client left during the resume") {
		t.Errorf("access line: %s", gw.Logs.String())
	}
	if got := gw.MetricValue(t, "switchyard_stream_resumes_total", map[string]string{"result": "resumed"}); got != 0 {
		t.Errorf("%v resumes counted for a client that left", got)
	}
}

// TestResumeClientLeavesAfterTheEnd: a client that hangs up as soon as it
// has a resumed stream's [DONE] (as Codex does), while the gateway still
// reads the end of the continuing replica's response, got its whole
// answer: logged 200 and counted resumed. (Before, it was logged 499, "the
// client left during the resume"; seen with Codex in the agent suite.)
func TestResumeClientLeavesAfterTheEnd(t *testing.T) {
	a := sseUpstream(t, chatChunk(`{"role":"assistant","content":""}`)+chatChunk(`{"content":"Hello"}`), nil)
	stop := make(chan struct{})
	b := sseUpstream(t, "", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // so that the server sees the gateway hang up
		_, _ = io.WriteString(w, chatChunk(`{"role":"assistant","content":""}`)+chatChunk(`{"content":" world"}`)+chatEnd)
		http.NewResponseController(w).Flush()
		select { // the response does not end until the gateway hangs up
		case <-r.Context().Done():
		case <-stop:
		}
	})
	t.Cleanup(func() { close(stop) }) // before b closes
	gw := startGateway(t, resumeConfig(t, a.URL, b.URL, ""))
	resp, err := http.Post(gw.API.URL+"/v1/chat/completions", "application/json", strings.NewReader(streamReq))
	if err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	buf := make([]byte, 4096)
	for !strings.HasSuffix(got.String(), "data: [DONE]\n\n") {
		n, err := resp.Body.Read(buf)
		got.Write(buf[:n])
		if err != nil {
			break
		}
	}
	resp.Body.Close() // hangs up at once: the body is not read to its end
	if s := got.String(); !strings.HasSuffix(s, "data: [DONE]\n\n") || !strings.Contains(s, `" world"`) || strings.Contains(s, "stream_interrupted") {
		t.Fatalf("the client's stream: %q", s)
	}
	polltest.Eventually(t, 10*time.Second, "the access line", func() bool { return strings.Contains(gw.Logs.String(), `"msg":"request"`) })
	if l := gw.Logs.String(); !strings.Contains(l, `"status":200`) || !strings.Contains(l, `"resume":"resumed on b `) {
		t.Errorf("access line: %s", l)
	}
	if got := gw.MetricValue(t, "switchyard_stream_resumes_total", map[string]string{"result": "resumed"}); got != 1 {
		t.Errorf("%v resumes counted, want 1", got)
	}
}

// TestResumeRefusedContinuation: a continuation that sends what the
// client's stream cannot carry (a tool call, continuing a Responses
// message) ends the stream with the error event; it is not the replica's
// failure and no third replica is asked.
func TestResumeRefusedContinuation(t *testing.T) {
	a := sseUpstream(t, "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"status\":\"in_progress\",\"output\":[],\"model\":\"m\"}}\n\n", nil)
	// b and c answer alike; with max_attempts 2 only one may be asked.
	var mu sync.Mutex
	calls := 0
	toolCall := func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls++
		mu.Unlock()
		_, _ = io.WriteString(w, chatChunk(`{"role":"assistant","content":""}`)+
			chatChunk(`{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"f","arguments":""}}]}`)+chatEnd)
	}
	b, c := sseUpstream(t, "", toolCall), sseUpstream(t, "", toolCall)
	gw := startGateway(t, loadConfig(t, `
version: 1
pools:
  p:
    model: m
    balance: round_robin
    retries: 0
    health: {disabled: true}
    resume: {enabled: true, max_attempts: 2}
    replicas: [{name: a, url: "{{a}}"}, {name: b, url: "{{b}}"}, {name: c, url: "{{c}}"}]
routes:
  - name: default
    to: p
`, map[string]string{"a": a.URL, "b": b.URL, "c": c.URL}, nil))
	_, body := post(t, gw.API.URL+"/v1/responses", `{"model":"auto","stream":true,"input":"x"}`, nil)
	if !strings.Contains(string(body), "event: error") {
		t.Errorf("the client's stream: %q", body)
	}
	mu.Lock()
	n := calls
	mu.Unlock()
	if n != 1 {
		t.Errorf("%d continuations asked for, want 1", n)
	}
	for _, name := range []string{"b", "c"} {
		if v := adminReplicaView(t, gw, "p", name); v.LastError != "" {
			t.Errorf("the continuing replica was counted as failing: %+v", v)
		}
	}
	polltest.Eventually(t, 5*time.Second, "the access line", func() bool { return strings.Contains(gw.Logs.String(), `"msg":"request"`) })
	if !strings.Contains(gw.Logs.String(), "the continuation called a tool") {
		t.Errorf("log does not say why: %s", gw.Logs.String())
	}
}

// TestResumeNotAsked: a stream no continuation could follow ends with
// the error event, its reason logged, and no replica is asked: a
// Responses stream cut before its first event (response.created); a chat
// event over the size limit, passed through unread (before, the
// continuation's bytes were glued onto the unfinished event); and a
// stream that starts once the shutdown has ended the open streams, ended
// at once (before, a stream between its cut and its continuation was
// tracked by nothing, so the continuation ran on after the shutdown).
func TestResumeNotAsked(t *testing.T) {
	for _, c := range []struct {
		name, cut, path, body string
		shutdown              bool
		want, why             string
	}{
		{"unstarted responses", ": nothing yet\n\n", "/v1/responses", `{"model":"auto","stream":true,"input":"x"}`, false,
			"event: error", "had not sent response.created"},
		{"oversize event", chatChunk(`{"role":"assistant","content":""}`) + `data: {"x":"` + strings.Repeat("a", 5<<20), "/v1/chat/completions", streamReq, false,
			"stream_interrupted", "passed through unread"},
		{"after CutStreams", chatChunk(`{"role":"assistant","content":""}`) + chatChunk(`{"content":"Hello"}`), "/v1/chat/completions", streamReq, true,
			"shutting down", `"status":503`},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := sseUpstream(t, c.cut, nil)
			var calls atomic.Int64
			b := sseUpstream(t, "", func(w http.ResponseWriter, r *http.Request) { calls.Add(1) })
			gw := startGateway(t, resumeConfig(t, a.URL, b.URL, ""))
			if c.shutdown {
				gw.G.CutStreams()
			}
			_, body := post(t, gw.API.URL+c.path, c.body, nil)
			if !strings.Contains(string(body), c.want) || calls.Load() != 0 {
				t.Errorf("%d continuations; the stream ends %q", calls.Load(), body[max(0, len(body)-200):])
			}
			polltest.Eventually(t, 5*time.Second, "the access line", func() bool { return strings.Contains(gw.Logs.String(), `"msg":"request"`) })
			if !strings.Contains(gw.Logs.String(), c.why) {
				t.Errorf("log does not say why: %.2000s", gw.Logs.String())
			}
			if c.shutdown {
				polltest.Eventually(t, 5*time.Second, "a 503 to be counted", func() bool {
					return gw.MetricValue(t, "switchyard_requests_total", map[string]string{"code": "503"}) == 1
				})
			}
		})
	}
}
