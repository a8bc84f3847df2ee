package router_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"

	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/switchyard/switchyard/internal/polltest"
	"github.com/switchyard/switchyard/vllmsim"
)

const twoPools = `
version: 1
server:
  max_body_bytes: 64KiB
pools:
  qwen:
    model: Qwen/Qwen3.8-Flash-Next
    balance: round_robin
    health: {disabled: true}
    replicas:
      - {name: qwen-a, url: "{{qwen}}"}
  minicpm:
    model: openbmb/MiniCPM5-2B
    balance: least_outstanding
    health: {disabled: true}
    replicas:
      - {name: minicpm-a, url: "{{minicpm}}"}
routes:
  - name: tools
    when: {tools: {gte: 1}}
    to: qwen
  - name: default
    to: minicpm
`

func setupTwoPools(t *testing.T) (*gateway, *replica, *replica) {
	t.Helper()
	q := startReplica(t, fast("Qwen/Qwen3.8-Flash-Next"))
	m := startReplica(t, fast("openbmb/MiniCPM5-2B"))
	cfg := loadConfig(t, twoPools, map[string]string{"qwen": q.Srv.URL, "minicpm": m.Srv.URL}, nil)
	return startGateway(t, cfg), q, m
}

func sdk(gw *gateway, opts ...option.RequestOption) openai.Client {
	return openai.NewClient(append([]option.RequestOption{
		option.WithBaseURL(gw.API.URL + "/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0),
	}, opts...)...)
}

var weatherTool = openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
	Name: "get_weather",
	Parameters: openai.FunctionParameters{
		"type":       "object",
		"properties": map[string]any{"city": map[string]any{"type": "string"}},
		"required":   []string{"city"},
	},
})

// accumulate parses SSE bytes the way the SDK does and accumulates them.
func accumulate(t *testing.T, raw []byte) openai.ChatCompletionAccumulator {
	t.Helper()
	var acc openai.ChatCompletionAccumulator
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var chunk openai.ChatCompletionChunk
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			t.Fatalf("replica chunk %q: %v", data, err)
		}
		acc.AddChunk(chunk)
	}
	return acc
}

func TestOpenAISDKEndToEnd(t *testing.T) {
	gw, q, m := setupTwoPools(t)
	client := sdk(gw)
	ctx := context.Background()
	base := openai.ChatCompletionNewParams{
		Model:    "auto",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Describe the harbor.")},
	}
	withTools := base
	withTools.Tools = []openai.ChatCompletionToolUnionParam{weatherTool}

	checkHeaders := func(t *testing.T, h http.Header, route, pool, replica string) {
		t.Helper()
		got := map[string]string{"route": h.Get("X-Switchyard-Route"), "pool": h.Get("X-Switchyard-Pool"), "replica": h.Get("X-Switchyard-Replica")}
		want := map[string]string{"route": route, "pool": pool, "replica": replica}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("routing headers (-want +got):\n%s", d)
		}
		if h.Get("X-Request-Id") == "" {
			t.Error("no X-Request-Id")
		}
	}

	t.Run("plain", func(t *testing.T) {
		var hr *http.Response
		resp, err := client.Chat.Completions.New(ctx, base, option.WithResponseInto(&hr))
		if err != nil {
			t.Fatal(err)
		}
		checkHeaders(t, hr.Header, "default", "minicpm", "minicpm-a")
		if resp.Model != "openbmb/MiniCPM5-2B" || resp.Choices[0].Message.Content == "" {
			t.Errorf("response %s", resp.RawJSON())
		}
		if got := string(m.LastSent()); resp.RawJSON() != strings.TrimSpace(got) {
			t.Errorf("client body differs from replica body:\nclient  %s\nreplica %s", resp.RawJSON(), got)
		}
	})

	t.Run("stream", func(t *testing.T) {
		var hr *http.Response
		stream := client.Chat.Completions.NewStreaming(ctx, base, option.WithResponseInto(&hr))
		var acc openai.ChatCompletionAccumulator
		for stream.Next() {
			acc.AddChunk(stream.Current())
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		checkHeaders(t, hr.Header, "default", "minicpm", "minicpm-a")
		want := accumulate(t, m.LastSent())
		if d := cmp.Diff(want.Choices[0].Message.Content, acc.Choices[0].Message.Content); d != "" || acc.Choices[0].Message.Content == "" {
			t.Errorf("accumulated content (-replica +client):\n%s", d)
		}
	})

	t.Run("tools", func(t *testing.T) {
		var hr *http.Response
		resp, err := client.Chat.Completions.New(ctx, withTools, option.WithResponseInto(&hr))
		if err != nil {
			t.Fatal(err)
		}
		checkHeaders(t, hr.Header, "tools", "qwen", "qwen-a")
		calls := resp.Choices[0].Message.ToolCalls
		if len(calls) != 1 || calls[0].Function.Name != "get_weather" || !json.Valid([]byte(calls[0].Function.Arguments)) {
			t.Fatalf("tool calls %s", resp.RawJSON())
		}
		if resp.RawJSON() != strings.TrimSpace(string(q.LastSent())) {
			t.Errorf("client body differs from replica body")
		}
	})

	t.Run("stream with tools", func(t *testing.T) {
		var hr *http.Response
		stream := client.Chat.Completions.NewStreaming(ctx, withTools, option.WithResponseInto(&hr))
		var acc openai.ChatCompletionAccumulator
		for stream.Next() {
			acc.AddChunk(stream.Current())
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		checkHeaders(t, hr.Header, "tools", "qwen", "qwen-a")
		want := accumulate(t, q.LastSent())
		got := acc.Choices[0].Message.ToolCalls
		if len(got) != 1 || !json.Valid([]byte(got[0].Function.Arguments)) {
			t.Fatalf("accumulated tool calls %+v", got)
		}
		wf, gf := want.Choices[0].Message.ToolCalls[0].Function, got[0].Function
		if d := cmp.Diff([2]string{wf.Name, wf.Arguments}, [2]string{gf.Name, gf.Arguments}); d != "" {
			t.Errorf("tool call (-replica +client):\n%s", d)
		}
		if acc.Choices[0].FinishReason != "tool_calls" {
			t.Errorf("finish reason %q", acc.Choices[0].FinishReason)
		}
	})

	t.Run("completions", func(t *testing.T) {
		resp, err := client.Completions.New(ctx, openai.CompletionNewParams{
			Model: "auto", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")},
		})
		if err != nil {
			t.Fatal(err)
		}
		if resp.Model != "openbmb/MiniCPM5-2B" || resp.Choices[0].Text == "" {
			t.Errorf("completion %s", resp.RawJSON())
		}
	})

	t.Run("models", func(t *testing.T) {
		page, err := client.Models.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, m := range page.Data {
			ids = append(ids, m.ID)
		}
		want := []string{"Qwen/Qwen3.8-Flash-Next", "auto", "minicpm", "openbmb/MiniCPM5-2B", "qwen"}
		if d := cmp.Diff(want, ids); d != "" {
			t.Errorf("models (-want +got):\n%s", d)
		}
	})
}

// TestStreamUsageInjection: a client that did not ask for usage gets
// exactly the stream it asked for (no usage chunk), while the gateway asked
// the replica for usage and counted the tokens.
func TestStreamUsageInjection(t *testing.T) {
	gw, _, m := setupTwoPools(t)
	resp, body := post(t, gw.API.URL+"/v1/chat/completions", `{"model":"auto","stream":true,"messages":[{"role":"user","content":"hi"}]}`, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if !strings.Contains(string(m.LastBody()), `"include_usage":true`) {
		t.Errorf("replica was not asked for usage: %s", m.LastBody())
	}
	sent := m.LastSent()
	if !bytes.Contains(sent, []byte(`"usage":{`)) {
		t.Fatalf("replica sent no usage chunk:\n%s", sent)
	}
	if bytes.Contains(body, []byte(`"usage":{`)) {
		t.Errorf("client received the injected usage chunk:\n%s", body)
	}
	// Apart from the usage chunk, the client's stream is the replica's, byte for byte.
	// The replica, asked for usage, adds "usage":null to its chunks as
	// OpenAI does; the client did not ask and must not see it.
	var kept [][]byte
	for _, ev := range bytes.SplitAfter(sent, []byte("\n\n")) {
		if !bytes.Contains(ev, []byte(`"choices":[]`)) {
			kept = append(kept, bytes.ReplaceAll(ev, []byte(`,"usage":null`), nil))
		}
	}
	if bytes.Contains(body, []byte(`"usage"`)) {
		t.Errorf("client stream mentions usage")
	}
	if want := bytes.Join(kept, nil); !bytes.Equal(want, body) {
		t.Errorf("client stream differs from replica stream minus usage:\nclient:\n%s\nreplica:\n%s", body, sent)
	}
	if !bytes.HasSuffix(body, []byte("data: [DONE]\n\n")) {
		t.Errorf("stream does not end with [DONE]")
	}
}

func TestClientDisconnectCancelsUpstream(t *testing.T) {
	slow := vllmsim.Profile{Model: "openbmb/MiniCPM5-2B", DecodeTPS: 20, DefaultMaxTokens: 200}
	m := startReplica(t, slow)
	q := startReplica(t, fast("Qwen/Qwen3.8-Flash-Next"))
	gw := startGateway(t, loadConfig(t, twoPools, map[string]string{"qwen": q.Srv.URL, "minicpm": m.Srv.URL}, nil))
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, gw.API.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"auto","stream":true,"messages":[{"role":"user","content":"tell a long story"}]}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(resp.Body)
	if _, err := rd.ReadString('\n'); err != nil { // the first event arrived
		t.Fatal(err)
	}
	if m.Sim.Running() != 1 {
		t.Fatalf("replica running %d, want 1", m.Sim.Running())
	}
	cancel()
	resp.Body.Close()
	polltest.Eventually(t, time.Second, "the replica's running gauge to return to 0", func() bool { return m.Sim.Running() == 0 })
	polltest.Eventually(t, time.Second, "the gateway's in-flight count to return to 0", func() bool {
		return gw.G.Snapshot().Pool("minicpm").Replicas()[0].Inflight() == 0
	})
	if st := m.Sim.Stats(); st.Cancelled != 1 {
		t.Errorf("replica cancelled %d, want 1", st.Cancelled)
	}
}

// TestErrorsAreOpenAIShaped: every layer's error reaches the client in
// OpenAI's shape, with a request id, and the gateway serves on. (Each of
// Parse's refusals is a 400 invalid_request_error: wire's TestParseRefuses;
// one of them is here.)
func TestErrorsAreOpenAIShaped(t *testing.T) {
	q := startReplica(t, fast("Qwen/Qwen3.8-Flash-Next"))
	m := startReplica(t, fast("openbmb/MiniCPM5-2B"))
	failing := startReplica(t, fast("broken/model"))
	failing.Sim.SetFaults(vllmsim.Faults{FailPercent: 100, FailStatus: 500})
	held := startReplica(t, vllmsim.Profile{Model: "held/model", DecodeTPS: 5, DefaultMaxTokens: 100})
	env := map[string]string{"KEY_A": "sk-alpha", "KEY_B": "sk-beta"}
	cfg := loadConfig(t, `
version: 1
server:
  max_body_bytes: 2KiB
  api_keys:
    - {name: alpha, key_env: KEY_A}
    - {name: beta, key_env: KEY_B, models: [small]}
pools:
  big:
    model: Qwen/Qwen3.8-Flash-Next
    health: {disabled: true}
    replicas: [{name: big-a, url: "{{qwen}}"}]
  small:
    model: openbmb/MiniCPM5-2B
    health: {disabled: true}
    replicas: [{name: small-a, url: "{{minicpm}}"}]
  dead:
    model: dead/model
    retries: 1
    health: {disabled: true}
    replicas: [{name: dead-a, url: "{{refused}}"}]
  broken:
    model: broken/model
    retries: 0
    health: {disabled: true}
    replicas: [{name: broken-a, url: "{{failing}}"}]
  held:
    model: held/model
    max_inflight: 1
    queue_timeout: 50ms
    health: {disabled: true}
    replicas: [{name: held-a, url: "{{held}}"}]
routes:
  - name: default
    to: small
`, map[string]string{"qwen": q.Srv.URL, "minicpm": m.Srv.URL, "refused": refusedURL(t), "failing": failing.Srv.URL, "held": held.Srv.URL}, env)
	gw := startGateway(t, cfg)
	url := gw.API.URL + "/v1/chat/completions"
	alpha := map[string]string{"Authorization": "Bearer sk-alpha"}
	good := `{"model":"auto","messages":[{"role":"user","content":"hi"}]}`

	// Occupy the held pool's only slot.
	hold(t, url, `{"model":"held","messages":[{"role":"user","content":"x"}]}`, alpha)
	polltest.Eventually(t, 2*time.Second, "the held request to occupy its slot", func() bool { return held.Sim.Running() == 1 })

	tests := []struct {
		name       string
		body       string
		header     map[string]string
		status     int
		typ, code  string
		retryAfter bool
	}{
		{"invalid JSON", `{"model":`, alpha, 400, "invalid_request_error", "", false},
		{"unknown model", `{"model":"gpt-9","messages":[{"role":"user","content":"hi"}]}`, alpha, 404, "invalid_request_error", "model_not_found", false},
		{"oversized body", `{"model":"auto","messages":[{"role":"user","content":"` + strings.Repeat("x", 4096) + `"}]}`, alpha, 413, "invalid_request_error", "request_too_large", false},
		{"missing key", good, nil, 401, "authentication_error", "invalid_api_key", false},
		{"unknown key", good, map[string]string{"Authorization": "Bearer sk-nope"}, 401, "authentication_error", "invalid_api_key", false},
		{"forbidden model for key", `{"model":"big","messages":[{"role":"user","content":"hi"}]}`, map[string]string{"Authorization": "Bearer sk-beta"}, 403, "permission_error", "model_not_allowed", false},
		{"replica refusing connections", `{"model":"dead","messages":[{"role":"user","content":"hi"}]}`, alpha, 502, "upstream_error", "upstream_failed", false},
		{"replica answering 500", `{"model":"broken","messages":[{"role":"user","content":"hi"}]}`, alpha, 502, "upstream_error", "upstream_failed", false},
		{"pool over max_inflight", `{"model":"held","messages":[{"role":"user","content":"hi"}]}`, alpha, 503, "service_unavailable", "no_replica_available", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := post(t, url, tc.body, tc.header)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d; body %s", resp.StatusCode, tc.status, body)
			}
			var e struct {
				Error struct {
					Message string  `json:"message"`
					Type    string  `json:"type"`
					Param   *string `json:"param"`
					Code    *string `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal(body, &e); err != nil || e.Error.Message == "" {
				t.Fatalf("not an OpenAI error: %s", body)
			}
			code := ""
			if e.Error.Code != nil {
				code = *e.Error.Code
			}
			if e.Error.Type != tc.typ || (tc.code != "" && code != tc.code) {
				t.Errorf("type %q code %q, want %q %q (%s)", e.Error.Type, code, tc.typ, tc.code, body)
			}
			if got := resp.Header.Get("Retry-After") != ""; got != tc.retryAfter {
				t.Errorf("Retry-After present %t, want %t", got, tc.retryAfter)
			}
			if resp.Header.Get("X-Request-Id") == "" {
				t.Error("no X-Request-Id on an error")
			}
			// The gateway still serves after every bad request.
			if resp, body := post(t, url, good, alpha); resp.StatusCode != 200 {
				t.Fatalf("follow-up request: status %d %s", resp.StatusCode, body)
			}
		})
	}
	t.Run("upstream 4xx passes through", func(t *testing.T) {
		resp, body := post(t, url, `{"model":"auto","max_tokens":999999,"messages":[{"role":"user","content":"hi"}]}`, alpha)
		if resp.StatusCode != 400 || !strings.Contains(string(body), "maximum context length") {
			t.Errorf("status %d body %.300s", resp.StatusCode, body)
		}
		if resp.Header.Get("X-Switchyard-Pool") != "small" {
			t.Errorf("pool header %q", resp.Header.Get("X-Switchyard-Pool"))
		}
	})
	if strings.Contains(gw.Logs.String(), "sk-alpha") || strings.Contains(gw.Logs.String(), "sk-beta") {
		t.Error("an API key appeared in the logs")
	}
}

// TestReadiness: /readyz does not follow pool health by default (a pod
// that turns unready when a backend dies takes every gateway pod out of the
// Service at once, exactly when fallback and on_error should keep traffic
// flowing); it follows the pools named in server.readiness.require_pools,
// and turns 503 once the gateway drains. /healthz answers 200, and an
// unknown path a JSON 404.
func TestReadiness(t *testing.T) {
	m := startReplica(t, fast("openbmb/MiniCPM5-2B"))
	const tmpl = `
version: 1
server: {{readiness}}
pools:
  small:
    model: openbmb/MiniCPM5-2B
    health: {interval: 20ms, timeout: 2s, unhealthy_after: 1, healthy_after: 1}
    replicas: [{name: s, url: "{{m}}"}]
  gone:
    model: gone/model
    health: {interval: 20ms, timeout: 2s, unhealthy_after: 1, healthy_after: 1}
    replicas: [{name: g, url: "{{gone}}"}]
classifier: {kind: model, pool: gone, labels: [simple, complex]}
routes:
  - name: default
    to: small
    fallback: [gone]
`
	ready := func(t *testing.T, gw *gateway) (int, string) {
		resp, body := get(t, gw.API.URL+"/readyz", nil)
		return resp.StatusCode, string(body)
	}
	gone := refusedURL(t)

	t.Run("a dead fallback and classifier pool leave it ready", func(t *testing.T) {
		cfg := loadConfig(t, tmpl, map[string]string{"m": m.Srv.URL, "gone": gone, "readiness": "{}"}, nil)
		gw := startGateway(t, cfg)
		polltest.Eventually(t, 5*time.Second, "the dead pool to be marked down", func() bool {
			return gw.MetricValue(t, "switchyard_replica_healthy", map[string]string{"pool": "gone"}) == 0
		})
		if code, body := ready(t, gw); code != http.StatusOK {
			t.Errorf("/readyz %d %s with only a fallback pool down", code, body)
		}
		if resp, _ := get(t, gw.API.URL+"/healthz", nil); resp.StatusCode != 200 {
			t.Errorf("/healthz: %d", resp.StatusCode)
		}
		if resp, _ := get(t, gw.API.URL+"/v1/nope", nil); resp.StatusCode != 404 || resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("unknown path: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		if resp, _ := post(t, gw.API.URL+"/v1/chat/completions", `{"model":"auto","messages":[{"role":"user","content":"hi"}]}`, nil); resp.StatusCode != 200 {
			t.Errorf("status %d", resp.StatusCode)
		}
		gw.G.Drain()
		if code, body := ready(t, gw); code != http.StatusServiceUnavailable || !strings.Contains(body, "draining") {
			t.Errorf("/readyz while draining: %d %s", code, body)
		}
		// Requests are still served while draining.
		if resp, _ := post(t, gw.API.URL+"/v1/chat/completions", `{"model":"auto","messages":[{"role":"user","content":"hi"}]}`, nil); resp.StatusCode != 200 {
			t.Errorf("status %d while draining", resp.StatusCode)
		}
	})

	t.Run("require_pools", func(t *testing.T) {
		cfg := loadConfig(t, tmpl, map[string]string{"m": m.Srv.URL, "gone": gone, "readiness": "{readiness: {require_pools: [small, gone]}}"}, nil)
		gw := startGateway(t, cfg)
		var body string
		polltest.Eventually(t, 5*time.Second, "/readyz to report the required pool down", func() bool {
			var code int
			code, body = ready(t, gw)
			return code == http.StatusServiceUnavailable
		})
		if !strings.Contains(body, "no available replica in required pool(s) gone") {
			t.Errorf("/readyz reason: %s", body)
		}
	})
}
