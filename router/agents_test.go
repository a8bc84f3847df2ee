package router_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/switchyard/switchyard/internal/polltest"
	"github.com/switchyard/switchyard/vllmsim"
)

// agentsYAML routes every model name agents send (a pattern) by the
// policy; gpt-4o is pinned to small.
const agentsYAML = `
version: 1
pools:
  big:
    model: Qwen/Qwen3.8-Flash-Next
    health: {disabled: true}
    replicas: [{name: big-a, url: "{{b1}}"}, {name: big-b, url: "{{b2}}"}]
  small:
    model: openbmb/MiniCPM5-2B
    health: {disabled: true}
    replicas: [{name: small-a, url: "{{s1}}"}]
models:
  - {name: auto, route: policy}
  - {name: gpt-4o, pool: small}
  - {name: "claude-*", route: policy, rewrite_response_model: true}
  - {name: "gpt-5*", route: policy}
routes:
  - name: tools
    when: {tools: {gte: 1}}
    to: big
  - name: default
    to: small
`

type agentsEnv struct {
	gws        []*gateway
	b1, b2, s1 *replica
}

func startAgents(t *testing.T, instances int) *agentsEnv {
	t.Helper()
	e := &agentsEnv{
		b1: startReplica(t, fast("Qwen/Qwen3.8-Flash-Next")),
		b2: startReplica(t, fast("Qwen/Qwen3.8-Flash-Next")),
		s1: startReplica(t, fast("openbmb/MiniCPM5-2B")),
	}
	urls := map[string]string{"b1": e.b1.Srv.URL, "b2": e.b2.Srv.URL, "s1": e.s1.Srv.URL}
	for range instances {
		e.gws = append(e.gws, startGateway(t, loadConfig(t, agentsYAML, urls, nil)))
	}
	return e
}

func anthropicClient(gw *gateway) anthropic.Client {
	return anthropic.NewClient(aoption.WithBaseURL(gw.API.URL+"/"), aoption.WithAPIKey("unused"), aoption.WithMaxRetries(0))
}

// TestResponsesWithOpenAISDK: the official OpenAI Go SDK's Responses
// client through the gateway: plain, stream, a function-call round trip
// whose follow-up (previous_response_id) goes to another gateway
// instance, and retrieval from a third.
func TestResponsesWithOpenAISDK(t *testing.T) {
	e := startAgents(t, 3)
	ctx := context.Background()
	c0, c1, c2 := sdk(e.gws[0]), sdk(e.gws[1]), sdk(e.gws[2])
	ask := responses.ResponseNewParams{Model: "gpt-5-codex", Instructions: openai.String("Be brief."),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Describe the harbor.")}}

	resp, err := c0.Responses.New(ctx, ask)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != responses.ResponseStatusCompleted || resp.OutputText() == "" || resp.Usage.OutputTokens != 8 {
		t.Errorf("response %s", resp.RawJSON())
	}
	if !strings.HasPrefix(resp.ID, "resp_sy") {
		t.Errorf("response id %q does not name its replica", resp.ID)
	}

	stream := c0.Responses.NewStreaming(ctx, ask)
	var deltas string
	var completed responses.Response
	for stream.Next() {
		switch ev := stream.Current(); ev.Type {
		case "response.output_text.delta":
			deltas += ev.AsResponseOutputTextDelta().Delta
		case "response.completed":
			completed = ev.AsResponseCompleted().Response
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if deltas == "" || completed.OutputText() != deltas || !strings.HasPrefix(completed.ID, "resp_sy") {
		t.Errorf("stream: deltas %q, completed %q (id %s)", deltas, completed.OutputText(), completed.ID)
	}

	tools := []responses.ToolUnionParam{responses.ToolParamOfFunction("get_weather", map[string]any{
		"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []string{"city"},
	}, true)}
	call, err := c0.Responses.New(ctx, responses.ResponseNewParams{Model: "gpt-5-codex", Tools: tools,
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Weather in Paris?")}})
	if err != nil {
		t.Fatal(err)
	}
	if len(call.Output) != 1 || call.Output[0].Type != "function_call" {
		t.Fatalf("output %s: want a function call", call.RawJSON())
	}
	fc := call.Output[0].AsFunctionCall()
	// Which replica made it: the one that saw a request.
	maker := e.b1
	if e.b1.Count() == 0 {
		maker = e.b2
	}
	before := maker.Count()
	result := responses.ResponseInputItemParamOfFunctionCallOutput("sunny, 21C")
	result.OfFunctionCallOutput.CallID = openai.String(fc.CallID)
	answer, err := c1.Responses.New(ctx, responses.ResponseNewParams{Model: "gpt-5-codex", Tools: tools,
		PreviousResponseID: openai.String(call.ID),
		Input:              responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{result}}})
	if err != nil {
		t.Fatalf("follow-up on another instance: %v", err)
	}
	if answer.OutputText() == "" || maker.Count() != before+1 {
		t.Errorf("the follow-up did not reach the replica that stored the call (%d → %d): %s", before, maker.Count(), answer.RawJSON())
	}
	if prev := gjson.GetBytes(maker.LastBody(), "previous_response_id").Str; strings.HasPrefix(prev, "resp_sy") || prev == "" {
		t.Errorf("the replica got previous_response_id %q, want its own id", prev)
	}
	got, err := c2.Responses.Get(ctx, call.ID, responses.ResponseGetParams{})
	if err != nil || got.ID != call.ID || len(got.Output) != 1 {
		t.Errorf("GET from a third instance: %v %s", err, got.RawJSON())
	}

	// Ids the gateway did not make, and ids of replicas no longer
	// configured, are 404 in the Responses error shape, never a guess.
	for _, id := range []string{"resp_abc", "resp_sy000000000000_resp_abc"} {
		_, err = c1.Responses.Get(ctx, id, responses.ResponseGetParams{})
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 || apiErr.Code != "response_not_found" {
			t.Errorf("GET %s: %v", id, err)
		}
	}
}

// TestMessagesWithAnthropicSDK: the official Anthropic Go SDK through the
// gateway: plain, stream, a tool_use round trip, and errors as the SDK's
// typed errors.
func TestMessagesWithAnthropicSDK(t *testing.T) {
	e := startAgents(t, 1)
	ctx := context.Background()
	c := anthropicClient(e.gws[0])
	params := anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 64,
		System:   []anthropic.TextBlockParam{{Text: "Be brief."}},
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Describe the harbor."))}}

	msg, err := c.Messages.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if len(msg.Content) != 1 || msg.Content[0].Text == "" || msg.StopReason != anthropic.StopReasonEndTurn || msg.Usage.OutputTokens != 8 {
		t.Errorf("message %s", msg.RawJSON())
	}
	if msg.Model != "claude-sonnet-4-5" {
		t.Errorf("model %q, want the client's name back (rewrite_response_model)", msg.Model)
	}

	stream := c.Messages.NewStreaming(ctx, params)
	var acc anthropic.Message
	for stream.Next() {
		if err := acc.Accumulate(stream.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if len(acc.Content) != 1 || acc.Content[0].Text != msg.Content[0].Text || acc.Usage.OutputTokens != 8 || acc.Model != "claude-sonnet-4-5" {
		t.Errorf("stream accumulated %s", acc.RawJSON())
	}

	tool := anthropic.ToolUnionParamOfTool(anthropic.ToolInputSchemaParam{
		Properties: map[string]any{"city": map[string]any{"type": "string"}}, Required: []string{"city"}}, "get_weather")
	ask := anthropic.NewUserMessage(anthropic.NewTextBlock("Weather in Paris?"))
	call, err := c.Messages.New(ctx, anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 64,
		Tools: []anthropic.ToolUnionParam{tool}, Messages: []anthropic.MessageParam{ask}})
	if err != nil {
		t.Fatal(err)
	}
	if call.StopReason != anthropic.StopReasonToolUse || len(call.Content) != 1 || call.Content[0].Type != "tool_use" {
		t.Fatalf("want a tool_use: %s", call.RawJSON())
	}
	use := call.Content[0].AsToolUse()
	final, err := c.Messages.New(ctx, anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 64,
		Tools: []anthropic.ToolUnionParam{tool},
		Messages: []anthropic.MessageParam{ask, call.ToParam(),
			anthropic.NewUserMessage(anthropic.NewToolResultBlock(use.ID, "sunny, 21C", false))}})
	if err != nil {
		t.Fatal(err)
	}
	if final.StopReason != anthropic.StopReasonEndTurn || final.Content[0].Text == "" {
		t.Errorf("answer to the tool result %s", final.RawJSON())
	}

	// Errors: an unknown model is the SDK's not_found_error, a bad key its
	// authentication_error, both in Anthropic's shape.
	_, err = c.Messages.New(ctx, anthropic.MessageNewParams{Model: "mistral-large", MaxTokens: 8,
		Messages: []anthropic.MessageParam{ask}})
	var apiErr *anthropic.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 || apiErr.Type() != "not_found_error" || !strings.Contains(apiErr.Message, "mistral-large") {
		t.Errorf("unknown model: %v", err)
	}
}

// TestMessagesAuthWithXAPIKey: Anthropic's clients send the key as
// x-api-key; it is accepted, checked and never forwarded.
func TestMessagesAuthWithXAPIKey(t *testing.T) {
	r := startReplica(t, fast("m"))
	gw := startGateway(t, loadConfig(t, `
version: 1
server: {api_keys: [{name: claude, key_env: K}]}
pools:
  p: {model: m, health: {disabled: true}, replicas: [{name: a, url: "{{a}}"}]}
models: [{name: "*", route: policy}]
routes:
  - name: default
    to: p
`, map[string]string{"a": r.Srv.URL}, map[string]string{"K": "sk-ant-test"}))
	body := `{"model":"claude-opus-4","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`
	resp, b := post(t, gw.API.URL+"/v1/messages", body, map[string]string{"x-api-key": "sk-ant-test", "anthropic-version": "2023-06-01"})
	if resp.StatusCode != 200 || gjson.GetBytes(b, "type").Str != "message" {
		t.Fatalf("with x-api-key: %d %s", resp.StatusCode, b)
	}
	if h := r.LastHeader(); h.Get("X-Api-Key") != "" || h.Get("Anthropic-Version") != "2023-06-01" {
		t.Errorf("the replica got x-api-key %q and anthropic-version %q", h.Get("X-Api-Key"), h.Get("Anthropic-Version"))
	}
	resp, b = post(t, gw.API.URL+"/v1/messages", body, map[string]string{"x-api-key": "wrong"})
	if resp.StatusCode != 401 || gjson.GetBytes(b, "error.type").Str != "authentication_error" || gjson.GetBytes(b, "type").Str != "error" {
		t.Errorf("wrong key: %d %s", resp.StatusCode, b)
	}
}

// TestAgentsPassthrough: apart from model, what the client sends reaches
// the replica byte for byte on every API, unknown fields, escapes, spacing
// and the order of fields included.
func TestAgentsPassthrough(t *testing.T) {
	e := startAgents(t, 1)
	gw := e.gws[0]
	for _, c := range []struct{ path, body string }{
		{"/v1/chat/completions", `{"model":"auto","messages":[{"role":"user","content":"héllo \u00e9 \"q\""}],"x_vendor": {"a": [1, 2]},"chat_template_kwargs":{"enable_thinking":false},  "temperature":0.25,"seed":7}`},
		{"/v1/chat/completions", `{"x_first":true,"model":"small","messages":[{"role":"user","content":"hi"}],"logprobs":true,"top_logprobs":2,"n":2,"stop":["\n\n"],"response_format":{"type":"text"}}`},
		{"/v1/chat/completions", `{"model":"auto","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}],"x_vendor":{"nested":{"deep":[{},[]]}}}`},
		{"/v1/responses", `{"model":"gpt-4o","input":[{"role":"developer","content":"Be brief."},{"role":"user","content":[{"type":"input_text","text":"hi"}]}],"store":false,"include":["reasoning.encrypted_content"],"reasoning":{"summary":"auto"},"prompt_cache_key":"s-1","x_unknown":{"a":[1,2]}}`},
		{"/v1/messages", `{"model":"gpt-4o","max_tokens":8,"system":[{"type":"text","text":"Be brief.","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":"hi"}],"metadata":{"user_id":"u"},"thinking":{"type":"adaptive"},"x_unknown":true}`},
	} {
		resp, b := post(t, gw.API.URL+c.path+"?beta=true", c.body, map[string]string{"anthropic-version": "2023-06-01"})
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", c.path, resp.StatusCode, b)
		}
		want, _ := sjson.Set(c.body, "model", "openbmb/MiniCPM5-2B")
		if got := string(e.s1.LastBody()); got != want {
			t.Errorf("%s: the replica got\n%s\nwant\n%s", c.path, got, want)
		}
	}
}

// TestAgentsUsageAndTTFT: the gateway's token counts and first-token
// times for both APIs, stream and not, equal what the simulator produced.
func TestAgentsUsageAndTTFT(t *testing.T) {
	r := startReplica(t, vllmsim.Profile{Model: "m", DefaultMaxTokens: 6, DecodeTPS: 200})
	gw := oneReplicaGateway(t, r.Srv.URL, "", "")
	bodies := []struct{ path, body string }{
		{"/v1/responses", `{"model":"auto","input":"Describe the harbor."}`},
		{"/v1/responses", `{"model":"auto","input":"Describe the harbor.","stream":true}`},
		{"/v1/messages", `{"model":"auto","max_tokens":64,"messages":[{"role":"user","content":"Describe the harbor."}]}`},
		{"/v1/messages", `{"model":"auto","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"Describe the harbor."}]}`},
	}
	for _, c := range bodies {
		if resp, b := post(t, gw.API.URL+c.path, c.body, nil); resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", c.path, resp.StatusCode, b)
		}
	}
	st := r.Sim.Stats()
	polltest.Eventually(t, 5*time.Second, "four requests counted", func() bool {
		return gw.MetricValue(t, "switchyard_tokens_total", map[string]string{"kind": "completion"}) == float64(st.CompletionTokens)
	})
	if got := gw.MetricValue(t, "switchyard_tokens_total", map[string]string{"kind": "prompt"}); got != float64(st.PromptTokens) {
		t.Errorf("prompt tokens %v, simulator %d", got, st.PromptTokens)
	}
	if st.CompletionTokens != 24 {
		t.Errorf("simulator completion tokens %d, want 24", st.CompletionTokens)
	}
	// One TTFT observation per stream.
	if n := gw.MetricValue(t, "switchyard_time_to_first_token_seconds", nil); n != 2 {
		t.Errorf("TTFT observations %v, want 2 (one per stream)", n)
	}
}

// TestAgentsModelNames: an agent's usual model names are routed by the
// patterns; an unknown name is 404 in the shape of the API asked.
func TestAgentsModelNames(t *testing.T) {
	e := startAgents(t, 1)
	gw := e.gws[0]
	chat := func(model string) (*http.Response, []byte) {
		return post(t, gw.API.URL+"/v1/chat/completions", `{"model":"`+model+`","messages":[{"role":"user","content":"hi"}]}`, nil)
	}
	if resp, b := chat("gpt-5-codex"); resp.StatusCode != 200 || resp.Header.Get("X-Switchyard-Route") != "default" {
		t.Errorf("gpt-5-codex: %d %s %s", resp.StatusCode, resp.Header.Get("X-Switchyard-Route"), b)
	}
	if resp, b := chat("gpt-4o"); resp.StatusCode != 200 || resp.Header.Get("X-Switchyard-Route") != "direct" || resp.Header.Get("X-Switchyard-Pool") != "small" {
		t.Errorf("gpt-4o: %d %s", resp.StatusCode, b)
	}
	if resp, b := chat("llama-3"); resp.StatusCode != 404 || gjson.GetBytes(b, "error.code").Str != "model_not_found" {
		t.Errorf("unknown on chat: %d %s", resp.StatusCode, b)
	}
	resp, b := post(t, gw.API.URL+"/v1/messages", `{"model":"llama-3","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`, nil)
	if resp.StatusCode != 404 || gjson.GetBytes(b, "error.type").Str != "not_found_error" {
		t.Errorf("unknown on messages: %d %s", resp.StatusCode, b)
	}
	model := func(path string, h map[string]string) (int, []byte) {
		resp, b := get(t, gw.API.URL+path, h)
		return resp.StatusCode, b
	}
	if code, b := model("/v1/models/claude-sonnet-4-5", nil); code != 200 || gjson.GetBytes(b, "id").Str != "claude-sonnet-4-5" || gjson.GetBytes(b, "object").Str != "model" {
		t.Errorf("GET /v1/models/{id}: %d %s", code, b)
	}
	if code, b := model("/v1/models/claude-sonnet-4-5", map[string]string{"anthropic-version": "2023-06-01"}); code != 200 || gjson.GetBytes(b, "type").Str != "model" {
		t.Errorf("GET /v1/models/{id}, Anthropic: %d %s", code, b)
	}
	if code, b := model("/v1/models/llama-3", nil); code != 404 || gjson.GetBytes(b, "error.code").Str != "model_not_found" {
		t.Errorf("GET /v1/models/unknown: %d %s", code, b)
	}
	if code, b := model("/v1/models", map[string]string{"anthropic-version": "2023-06-01"}); code != 200 || gjson.GetBytes(b, "has_more").Type != gjson.False || gjson.GetBytes(b, "data.0.type").Str != "model" {
		t.Errorf("GET /v1/models, Anthropic: %d %s", code, b)
	}
	if resp, _ := request(t, http.MethodHead, gw.API.URL+"/", "", nil); resp.StatusCode != 200 {
		t.Errorf("HEAD /: %d", resp.StatusCode)
	}
}

// TestCountTokensFallback: count_tokens goes to the pool; a vLLM without
// it (404) gets an estimate, and that replica stays in rotation.
func TestCountTokensFallback(t *testing.T) {
	old := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/messages/count_tokens" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(200)
	}))
	defer old.Close()
	gw := oneReplicaGateway(t, old.URL, "", "")
	for range 3 {
		resp, b := post(t, gw.API.URL+"/v1/messages/count_tokens", `{"model":"m","messages":[{"role":"user","content":"hello there, how are you?"}]}`, nil)
		if resp.StatusCode != 200 || gjson.GetBytes(b, "input_tokens").Int() < 5 {
			t.Fatalf("count_tokens: %d %s", resp.StatusCode, b)
		}
	}
	current := startReplica(t, fast("m"))
	gw = oneReplicaGateway(t, current.Srv.URL, "", "")
	resp, b := post(t, gw.API.URL+"/v1/messages/count_tokens", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, nil)
	if resp.StatusCode != 200 || !gjson.GetBytes(b, "context_management").Exists() {
		t.Errorf("count_tokens passed to vLLM: %d %s", resp.StatusCode, b)
	}
}

// TestClaudeCodeMaxTokensFit: Claude Code asks for 32,000 tokens whatever
// the model; vLLM refuses a request whose prompt and answer exceed the
// context, so with the pool's max_model_len the gateway lowers it.
func TestClaudeCodeMaxTokensFit(t *testing.T) {
	r := startReplica(t, fast("m")) // MaxModelLen 4096
	body := `{"model":"auto","max_tokens":32000,"messages":[{"role":"user","content":"hi"}]}`
	refused := oneReplicaGateway(t, r.Srv.URL, "", "")
	if resp, b := post(t, refused.API.URL+"/v1/messages", body, nil); resp.StatusCode != 400 || gjson.GetBytes(b, "type").Str != "error" {
		t.Fatalf("without max_model_len: %d %s, want vLLM's 400 in Anthropic's shape", resp.StatusCode, b)
	}
	fits := oneReplicaGateway(t, r.Srv.URL, ", max_model_len: 4096", "")
	resp, b := post(t, fits.API.URL+"/v1/messages", body, nil)
	if resp.StatusCode != 200 || gjson.GetBytes(b, "type").Str != "message" {
		t.Errorf("with max_model_len: %d %s", resp.StatusCode, b)
	}
	if n := gjson.GetBytes(r.LastBody(), "max_tokens").Int(); n >= 4096 || n < 4000 {
		t.Errorf("the replica got max_tokens %d, want just under 4096 less the prompt", n)
	}
}

// TestPreviousResponseIsScoped: previous_response_id pins only Responses
// requests, and only to a pool the requested model reaches: a chat
// request carrying one is routed as usual, and a Responses request for a
// model pinned to another pool gets 404, never the other pool.
func TestPreviousResponseIsScoped(t *testing.T) {
	e := startAgents(t, 1)
	gw := e.gws[0]
	// A response id naming big-a, as a Responses answer from it would.
	resp, b := post(t, gw.API.URL+"/v1/responses", `{"model":"auto","input":"x","tools":[{"type":"function","name":"f","parameters":{"type":"object"}}]}`, nil)
	id := gjson.GetBytes(b, "id").Str
	if resp.StatusCode != 200 || resp.Header.Get("X-Switchyard-Pool") != "big" || !strings.HasPrefix(id, "resp_sy") {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	resp, b = post(t, gw.API.URL+"/v1/chat/completions", `{"model":"gpt-4o","previous_response_id":"`+id+`","messages":[{"role":"user","content":"hi"}]}`, nil)
	if resp.StatusCode != 200 || resp.Header.Get("X-Switchyard-Pool") != "small" {
		t.Errorf("chat with previous_response_id: %d pool %q %s", resp.StatusCode, resp.Header.Get("X-Switchyard-Pool"), b)
	}
	resp, b = post(t, gw.API.URL+"/v1/responses", `{"model":"gpt-4o","previous_response_id":"`+id+`","input":"hi"}`, nil)
	if resp.StatusCode != 404 || gjson.GetBytes(b, "error.code").Str != "response_not_found" {
		t.Errorf("Responses for small naming big's response: %d %s", resp.StatusCode, b)
	}
}
