package vllmsim_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/tidwall/gjson"

	"github.com/switchyard/switchyard/vllmsim"
)

const anthropicWeatherTool = `{"name":"get_weather","description":"Weather now","input_schema":{"type":"object",
	"properties":{"city":{"type":"string"},"unit":{"type":"string","enum":["celsius","fahrenheit"]}},"required":["city","unit"]}}`

func TestMessagesPlain(t *testing.T) {
	sim, ts := start(t, vllmsim.Profile{DefaultMaxTokens: 12})
	tests := []struct {
		name       string
		path       string
		body       string
		wantPrompt int // 0: not checked
		wantTokens int
		wantStop   string
	}{
		{"answer shorter than max_tokens", "/v1/messages", `{"model":"sim/test-model","max_tokens":32000,"messages":[{"role":"user","content":"Tell me about the harbor"}]}`, 6, 12, "end_turn"},
		{"max_tokens cuts", "/v1/messages", `{"model":"sim/test-model","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, 1, 5, "max_tokens"},
		{"beta query string", "/v1/messages?beta=true", `{"model":"sim/test-model","max_tokens":1000,"messages":[{"role":"user","content":"hi"}]}`, 1, 12, "end_turn"},
		{"system blocks and content blocks", "/v1/messages", `{"model":"sim/test-model","max_tokens":1000,
			"system":[{"type":"text","text":"x-anthropic-billing-header: cc_version=1; cch=abc;"},{"type":"text","text":"abcdabcd","cache_control":{"type":"ephemeral"}}],
			"messages":[{"role":"system","content":"abcd"},
				{"role":"user","content":[{"type":"text","text":"abcdabcd"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}}]},
				{"role":"assistant","content":[{"type":"thinking","thinking":"ignored","signature":"s"},{"type":"text","text":"abcd"}]},
				{"role":"user","content":"abcdabcdabcd"}],
			"thinking":{"type":"adaptive"},"metadata":{"user_id":"u"},"temperature":0.5,"stop_sequences":["\n\nHuman:"],
			"context_management":{"edits":[]},"output_config":{"effort":"high"}}`, 9, 12, "end_turn"},
	}
	var sumPrompt, sumOutput int64
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := post(t, ts, tc.path, tc.body)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			doc := string(b)
			if !strings.HasPrefix(field(doc, "id").Str, "chatcmpl-") || field(doc, "type").Str != "message" ||
				field(doc, "role").Str != "assistant" || field(doc, "model").Str != testModel {
				t.Errorf("envelope: %s", b)
			}
			if field(doc, "stop_sequence").Exists() {
				t.Errorf("stop_sequence present: vLLM drops null fields (vllm-project/vllm#56371): %s", b)
			}
			if got := field(doc, "stop_reason").Str; got != tc.wantStop {
				t.Errorf("stop_reason %q, want %q", got, tc.wantStop)
			}
			blocks := field(doc, "content").Array()
			if len(blocks) != 1 || blocks[0].Get("type").Str != "text" {
				t.Fatalf("content %s: want one text block", field(doc, "content").Raw)
			}
			if words := len(strings.Fields(blocks[0].Get("text").Str)); words != tc.wantTokens {
				t.Errorf("text %q has %d words, want %d", blocks[0].Get("text").Str, words, tc.wantTokens)
			}
			in, out := field(doc, "usage.input_tokens").Int(), field(doc, "usage.output_tokens").Int()
			if tc.wantPrompt > 0 && in != int64(tc.wantPrompt) {
				t.Errorf("input_tokens %d, want %d", in, tc.wantPrompt)
			}
			if out != int64(tc.wantTokens) {
				t.Errorf("output_tokens %d, want %d", out, tc.wantTokens)
			}
			sumPrompt += in
			sumOutput += out
		})
	}
	if st := sim.Stats(); st.PromptTokens != sumPrompt || st.CompletionTokens != sumOutput || st.Completed != int64(len(tests)) {
		t.Errorf("stats %+v, want %d prompt and %d completion tokens from the usage fields", st, sumPrompt, sumOutput)
	}
}

func TestMessagesStream(t *testing.T) {
	_, ts := start(t, vllmsim.Profile{DefaultMaxTokens: 5})
	const body = `"model":"sim/test-model","max_tokens":1024,"messages":[{"role":"user","content":"Tell me about the harbor"}]`
	_, b := post(t, ts, "/v1/messages", `{`+body+`}`)
	want := field(string(b), "content.0.text").Str

	events := collectEvents(t, send(t, context.Background(), ts, "/v1/messages?beta=true", `{"stream":true,`+body+`}`))
	wantNames := concat(
		[]string{"message_start", "content_block_start"},
		repeat("content_block_delta", 5),
		[]string{"content_block_stop", "message_delta", "message_stop"},
	)
	if diff := cmp.Diff(wantNames, names(events)); diff != "" {
		t.Fatalf("event sequence (-want +got):\n%s", diff)
	}
	start := field(events[0].data, "message")
	if !strings.HasPrefix(start.Get("id").Str, "chatcmpl-") || start.Get("type").Str != "message" || start.Get("role").Str != "assistant" ||
		start.Get("model").Str != testModel || start.Get("content").Raw != "[]" ||
		start.Get("stop_reason").Type != gjson.Null || start.Get("usage.input_tokens").Int() != 6 || start.Get("usage.output_tokens").Int() != 0 {
		t.Errorf("message_start: %s", events[0].data)
	}
	if got := field(events[1].data, "content_block").Raw; got != `{"type":"text","text":""}` || field(events[1].data, "index").Int() != 0 {
		t.Errorf("content_block_start: %s", events[1].data)
	}
	var text string
	for _, ev := range events[2:7] {
		if field(ev.data, "delta.type").Str != "text_delta" || field(ev.data, "index").Int() != 0 {
			t.Errorf("delta %s", ev.data)
		}
		text += field(ev.data, "delta.text").Str
	}
	if text != want {
		t.Errorf("streamed %q, want the non-stream text %q", text, want)
	}
	if got := events[8].data; got != `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"input_tokens":6,"output_tokens":5}}` {
		t.Errorf("message_delta: %s", got)
	}
	if got := events[9].data; got != `{"type":"message_stop"}` {
		t.Errorf("message_stop: %s", got)
	}
}

func TestMessagesToolUse(t *testing.T) {
	_, ts := start(t, vllmsim.Profile{DefaultMaxTokens: 6})
	const ask = `"model":"sim/test-model","max_tokens":4096,"messages":[{"role":"user","content":"Weather in Paris?"}],"tools":[` + anthropicWeatherTool + `]`
	wantInput := `{"city":"Paris","unit":"celsius"}`

	t.Run("non-stream", func(t *testing.T) {
		_, b := post(t, ts, "/v1/messages", `{`+ask+`}`)
		doc := string(b)
		block := field(doc, "content.0")
		if field(doc, "content.#").Int() != 1 || block.Get("type").Str != "tool_use" || block.Get("name").Str != "get_weather" ||
			block.Get("input").Raw != wantInput || !strings.HasPrefix(block.Get("id").Str, "chatcmpl-tool-") {
			t.Errorf("content %s", field(doc, "content").Raw)
		}
		if field(doc, "stop_reason").Str != "tool_use" {
			t.Errorf("stop_reason %s", field(doc, "stop_reason").Raw)
		}
	})

	t.Run("stream", func(t *testing.T) {
		events := collectEvents(t, send(t, context.Background(), ts, "/v1/messages", `{"stream":true,`+ask+`}`))
		n := len(events)
		wantNames := concat(
			[]string{"message_start", "content_block_start"},
			repeat("content_block_delta", n-5),
			[]string{"content_block_stop", "message_delta", "message_stop"},
		)
		if diff := cmp.Diff(wantNames, names(events)); diff != "" {
			t.Fatalf("event sequence (-want +got):\n%s", diff)
		}
		block := field(events[1].data, "content_block")
		if block.Get("type").Str != "tool_use" || block.Get("name").Str != "get_weather" || block.Get("input").Raw != "{}" ||
			!strings.HasPrefix(block.Get("id").Str, "chatcmpl-tool-") {
			t.Errorf("content_block_start: %s", events[1].data)
		}
		var partial string
		for _, ev := range events[2 : n-3] {
			if field(ev.data, "delta.type").Str != "input_json_delta" {
				t.Errorf("delta %s", ev.data)
			}
			partial += field(ev.data, "delta.partial_json").Str
		}
		if partial != wantInput {
			t.Errorf("partial_json adds up to %q, want %q", partial, wantInput)
		}
		if md := events[n-2].data; field(md, "delta.stop_reason").Str != "tool_use" || field(md, "usage.output_tokens").Int() != int64(n-5+1) {
			t.Errorf("message_delta %s: want tool_use and one token per delta plus the call's header", md)
		}
	})

	tests := []struct {
		name     string
		body     string
		wantTool string // "" = a text answer
	}{
		{"tool result answers with text", `{"model":"sim/test-model","max_tokens":100,"tools":[` + anthropicWeatherTool + `],"messages":[
			{"role":"user","content":"Weather in Paris?"},
			{"role":"assistant","content":[{"type":"text","text":"Let me look."},{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city":"Paris","unit":"celsius"}}]},
			{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"sunny, 21C"}]}]}]}`, ""},
		{"tool result and a new question", `{"model":"sim/test-model","max_tokens":100,"tools":[` + anthropicWeatherTool + `],"messages":[
			{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"sunny"},{"type":"text","text":"And in Rome?"}]}]}`, "get_weather"},
		{"named tool", `{"model":"sim/test-model","max_tokens":100,"messages":[{"role":"user","content":"hi"}],
			"tools":[{"name":"ping","input_schema":{"type":"object"}},` + anthropicWeatherTool + `],"tool_choice":{"type":"tool","name":"get_weather"}}`, "get_weather"},
		{"any", `{"model":"sim/test-model","max_tokens":100,"messages":[{"role":"user","content":"hi"}],
			"tools":[{"name":"ping","input_schema":{"type":"object"}}],"tool_choice":{"type":"any"}}`, "ping"},
		{"none", `{"model":"sim/test-model","max_tokens":100,"messages":[{"role":"user","content":"hi"}],
			"tools":[` + anthropicWeatherTool + `],"tool_choice":{"type":"none"}}`, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := post(t, ts, "/v1/messages", tc.body)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			block := field(string(b), "content.0")
			if tc.wantTool == "" {
				if block.Get("type").Str != "text" || block.Get("text").Str == "" || field(string(b), "stop_reason").Str != "end_turn" {
					t.Errorf("response %s: want text", b)
				}
				return
			}
			if block.Get("type").Str != "tool_use" || block.Get("name").Str != tc.wantTool || !block.Get("input").IsObject() {
				t.Errorf("response %s: want a call to %s", b, tc.wantTool)
			}
		})
	}
}

func TestMessagesThinking(t *testing.T) {
	_, ts := start(t, vllmsim.Profile{DefaultMaxTokens: 8, ReasoningTokens: 3})
	const body = `"model":"sim/test-model","max_tokens":1024,"messages":[{"role":"user","content":"Describe the harbor."}]`
	_, b := post(t, ts, "/v1/messages", `{`+body+`}`)
	doc := string(b)
	thinking, text := field(doc, "content.0"), field(doc, "content.1")
	if thinking.Get("type").Str != "thinking" || len(strings.Fields(thinking.Get("thinking").Str)) != 3 || len(thinking.Get("signature").Str) != 32 {
		t.Errorf("thinking block %s", thinking.Raw)
	}
	if text.Get("type").Str != "text" || len(strings.Fields(text.Get("text").Str)) != 5 || field(doc, "usage.output_tokens").Int() != 8 {
		t.Errorf("text block %s, usage %s", text.Raw, field(doc, "usage").Raw)
	}

	events := collectEvents(t, send(t, context.Background(), ts, "/v1/messages", `{"stream":true,`+body+`}`))
	wantNames := concat(
		[]string{"message_start", "content_block_start"},
		repeat("content_block_delta", 3+1), // thinking deltas and the signature
		[]string{"content_block_stop", "content_block_start"},
		repeat("content_block_delta", 5),
		[]string{"content_block_stop", "message_delta", "message_stop"},
	)
	if diff := cmp.Diff(wantNames, names(events)); diff != "" {
		t.Fatalf("event sequence (-want +got):\n%s", diff)
	}
	var streamed string
	for _, ev := range events[2:5] {
		streamed += field(ev.data, "delta.thinking").Str
	}
	if streamed != thinking.Get("thinking").Str || field(events[5].data, "delta.type").Str != "signature_delta" {
		t.Errorf("thinking %q, then %s", streamed, events[5].data)
	}
	if field(events[7].data, "index").Int() != 1 || field(events[7].data, "content_block.type").Str != "text" {
		t.Errorf("text block start %s: want index 1", events[7].data)
	}

	_, b = post(t, ts, "/v1/messages", `{"chat_template_kwargs":{"enable_thinking":false},`+body+`}`)
	if field(string(b), "content.0.type").Str != "text" {
		t.Errorf("enable_thinking false: %s", b)
	}
}

func TestMessagesErrors(t *testing.T) {
	sim, ts := start(t, vllmsim.Profile{MaxModelLen: 1000})
	tests := []struct {
		name       string
		body       string
		wantStatus int
		// openAI: the error comes in the OpenAI shape (vLLM's request
		// validation), else in Anthropic's.
		openAI   bool
		wantType string
		wantMsg  string
	}{
		{"unknown model", `{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`,
			404, false, "NotFoundError", "The model `claude-sonnet-4-5` does not exist."},
		{"no max_tokens", `{"model":"sim/test-model","messages":[{"role":"user","content":"hi"}]}`, 400, true, "Bad Request", ""},
		{"max_tokens 0", `{"model":"sim/test-model","max_tokens":0,"messages":[{"role":"user","content":"hi"}]}`, 400, true, "Bad Request", ""},
		{"no model", `{"max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`, 400, true, "Bad Request", ""},
		{"bad role", `{"model":"sim/test-model","max_tokens":10,"messages":[{"role":"tool","content":"hi"}]}`, 400, true, "Bad Request", ""},
		{"bad block", `{"model":"sim/test-model","max_tokens":10,"messages":[{"role":"user","content":[{"type":"video"}]}]}`, 400, true, "Bad Request", ""},
		{"not JSON", `{"model":`, 400, true, "Bad Request", ""},
		{"context too long", `{"model":"sim/test-model","max_tokens":990,"messages":[{"role":"user","content":"` + strings.Repeat("abcd", 20) + `"}]}`,
			400, false, "BadRequestError", "This model's maximum context length is 1000 tokens. However, you requested 1010 tokens (20 in the messages, 990 in the completion). Please reduce the length of the messages or completion."},
		{"unknown tool named", `{"model":"sim/test-model","max_tokens":10,"messages":[{"role":"user","content":"hi"}],
			"tools":[{"name":"ping","input_schema":{}}],"tool_choice":{"type":"tool","name":"pong"}}`, 400, false, "BadRequestError", "Tool 'pong' has not been passed in `tools`."},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := post(t, ts, "/v1/messages", tc.body)
			if resp.StatusCode != tc.wantStatus {
				t.Errorf("status %d, want %d: %s", resp.StatusCode, tc.wantStatus, b)
			}
			doc := string(b)
			if tc.openAI {
				if field(doc, "error.type").Str != tc.wantType || field(doc, "error.code").Int() != int64(tc.wantStatus) || field(doc, "type").Exists() {
					t.Errorf("body %s: want vLLM's OpenAI-shaped validation error", b)
				}
				return
			}
			if field(doc, "type").Str != "error" || field(doc, "error.type").Str != tc.wantType || field(doc, "error.code").Exists() ||
				(tc.wantMsg != "" && field(doc, "error.message").Str != tc.wantMsg) {
				t.Errorf("body %s: want the Anthropic envelope with type %s", b, tc.wantType)
			}
		})
	}
	_, b := post(t, ts, "/v1/messages", `{"model":"sim/test-model","messages":[]}`)
	if got := field(string(b), "error.param").Str; got != "body.max_tokens" {
		t.Errorf("param %q, want vLLM's body.max_tokens", got)
	}
	if st := sim.Stats(); st.Failed != int64(len(tests)+1) || st.Requests != int64(len(tests)+1) {
		t.Errorf("stats %+v: want every error counted failed", st)
	}
}

func TestMessagesCountTokens(t *testing.T) {
	sim, ts := start(t, vllmsim.Profile{})
	const rest = `"system":"abcdabcd","messages":[{"role":"user","content":"` + "abcdabcdabcdabcd" + `"}],"tools":[` + anthropicWeatherTool + `]`
	_, b := post(t, ts, "/v1/messages", `{"model":"sim/test-model","max_tokens":10,"tool_choice":{"type":"none"},`+rest+`}`)
	want := field(string(b), "usage.input_tokens").Int()
	before := sim.Stats()

	resp, b := post(t, ts, "/v1/messages/count_tokens?beta=true", `{"model":"sim/test-model",`+rest+`}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	if got := field(string(b), "input_tokens").Int(); got != want || field(string(b), "context_management.original_input_tokens").Int() != want {
		t.Errorf("count_tokens %s, want input_tokens %d as the request's usage", b, want)
	}
	if diff := cmp.Diff(before, sim.Stats()); diff != "" {
		t.Errorf("count_tokens counted as inference (-before +after):\n%s", diff)
	}
	resp, b = post(t, ts, "/v1/messages/count_tokens", `{"model":"nope","messages":[]}`)
	if resp.StatusCode != http.StatusNotFound || field(string(b), "type").Str != "error" {
		t.Errorf("unknown model: status %d body %s", resp.StatusCode, b)
	}
}

func TestMessagesFaults(t *testing.T) {
	sim, ts := start(t, vllmsim.Profile{DefaultMaxTokens: 10})
	const ask = `"model":"sim/test-model","max_tokens":100,"messages":[{"role":"user","content":"hi"}]`
	for _, tc := range []struct {
		status   int
		wantType string
	}{{0, "InternalServerError"}, {529, "InternalServerError"}, {429, "RateLimitError"}} {
		sim.SetFaults(vllmsim.Faults{FailPercent: 100, FailStatus: tc.status})
		for _, stream := range []string{"false", "true"} {
			resp, b := post(t, ts, "/v1/messages", `{"stream":`+stream+`,`+ask+`}`)
			want := tc.status
			if want == 0 {
				want = 500
			}
			if resp.StatusCode != want || field(string(b), "type").Str != "error" || field(string(b), "error.type").Str != tc.wantType {
				t.Errorf("fail status %d, stream %s: status %d body %s", tc.status, stream, resp.StatusCode, b)
			}
		}
	}

	sim.SetFaults(vllmsim.Faults{CutAfterChunks: 3})
	resp := send(t, context.Background(), ts, "/v1/messages", `{"stream":true,`+ask+`}`)
	events, err := readEvents(resp.Body)
	resp.Body.Close()
	if len(events) != 3 || err == nil || events[2].name != "content_block_delta" {
		t.Errorf("cut stream: %q, err %v: want message_start, content_block_start, one delta, then a read error", names(events), err)
	}
	resp = send(t, context.Background(), ts, "/v1/messages", `{`+ask+`}`)
	_, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("cut body: read error %v, want unexpected EOF", err)
	}
	eventually(t, settle, "the failures counted", func() bool { return sim.Stats().Failed == 8 })
}

// TestMessagesTiming: the Messages stream keeps the profile's schedule, on
// a fake clock: headers at once, message_start with the first token after
// prefill, one delta per decode step.
func TestMessagesTiming(t *testing.T) {
	clock := newFakeClock()
	_, ts := start(t, vllmsim.Profile{PrefillTPS: 2000, DecodeTPS: 200, SpeedUp: 2, DefaultMaxTokens: 20}, clock.option())
	s := runTimed(t, clock, ts, "/v1/messages",
		`{"model":"sim/test-model","max_tokens":64000,"stream":true,"messages":[{"role":"user","content":"`+strings.Repeat("abcd", 400)+`"}]}`, 0)
	checkSchedule(t, ts, s)
	if s.lines[0] != "event: message_start" || countPrefix(s.lines, "event: content_block_delta") != 20 {
		t.Errorf("events %q: want message_start first and 20 deltas", s.lines)
	}
}

// TestNewAPIsMetrics: Responses and Messages requests advance the same
// vllm:* series as chat, equal to the simulator's own counts.
func TestNewAPIsMetrics(t *testing.T) {
	sim, ts := start(t, vllmsim.Profile{DefaultMaxTokens: 4})
	post(t, ts, "/v1/responses", `{"input":"abcdabcdabcd"}`)
	collectEvents(t, send(t, context.Background(), ts, "/v1/responses", `{"stream":true,"input":"abcd","max_output_tokens":2}`))
	post(t, ts, "/v1/messages", `{"model":"sim/test-model","max_tokens":100,"messages":[{"role":"user","content":"abcdabcd"}]}`)
	collectEvents(t, send(t, context.Background(), ts, "/v1/messages",
		`{"model":"sim/test-model","max_tokens":3,"stream":true,"messages":[{"role":"user","content":"abcd"}]}`))

	_, m := get(t, ts, "/metrics")
	const l = `{model_name="sim/test-model"}`
	st := sim.Stats()
	if st.Completed != 4 || st.PromptTokens != 3+1+2+1 || st.CompletionTokens != 4+2+4+3 {
		t.Errorf("stats %+v", st)
	}
	for series, want := range map[string]float64{
		"vllm:prompt_tokens_total" + l:                                                     float64(st.PromptTokens),
		"vllm:generation_tokens_total" + l:                                                 float64(st.CompletionTokens),
		"vllm:time_to_first_token_seconds_count" + l:                                       4,
		"vllm:e2e_request_latency_seconds_count" + l:                                       4,
		`vllm:request_success_total{finished_reason="stop",model_name="sim/test-model"}`:   2,
		`vllm:request_success_total{finished_reason="length",model_name="sim/test-model"}`: 2,
	} {
		if got := sample(t, m, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
}
