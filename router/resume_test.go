package router_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/tidwall/gjson"

	"github.com/switchyard/switchyard/internal/polltest"
	"github.com/switchyard/switchyard/policy"
	"github.com/switchyard/switchyard/vllmsim"
)

// resumeGateway runs pool p with replicas a (cut after cutAfter events) and
// b (healthy); round_robin sends the first request to a.
func resumeGateway(t *testing.T, cutAfter int, extra string) (*gateway, *replica, *replica) {
	t.Helper()
	return resumeGatewayWith(t, vllmsim.Profile{Model: "m", DefaultMaxTokens: 24}, cutAfter, extra)
}

func resumeGatewayWith(t *testing.T, prof vllmsim.Profile, cutAfter int, extra string) (*gateway, *replica, *replica) {
	t.Helper()
	a, b := startReplica(t, prof), startReplica(t, prof)
	a.Sim.SetFaults(vllmsim.Faults{CutAfterChunks: cutAfter})
	gw := startGateway(t, resumeConfig(t, a.Srv.URL, b.Srv.URL, extra))
	return gw, a, b
}

// resumeConfig is pool p of replicas a and b (round_robin, no retries, no
// probes) with resume on and extra resume settings, the only route's.
func resumeConfig(t *testing.T, a, b, extra string) *policy.Config {
	t.Helper()
	return loadConfig(t, `
version: 1
pools:
  p:
    model: m
    balance: round_robin
    retries: 0
    health: {disabled: true}
    resume: {enabled: true`+extra+`}
    replicas: [{name: a, url: "{{a}}"}, {name: b, url: "{{b}}"}]
routes:
  - name: default
    to: p
`, map[string]string{"a": a, "b": b}, nil)
}

// uncut is the answer a healthy replica gives to body, for comparison.
func uncut(t *testing.T, body string) string {
	t.Helper()
	r := startReplica(t, vllmsim.Profile{Model: "m", DefaultMaxTokens: 24})
	gw := oneReplicaGateway(t, r.Srv.URL, "", "")
	_, b := post(t, gw.API.URL+"/v1/chat/completions", strings.Replace(body, `"stream":true`, `"stream":false`, 1), nil)
	return gjson.GetBytes(b, "choices.0.message.content").String()
}

// TestResumeOnAnotherReplica: a replica that dies mid-stream is invisible
// to the client: the official SDK's accumulator sees one normal
// completion whose text is the whole answer, every chunk carries the first
// replica's id, and usage counts the whole answer.
func TestResumeOnAnotherReplica(t *testing.T) {
	gw, a, b := resumeGateway(t, 5, "")
	client := sdk(gw)
	stream := client.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
		Model:         "auto",
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Describe the harbor.")},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	var acc openai.ChatCompletionAccumulator
	ids := map[string]bool{}
	finishes, roles := 0, 0
	for stream.Next() {
		ch := stream.Current()
		acc.AddChunk(ch)
		ids[ch.ID] = true
		for _, c := range ch.Choices {
			if c.FinishReason != "" {
				finishes++
			}
			if c.Delta.Role != "" {
				roles++
			}
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("the SDK saw an error: %v", err)
	}
	want := uncut(t, `{"model":"auto","stream":true,"messages":[{"role":"user","content":"Describe the harbor."}]}`)
	if got := acc.Choices[0].Message.Content; got != want {
		t.Errorf("text %q\nwant the uncut answer %q", got, want)
	}
	if len(ids) != 1 || finishes != 1 || roles != 1 {
		t.Errorf("chunk ids %v, %d finish reasons, %d role chunks; want one of each", ids, finishes, roles)
	}
	if acc.Usage.CompletionTokens != 24 {
		t.Errorf("usage %+v, want 24 completion tokens for the whole answer", acc.Usage)
	}
	// The continuation asked b to continue a's text.
	cont := b.LastBody()
	prefix := gjson.GetBytes(cont, "messages.1.content").String()
	if !gjson.GetBytes(cont, "continue_final_message").Bool() || gjson.GetBytes(cont, "messages.1.role").String() != "assistant" ||
		!strings.HasPrefix(want, prefix) || prefix == "" {
		t.Errorf("continuation request %s", cont)
	}
	if a.Count() != 1 || b.Count() != 1 {
		t.Errorf("a got %d requests, b %d", a.Count(), b.Count())
	}
	// Counted and logged once the handler returns.
	polltest.Eventually(t, 5*time.Second, "the request to be counted", func() bool {
		return gw.MetricValue(t, "switchyard_requests_total", map[string]string{"code": "200"}) == 1
	})
	if got := gw.MetricValue(t, "switchyard_stream_resumes_total", map[string]string{"pool": "p", "result": "resumed"}); got != 1 {
		t.Errorf("resumes metric %v", got)
	}
	if !strings.Contains(gw.Logs.String(), `"resume":"resumed on b after`) {
		t.Errorf("access log lacks the resume field: %s", gw.Logs.String())
	}
}

// TestResumeNotPossible: the cases that cannot be resumed faithfully end
// with the API's error event as before, counted not_resumable and their
// reason logged. (Each reason is asserted in router/internal/resume;
// here, the configured max_buffer and a tool call seen in the stream of
// each API, end to end.)
func TestResumeNotPossible(t *testing.T) {
	for _, tc := range []struct{ name, path, body, extra, want, why string }{
		{"max_buffer", "/v1/chat/completions", `{"model":"auto","stream":true,"messages":[{"role":"user","content":"x"}]}`, ", max_buffer: 8", "stream_interrupted", "max_buffer"},
		{"tool call", "/v1/chat/completions", `{"model":"auto","stream":true,"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"city":{"type":"string"},"country":{"type":"string"}}}}}],"tool_choice":"required","messages":[{"role":"user","content":"x"}]}`, "", "stream_interrupted", "tool call"},
		{"responses tool call", "/v1/responses", `{"model":"auto","stream":true,"input":"x","tools":[{"type":"function","name":"f","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}]}`, "", "event: error", "tool call"},
		{"messages tool use", "/v1/messages", `{"model":"auto","stream":true,"max_tokens":24,"messages":[{"role":"user","content":"x"}],"tools":[{"name":"f","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}}]}`, "", "event: error", "tool call"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gw, _, b := resumeGateway(t, 4, tc.extra)
			_, body := post(t, gw.API.URL+tc.path, tc.body, nil)
			if !strings.Contains(string(body), tc.want) || !strings.Contains(string(body), "interrupted") || strings.Contains(string(body), "[DONE]") {
				t.Errorf("body %q", body)
			}
			if b.Count() != 0 {
				t.Errorf("a continuation was sent: %s", b.LastBody())
			}
			polltest.Eventually(t, 5*time.Second, "the access line", func() bool { return strings.Contains(gw.Logs.String(), `"msg":"request"`) })
			if got := gw.MetricValue(t, "switchyard_stream_resumes_total", map[string]string{"result": "not_resumable"}); got != 1 {
				t.Errorf("not_resumable %v", got)
			}
			if !strings.Contains(gw.Logs.String(), tc.why) {
				t.Errorf("log does not say why (%s): %s", tc.why, gw.Logs.String())
			}
		})
	}
	t.Run("no other replica", func(t *testing.T) {
		a := startReplica(t, vllmsim.Profile{Model: "m", DefaultMaxTokens: 24})
		a.Sim.SetFaults(vllmsim.Faults{CutAfterChunks: 4})
		gw := oneReplicaGateway(t, a.Srv.URL, ", resume: {enabled: true}", "")
		_, body := post(t, gw.API.URL+"/v1/chat/completions", streamReq, nil)
		if !strings.Contains(string(body), "stream_interrupted") {
			t.Errorf("body %q", body)
		}
		polltest.Eventually(t, 5*time.Second, "the access line", func() bool { return strings.Contains(gw.Logs.String(), `"msg":"request"`) })
		if got := gw.MetricValue(t, "switchyard_stream_resumes_total", map[string]string{"result": "failed"}); got != 1 {
			t.Errorf("failed %v", got)
		}
	})
}

// TestResumeReleasesCutReplica: a continuation is a new execution that
// starts once the cut attempt has been counted and released. While the
// continuation streams, the cut replica holds no request in flight and
// passive health has already heard of its failure. (Before, the
// continuation ran inside the cut attempt, which kept a's slot and told
// passive health only when the continuation ended.)
func TestResumeReleasesCutReplica(t *testing.T) {
	a := startReplica(t, vllmsim.Profile{Model: "m", DefaultMaxTokens: 24})
	a.Sim.SetFaults(vllmsim.Faults{CutAfterChunks: 4})
	release := make(chan struct{})
	b := sseUpstream(t, "", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, chatChunk(`{"role":"assistant","content":""}`)+chatChunk(`{"content":" more"}`))
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, chatEnd)
	})
	gw := startGateway(t, resumeConfig(t, a.Srv.URL, b.URL, ""))
	done := make(chan string, 1)
	go func() {
		_, body := post(t, gw.API.URL+"/v1/chat/completions", streamReq, nil)
		done <- string(body)
	}()
	polltest.Eventually(t, 10*time.Second, "the continuation to stream on b", func() bool {
		return adminReplicaView(t, gw, "p", "b").Inflight == 1
	})
	if av := adminReplicaView(t, gw, "p", "a"); av.Inflight != 0 || av.LastError == "" {
		t.Errorf("while the continuation runs, the cut replica a shows %d in flight and last error %q; want 0 and its failure", av.Inflight, av.LastError)
	}
	close(release)
	body := <-done
	if !strings.HasSuffix(body, "data: [DONE]\n\n") || strings.Contains(body, "stream_interrupted") || !strings.Contains(body, `" more"`) {
		t.Errorf("the client's stream: %q", body)
	}
}
