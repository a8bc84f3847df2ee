package vllmsim_test

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/tidwall/gjson"

	"github.com/switchyard/switchyard/vllmsim"
)

func TestChatPlain(t *testing.T) {
	_, ts := start(t, vllmsim.Profile{DefaultMaxTokens: 12})
	tests := []struct {
		name       string
		body       string
		wantTokens int
		wantFinish string
	}{
		{"default length", `{"model":"sim/test-model","messages":[{"role":"user","content":"Hello there, how are you?"}]}`, 12, "stop"},
		{"max_tokens", `{"model":"sim/test-model","max_tokens":5,"messages":[{"role":"user","content":"Hi"}]}`, 5, "length"},
		{"max_completion_tokens wins", `{"model":"sim/test-model","max_tokens":9,"max_completion_tokens":3,"messages":[{"role":"user","content":"Hi"}]}`, 3, "length"},
		{"model omitted", `{"messages":[{"role":"user","content":"Hi"}]}`, 12, "stop"},
		{"content parts", `{"messages":[{"role":"user","content":[{"type":"text","text":"Hello"},{"type":"text","text":" world"}]}]}`, 12, "stop"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := post(t, ts, "/v1/chat/completions", tc.body)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			got := decode[chatResponse](t, b)
			if !strings.HasPrefix(got.ID, "chatcmpl-") || got.Object != "chat.completion" || got.Model != testModel || got.Created == 0 {
				t.Errorf("envelope: id %q object %q model %q created %d", got.ID, got.Object, got.Model, got.Created)
			}
			if len(got.Choices) != 1 {
				t.Fatalf("%d choices, want 1", len(got.Choices))
			}
			ch := got.Choices[0]
			if ch.Message.Role != "assistant" || ch.Message.Content == nil || *ch.Message.Content == "" {
				t.Errorf("message %+v: want assistant text", ch.Message)
			}
			if words := len(strings.Fields(*ch.Message.Content)); words != tc.wantTokens {
				t.Errorf("content %q has %d words, want %d (one token per word)", *ch.Message.Content, words, tc.wantTokens)
			}
			if ch.FinishReason != tc.wantFinish {
				t.Errorf("finish_reason %q, want %q", ch.FinishReason, tc.wantFinish)
			}
			if ch.Logprobs != nil {
				t.Errorf("logprobs %+v, want null", ch.Logprobs)
			}
			u := got.Usage
			if u.CompletionTokens != tc.wantTokens || u.PromptTokens < 1 || u.TotalTokens != u.PromptTokens+u.CompletionTokens {
				t.Errorf("usage %+v", u)
			}
		})
	}
}

func TestChatPromptTokenEstimate(t *testing.T) {
	_, ts := start(t, vllmsim.Profile{})
	user := strings.Repeat("abcd", 100) // 400 bytes: 100 tokens
	_, b := post(t, ts, "/v1/chat/completions", `{"messages":[{"role":"system","content":"abcdabcd"},{"role":"user","content":"`+user+`"}]}`)
	if got := decode[chatResponse](t, b).Usage.PromptTokens; got != 102 {
		t.Errorf("prompt_tokens %d, want 102 (408 bytes / 4)", got)
	}
	_, b = post(t, ts, "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`)
	if got := decode[chatResponse](t, b).Usage.PromptTokens; got != 1 {
		t.Errorf("prompt_tokens %d for a tiny prompt, want 1", got)
	}
}

func TestChatStream(t *testing.T) {
	_, ts := start(t, vllmsim.Profile{DefaultMaxTokens: 7})
	const messages = `"messages":[{"role":"user","content":"Tell me about the harbor"}]`
	_, b := post(t, ts, "/v1/chat/completions", `{`+messages+`}`)
	want := *decode[chatResponse](t, b).Choices[0].Message.Content

	for _, includeUsage := range []bool{false, true} {
		name := "without usage"
		body := `{"stream":true,` + messages + `}`
		if includeUsage {
			name = "include_usage"
			body = `{"stream":true,"stream_options":{"include_usage":true},` + messages + `}`
		}
		t.Run(name, func(t *testing.T) {
			s := collectChat(t, send(t, context.Background(), ts, "/v1/chat/completions", body))
			if !s.done {
				t.Fatal("stream did not end with [DONE]")
			}
			// role event, 7 tokens, finish event, and the usage event when asked.
			wantEvents := 9
			if includeUsage {
				wantEvents++
			}
			if len(s.events) != wantEvents {
				t.Fatalf("%d events, want %d:\n%s", len(s.events), wantEvents, strings.Join(s.raw, "\n"))
			}
			first := s.events[0].Choices[0]
			if first.Delta.Role != "assistant" || first.Delta.Content == nil || *first.Delta.Content != "" || first.FinishReason != nil {
				t.Errorf("first event %s: want the assistant role with empty content", s.raw[0])
			}
			if s.content[0] != want {
				t.Errorf("streamed content %q, want the non-stream content %q", s.content[0], want)
			}
			if s.finish[0] != "stop" {
				t.Errorf("finish_reason %q, want stop", s.finish[0])
			}
			id := s.events[0].ID
			for i, ev := range s.events {
				if ev.ID != id || ev.Object != "chat.completion.chunk" || ev.Model != testModel {
					t.Errorf("event %d envelope: %s", i, s.raw[i])
				}
			}
			if !includeUsage {
				if s.usage != nil || strings.Contains(strings.Join(s.raw, ""), `"usage"`) {
					t.Error("usage sent without stream_options.include_usage")
				}
				return
			}
			last := s.events[len(s.events)-1]
			if len(last.Choices) != 0 || last.Usage == nil || last.Usage.CompletionTokens != 7 || last.Usage.TotalTokens != last.Usage.PromptTokens+7 {
				t.Errorf("usage event %s: want empty choices and 7 completion tokens", s.raw[len(s.raw)-1])
			}
			for i, raw := range s.raw[:len(s.raw)-1] {
				if !strings.Contains(raw, `"usage":null`) {
					t.Errorf("event %d lacks \"usage\":null: %s", i, raw)
				}
			}
		})
	}
}

func TestChatN(t *testing.T) {
	_, ts := start(t, vllmsim.Profile{DefaultMaxTokens: 4})
	_, b := post(t, ts, "/v1/chat/completions", `{"n":2,"messages":[{"role":"user","content":"hi"}]}`)
	got := decode[chatResponse](t, b)
	if len(got.Choices) != 2 || got.Choices[0].Index != 0 || got.Choices[1].Index != 1 {
		t.Fatalf("choices %+v: want indexes 0 and 1", got.Choices)
	}
	if got.Usage.CompletionTokens != 8 {
		t.Errorf("completion_tokens %d, want 8 (2 choices × 4)", got.Usage.CompletionTokens)
	}

	s := collectChat(t, send(t, context.Background(), ts, "/v1/chat/completions", `{"n":2,"stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	for i := range 2 {
		if want := *got.Choices[i].Message.Content; s.content[i] != want {
			t.Errorf("choice %d streamed %q, want %q", i, s.content[i], want)
		}
		if s.finish[i] != "stop" {
			t.Errorf("choice %d finish %q", i, s.finish[i])
		}
	}
}

func TestChatLogprobs(t *testing.T) {
	_, ts := start(t, vllmsim.Profile{})
	const body = `"logprobs":true,"top_logprobs":3,"max_tokens":5,"messages":[{"role":"user","content":"hi"}]`
	_, b := post(t, ts, "/v1/chat/completions", `{`+body+`}`)
	got := decode[chatResponse](t, b)
	lp := got.Choices[0].Logprobs
	if lp == nil || len(lp.Content) != 5 {
		t.Fatalf("logprobs %s: want 5 entries", b)
	}
	var text string
	for i, e := range lp.Content {
		text += e.Token
		if e.Logprob >= 0 || len(e.TopLogprobs) != 3 {
			t.Errorf("entry %d: %+v: want a negative logprob and 3 top_logprobs", i, e)
		}
		if string(bytesOf(e.Bytes)) != e.Token {
			t.Errorf("entry %d: bytes %v do not spell %q", i, e.Bytes, e.Token)
		}
		if e.TopLogprobs[0].Token != e.Token || e.TopLogprobs[0].Logprob != e.Logprob {
			t.Errorf("entry %d: top_logprobs[0] %+v is not the token", i, e.TopLogprobs[0])
		}
		for j := 1; j < len(e.TopLogprobs); j++ {
			if e.TopLogprobs[j].Logprob >= e.TopLogprobs[j-1].Logprob {
				t.Errorf("entry %d: top_logprobs not in decreasing order: %+v", i, e.TopLogprobs)
			}
		}
	}
	if text != *got.Choices[0].Message.Content {
		t.Errorf("tokens spell %q, content is %q", text, *got.Choices[0].Message.Content)
	}

	s := collectChat(t, send(t, context.Background(), ts, "/v1/chat/completions", `{"stream":true,`+body+`}`))
	var streamed []string
	for _, ev := range s.events {
		for _, ch := range ev.Choices {
			if ch.Delta.Content != nil && *ch.Delta.Content != "" {
				if ch.Logprobs == nil || len(ch.Logprobs.Content) != 1 || ch.Logprobs.Content[0].Token != *ch.Delta.Content {
					t.Errorf("token chunk without its logprobs: %+v", ch)
					continue
				}
				streamed = append(streamed, ch.Logprobs.Content[0].Token)
			}
		}
	}
	if strings.Join(streamed, "") != text {
		t.Errorf("streamed logprob tokens %q, want %q", streamed, text)
	}
}

func bytesOf(ints []int) []byte {
	b := make([]byte, len(ints))
	for i, v := range ints {
		b[i] = byte(v)
	}
	return b
}

const weatherTools = `"tools":[
	{"type":"function","function":{"name":"search_docs","parameters":{"type":"object","properties":{"query":{"type":"string"}},"required":["query"]}}},
	{"type":"function","function":{"name":"get_weather","description":"Weather now","parameters":{"type":"object",
		"properties":{
			"city":{"type":"string"},
			"unit":{"type":"string","enum":["celsius","fahrenheit"]},
			"days":{"type":"integer","minimum":1},
			"lat":{"type":"number"},
			"hourly":{"type":"boolean"},
			"fields":{"type":"array","items":{"type":"string"}},
			"options":{"type":"object","properties":{"lang":{"type":"string"}}},
			"note":{"type":["string","null"]},
			"unused":{"type":"string"}
		},
		"required":["city","unit","days","lat","hourly","fields","options","note"]}}}
]`

func TestToolCalls(t *testing.T) {
	_, ts := start(t, vllmsim.Profile{})
	named := `{"messages":[{"role":"user","content":"Weather in Paris?"}],` + weatherTools +
		`,"tool_choice":{"type":"function","function":{"name":"get_weather"}}`
	wantArgs := map[string]any{
		"city": "Paris", "unit": "celsius", "days": 1.0, "lat": 1.5, "hourly": true,
		"fields": []any{"example"}, "options": map[string]any{"lang": "en"}, "note": "example",
	}

	t.Run("non-stream", func(t *testing.T) {
		_, b := post(t, ts, "/v1/chat/completions", named+`}`)
		got := decode[chatResponse](t, b)
		ch := got.Choices[0]
		if ch.FinishReason != "tool_calls" || ch.Message.Content != nil || len(ch.Message.ToolCalls) != 1 {
			t.Fatalf("response %s: want one tool call, null content, finish tool_calls", b)
		}
		tc := ch.Message.ToolCalls[0]
		if !strings.HasPrefix(tc.ID, "chatcmpl-tool-") || tc.Type != "function" || *tc.Function.Name != "get_weather" {
			t.Errorf("tool call %+v", tc)
		}
		var args map[string]any
		if err := json.Unmarshal([]byte(*tc.Function.Arguments), &args); err != nil {
			t.Fatalf("arguments %q: %v", *tc.Function.Arguments, err)
		}
		if diff := cmp.Diff(wantArgs, args); diff != "" {
			t.Errorf("arguments (-want +got):\n%s", diff)
		}
		if got.Usage.CompletionTokens < 2 {
			t.Errorf("completion_tokens %d", got.Usage.CompletionTokens)
		}
	})

	t.Run("stream", func(t *testing.T) {
		s := collectChat(t, send(t, context.Background(), ts, "/v1/chat/completions", named+`,"stream":true,"stream_options":{"include_usage":true}}`))
		if !s.done || s.finish[0] != "tool_calls" {
			t.Fatalf("done %v finish %q", s.done, s.finish[0])
		}
		var deltas []toolCall
		for _, ev := range s.events {
			for _, ch := range ev.Choices {
				deltas = append(deltas, ch.Delta.ToolCalls...)
			}
		}
		if len(deltas) < 3 {
			t.Fatalf("%d tool-call deltas, want the header and several argument fragments", len(deltas))
		}
		head := deltas[0]
		if head.Index == nil || *head.Index != 0 || !strings.HasPrefix(head.ID, "chatcmpl-tool-") || head.Type != "function" ||
			head.Function.Name == nil || *head.Function.Name != "get_weather" || head.Function.Arguments == nil || *head.Function.Arguments != "" {
			t.Errorf("first delta %+v: want index, id, type, name and empty arguments", head)
		}
		for i, d := range deltas[1:] {
			if d.Index == nil || *d.Index != 0 || d.ID != "" || d.Type != "" || d.Function.Name != nil || d.Function.Arguments == nil {
				t.Errorf("delta %d %+v: want only index and arguments", i+1, d)
			}
		}
		var args map[string]any
		if err := json.Unmarshal([]byte(s.toolArgs[0]), &args); err != nil {
			t.Fatalf("accumulated arguments %q: %v", s.toolArgs[0], err)
		}
		if diff := cmp.Diff(wantArgs, args); diff != "" {
			t.Errorf("arguments (-want +got):\n%s", diff)
		}
		if s.usage == nil || s.usage.CompletionTokens != len(deltas) {
			t.Errorf("usage %+v, want one completion token per delta (%d)", s.usage, len(deltas))
		}
	})

	tests := []struct {
		name      string
		body      string
		wantTools string // the calls' names, comma-separated; "" = text answer
	}{
		// Which tools an unforced turn calls is decided from the prompt's
		// size and the turn (TestAgentTurns); this prompt gets both, in
		// parallel.
		{"parallel calls by default", `{"messages":[{"role":"user","content":"hi"}],` + weatherTools + `}`, "search_docs,get_weather"},
		{"parallel_tool_calls false", `{"messages":[{"role":"user","content":"hi"}],` + weatherTools + `,"parallel_tool_calls":false}`, "search_docs"},
		{"required", `{"messages":[{"role":"user","content":"hi"}],` + weatherTools + `,"tool_choice":"required"}`, "search_docs,get_weather"},
		{"none", `{"messages":[{"role":"user","content":"hi"}],` + weatherTools + `,"tool_choice":"none"}`, ""},
		{"tool result answers with text", `{"messages":[{"role":"user","content":"Weather?"},
			{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},
			{"role":"tool","tool_call_id":"c1","content":"sunny, 21C"}],` + weatherTools + `}`, ""},
		{"no parameters", `{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"ping"}}]}`, "ping"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := post(t, ts, "/v1/chat/completions", tc.body)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			ch := decode[chatResponse](t, b).Choices[0]
			if tc.wantTools == "" {
				if ch.FinishReason != "stop" || ch.Message.Content == nil || *ch.Message.Content == "" || len(ch.Message.ToolCalls) != 0 {
					t.Errorf("response %s: want a text answer", b)
				}
				return
			}
			var names []string
			for _, call := range ch.Message.ToolCalls {
				names = append(names, *call.Function.Name)
				if args := *call.Function.Arguments; !json.Valid([]byte(args)) {
					t.Errorf("arguments %q are not valid JSON", args)
				}
			}
			if got := strings.Join(names, ","); got != tc.wantTools {
				t.Fatalf("response %s: calls %s, want %s", b, got, tc.wantTools)
			}
		})
	}
}

func TestConstrainedChoice(t *testing.T) {
	labels := []string{"simple", "medium", "complex"}
	fixed := func(req vllmsim.ChoiceRequest) (string, map[string]float64) {
		return "medium", map[string]float64{"medium": 0.7, "complex": 0.2, "simple": 0.1}
	}
	tests := []struct {
		name      string
		opts      []vllmsim.Option
		field     string
		user      string
		top       int
		wantLabel string
		wantTop   []string
		stream    bool
	}{
		{"structured_outputs default easy", nil, `"structured_outputs":{"choice":["simple","medium","complex"]}`, "What is the capital of France?", 5, "simple", []string{"simple", "medium", "complex"}, false},
		{"guided_choice default hard", nil, `"guided_choice":["simple","medium","complex"]`, "Prove that there are infinitely many primes.", 2, "complex", []string{"complex", "simple"}, false},
		{"chooser", []vllmsim.Option{vllmsim.WithChooser(fixed)}, `"guided_choice":["simple","medium","complex"]`, "anything", 20, "medium", []string{"medium", "complex", "simple"}, false},
		{"chooser stream", []vllmsim.Option{vllmsim.WithChooser(fixed)}, `"structured_outputs":{"choice":["simple","medium","complex"]}`, "anything", 3, "medium", []string{"medium", "complex", "simple"}, true},
		{"zero probability omitted", []vllmsim.Option{vllmsim.WithChooser(func(vllmsim.ChoiceRequest) (string, map[string]float64) {
			return "complex", map[string]float64{"complex": 1}
		})}, `"guided_choice":["simple","medium","complex"]`, "x", 5, "complex", []string{"complex"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ts := start(t, vllmsim.Profile{}, tc.opts...)
			body := `{"messages":[{"role":"user","content":` + jsonString(tc.user) + `}],"logprobs":true,"top_logprobs":` +
				jsonInt(tc.top) + `,` + tc.field + `,"stream":` + jsonBool(tc.stream) + `}`
			var (
				content string
				entries *chatLogprobs
			)
			if tc.stream {
				s := collectChat(t, send(t, context.Background(), ts, "/v1/chat/completions", body))
				content = s.content[0]
				for _, ev := range s.events {
					if len(ev.Choices) > 0 && ev.Choices[0].Logprobs != nil {
						entries = ev.Choices[0].Logprobs
					}
				}
				if s.finish[0] != "stop" {
					t.Errorf("finish %q", s.finish[0])
				}
			} else {
				resp, b := post(t, ts, "/v1/chat/completions", body)
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("status %d: %s", resp.StatusCode, b)
				}
				got := decode[chatResponse](t, b)
				content, entries = *got.Choices[0].Message.Content, got.Choices[0].Logprobs
				if got.Choices[0].FinishReason != "stop" || got.Usage.CompletionTokens != 1 {
					t.Errorf("finish %q, completion_tokens %d: want stop and 1", got.Choices[0].FinishReason, got.Usage.CompletionTokens)
				}
			}
			if content != tc.wantLabel {
				t.Errorf("content %q, want %q", content, tc.wantLabel)
			}
			if entries == nil || len(entries.Content) != 1 {
				t.Fatalf("logprobs %+v: want one entry", entries)
			}
			e := entries.Content[0]
			if e.Token != tc.wantLabel {
				t.Errorf("logprobs token %q, want %q", e.Token, tc.wantLabel)
			}
			var tops []string
			var sum float64
			for _, tl := range e.TopLogprobs {
				tops = append(tops, tl.Token)
				sum += math.Exp(tl.Logprob)
				if !slices.Contains(labels, tl.Token) {
					t.Errorf("top_logprobs token %q is not a label", tl.Token)
				}
			}
			if diff := cmp.Diff(tc.wantTop, tops); diff != "" {
				t.Errorf("top_logprobs tokens (-want +got):\n%s", diff)
			}
			if len(tops) == len(labels) && math.Abs(sum-1) > 1e-9 {
				t.Errorf("label probabilities sum to %v, want 1", sum)
			}
		})
	}
}

func TestChooserAnswerOutsideChoices(t *testing.T) {
	_, ts := start(t, vllmsim.Profile{}, vllmsim.WithChooser(func(vllmsim.ChoiceRequest) (string, map[string]float64) {
		return "other", nil
	}))
	resp, b := post(t, ts, "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"guided_choice":["a","b"]}`)
	if resp.StatusCode != http.StatusInternalServerError || !strings.Contains(decode[errorBody](t, b).Error.Message, `"other"`) {
		t.Errorf("status %d body %s: want 500 naming the bad label", resp.StatusCode, b)
	}
}

func TestDefaultChooser(t *testing.T) {
	labels := []string{"easy", "hard"}
	tests := []struct {
		name string
		req  vllmsim.ChoiceRequest
		want string
	}{
		{"short question", vllmsim.ChoiceRequest{Messages: []vllmsim.Message{{Role: "user", Content: "What time is it in Tokyo?"}}}, "easy"},
		// Length and tool count are not evidence (issue 39).
		{"long prompt", vllmsim.ChoiceRequest{Messages: []vllmsim.Message{{Role: "user", Content: strings.Repeat("word ", 400)}}}, "easy"},
		{"long system prompt is not user text", vllmsim.ChoiceRequest{Messages: []vllmsim.Message{{Role: "system", Content: strings.Repeat("word ", 400)}, {Role: "user", Content: "hi"}}}, "easy"},
		{"many tools", vllmsim.ChoiceRequest{Messages: []vllmsim.Message{{Role: "user", Content: "book it"}}, ToolsCount: 25}, "easy"},
		{"boilerplate is not the user's words", vllmsim.ChoiceRequest{Messages: []vllmsim.Message{{Role: "user", Content: "<system-reminder>skills: debug, design, analyze</system-reminder>\nrename foo to bar"}}}, "easy"},
		{"summary: a failed tool result", vllmsim.ChoiceRequest{Messages: []vllmsim.Message{{Role: "user", Content: "Turns: 4\nLast message: a tool result, 1 assistant steps after the user's last message\nTools: none\nCurrent instruction:\nrun the tests\nLatest tool result (excerpt):\n--- FAIL: TestParse\nexit status 1\n"}}}, "hard"},
		{"summary: a routine tool result", vllmsim.ChoiceRequest{Messages: []vllmsim.Message{{Role: "user", Content: "Turns: 4\nLast message: a tool result, 1 assistant steps after the user's last message\nTools: none\nCurrent instruction:\ndebug the parser\nLatest tool result (excerpt):\nalpha\nbeta\n"}}}, "easy"},
		{"summary: a hard instruction, routine context", vllmsim.ChoiceRequest{Messages: []vllmsim.Message{{Role: "user", Content: "Turns: 9\nLast message: a new instruction from the user\nTools: none\nCurrent instruction:\nwhy does it drop the last field?\nTask opening (context):\ncreate notes\nSystem prompt (start):\nYou are an agent.\n"}}}, "hard"},
		{"summary: markers only in the context", vllmsim.ChoiceRequest{Messages: []vllmsim.Message{{Role: "user", Content: "Turns: 9\nLast message: a new instruction from the user\nTools: none\nCurrent instruction:\nthanks, commit it\nTask opening (context):\ndebug the parser\nSystem prompt (start):\nAnalyze and design carefully.\n"}}}, "easy"},
		{"step by step", vllmsim.ChoiceRequest{Messages: []vllmsim.Message{{Role: "user", Content: "Explain Step by Step how TLS works"}}}, "hard"},
		{"debugging", vllmsim.ChoiceRequest{Messages: []vllmsim.Message{{Role: "user", Content: "help debugging this panic"}}}, "hard"},
		{"why", vllmsim.ChoiceRequest{Messages: []vllmsim.Message{{Role: "user", Content: "Why is the sky blue?"}}}, "hard"},
		{"improve is not prove", vllmsim.ChoiceRequest{Messages: []vllmsim.Message{{Role: "user", Content: "improve my email"}}}, "easy"},
		{"completion prompt", vllmsim.ChoiceRequest{Prompt: "Analyze this contract"}, "hard"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.req.Choices = labels
			label, probs := vllmsim.DefaultChooser(tc.req)
			if label != tc.want {
				t.Errorf("label %q, want %q", label, tc.want)
			}
			if p := probs[label]; p < 0.8 || p > 0.95 {
				t.Errorf("probability of %q is %v, want within 0.8..0.95", label, p)
			}
			var sum float64
			for _, p := range probs {
				sum += p
			}
			if math.Abs(sum-1) > 1e-9 {
				t.Errorf("probabilities %v sum to %v", probs, sum)
			}
		})
	}
	if label, probs := vllmsim.DefaultChooser(vllmsim.ChoiceRequest{Choices: []string{"only"}}); label != "only" || probs["only"] != 1 {
		t.Errorf("single label: %q %v", label, probs)
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func jsonInt(n int) string { b, _ := json.Marshal(n); return string(b) }

func jsonBool(v bool) string { b, _ := json.Marshal(v); return string(b) }

func TestGeneratedTextIsValidUTF8(t *testing.T) {
	_, ts := start(t, vllmsim.Profile{})
	_, b := post(t, ts, "/v1/chat/completions", `{"max_tokens":200,"messages":[{"role":"user","content":"hi"}]}`)
	c := *decode[chatResponse](t, b).Choices[0].Message.Content
	if !utf8.ValidString(c) || strings.Contains(c, "  ") || strings.HasPrefix(c, " ") {
		t.Errorf("content %q: want clean text", c)
	}
}

// TestContinueFinalMessage: with continue_final_message and a final
// assistant message holding the start of an answer this simulator wrote,
// the answer continues where that text stops, so prefix and continuation
// read as the one uncut answer, of its length.
func TestContinueFinalMessage(t *testing.T) {
	_, ts := start(t, vllmsim.Profile{DefaultMaxTokens: 12})
	user := `{"role":"user","content":"Describe the harbor."}`
	_, b := post(t, ts, "/v1/chat/completions", `{"messages":[`+user+`]}`)
	whole := gjson.GetBytes(b, "choices.0.message.content").String()
	words := strings.SplitAfter(whole, " ")
	prefix := strings.Join(words[:4], "")
	prefix = strings.TrimSuffix(prefix, " ") // the prefix ends on a word; the next token brings its space
	body := `{"continue_final_message":true,"add_generation_prompt":false,"messages":[` + user + `,{"role":"assistant","content":` + strconv.Quote(prefix) + `}]}`
	_, b = post(t, ts, "/v1/chat/completions", body)
	cont := gjson.GetBytes(b, "choices.0.message.content").String()
	if prefix+cont != whole {
		t.Errorf("prefix %q + continuation %q\n!= uncut answer %q", prefix, cont, whole)
	}
	if n := gjson.GetBytes(b, "usage.completion_tokens").Int(); n != 8 {
		t.Errorf("continuation of %d tokens, want the 8 left of 12", n)
	}
	// A prefix the simulator did not write is continued with fresh text.
	_, b = post(t, ts, "/v1/chat/completions", `{"continue_final_message":true,"messages":[`+user+`,{"role":"assistant","content":"Something else"}]}`)
	if gjson.GetBytes(b, "choices.0.message.content").String() == "" {
		t.Errorf("no continuation: %s", b)
	}
}

// TestReasoning: with Profile.ReasoningTokens a chat answer begins with that
// many reasoning tokens, in the message's "reasoning" field or the stream
// deltas' "reasoning", counted as completion tokens; enable_thinking false
// turns them off.
func TestReasoning(t *testing.T) {
	_, ts := start(t, vllmsim.Profile{DefaultMaxTokens: 12, ReasoningTokens: 5})
	user := `{"role":"user","content":"Describe the harbor."}`
	_, b := post(t, ts, "/v1/chat/completions", `{"messages":[`+user+`]}`)
	reasoning := gjson.GetBytes(b, "choices.0.message.reasoning").String()
	content := gjson.GetBytes(b, "choices.0.message.content").String()
	if n := len(strings.Fields(reasoning)); n != 5 {
		t.Errorf("reasoning %q: %d words, want 5", reasoning, n)
	}
	if n := len(strings.Fields(content)); n != 7 || strings.HasPrefix(content, " ") {
		t.Errorf("content %q: want 7 words without a leading space", content)
	}
	if n := gjson.GetBytes(b, "usage.completion_tokens").Int(); n != 12 {
		t.Errorf("completion_tokens %d, want 12 (reasoning included)", n)
	}

	resp := send(t, context.Background(), ts, "/v1/chat/completions", `{"stream":true,"messages":[`+user+`]}`)
	s := collectChat(t, resp)
	var streamed string
	var order []string
	for _, ev := range s.raw {
		if r := gjson.Get(ev, "choices.0.delta.reasoning"); r.Exists() {
			streamed += r.Str
			order = append(order, "r")
		}
		if c := gjson.Get(ev, "choices.0.delta.content"); c.Str != "" {
			order = append(order, "c")
		}
	}
	if streamed != reasoning || s.content[0] != content {
		t.Errorf("stream: reasoning %q content %q, want %q and %q", streamed, s.content[0], reasoning, content)
	}
	if got := strings.Join(order, ""); got != "rrrrrccccccc" {
		t.Errorf("delta order %s: want the reasoning first", got)
	}

	_, b = post(t, ts, "/v1/chat/completions", `{"chat_template_kwargs":{"enable_thinking":false},"messages":[`+user+`]}`)
	if r := gjson.GetBytes(b, "choices.0.message.reasoning"); r.Exists() {
		t.Errorf("enable_thinking false: reasoning %s, want none", r.Raw)
	}
}

// TestContinueReasoning: a final assistant message holding "<think>" and
// part of the reasoning continues the reasoning, then the content; one
// whose reasoning is closed continues the content. Either way the parts
// add up to the uncut answer.
func TestContinueReasoning(t *testing.T) {
	_, ts := start(t, vllmsim.Profile{DefaultMaxTokens: 12, ReasoningTokens: 5})
	user := `{"role":"user","content":"Describe the harbor."}`
	_, b := post(t, ts, "/v1/chat/completions", `{"messages":[`+user+`]}`)
	reasoning := gjson.GetBytes(b, "choices.0.message.reasoning").String()
	content := gjson.GetBytes(b, "choices.0.message.content").String()
	cut := func(s string, words int) string {
		return strings.TrimSuffix(strings.Join(strings.SplitAfter(s, " ")[:words], ""), " ")
	}
	for _, tc := range []struct {
		name, prefix            string
		wantReasoning, wantText string
		wantTokens              int64
	}{
		{"mid-reasoning", "<think>\n" + cut(reasoning, 2), reasoning[len(cut(reasoning, 2)):], content, 10},
		{"mid-content", "<think>\n" + reasoning + "\n</think>\n\n" + cut(content, 3), "", content[len(cut(content, 3)):], 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := `{"continue_final_message":true,"add_generation_prompt":false,"messages":[` + user + `,{"role":"assistant","content":` + strconv.Quote(tc.prefix) + `}]}`
			_, b := post(t, ts, "/v1/chat/completions", body)
			if got := gjson.GetBytes(b, "choices.0.message.reasoning").String(); got != tc.wantReasoning {
				t.Errorf("reasoning %q, want %q", got, tc.wantReasoning)
			}
			if got := gjson.GetBytes(b, "choices.0.message.content").String(); got != tc.wantText {
				t.Errorf("content %q, want %q", got, tc.wantText)
			}
			if n := gjson.GetBytes(b, "usage.completion_tokens").Int(); n != tc.wantTokens {
				t.Errorf("completion_tokens %d, want %d", n, tc.wantTokens)
			}
		})
	}
}

// TestTokenize: /tokenize counts a chat request's prompt (messages and
// tools) and a completion's as the inference endpoints do, whatever its
// length, in vLLM's shape.
func TestTokenize(t *testing.T) {
	_, ts := start(t, vllmsim.Profile{Model: "m", MaxModelLen: 100})
	long := strings.Repeat("word ", 200) // 1,000 bytes: 250 tokens, over the context
	for _, tc := range []struct {
		name, body string
		status     int
		count      int64
	}{
		{"chat", `{"model":"m","messages":[{"role":"user","content":"` + long + `"}]}`, 200, 250},
		{"chat with tools", `{"model":"m","messages":[{"role":"user","content":"abcd"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}]}`, 200, 0},
		{"prompt", `{"model":"m","prompt":"abcdefgh"}`, 200, 2},
		{"other model", `{"model":"x","prompt":"a"}`, 404, 0},
		{"neither", `{"model":"m"}`, 400, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := post(t, ts, "/tokenize", tc.body)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			if tc.status != 200 {
				return
			}
			root := gjson.ParseBytes(b)
			if tc.count > 0 && root.Get("count").Int() != tc.count {
				t.Errorf("count %d, want %d: %.200s", root.Get("count").Int(), tc.count, b)
			}
			if int64(len(root.Get("tokens").Array())) != root.Get("count").Int() || root.Get("max_model_len").Int() != 100 || !root.Get("token_strs").Exists() {
				t.Errorf("not vLLM's shape: %.200s", b)
			}
		})
	}
}
