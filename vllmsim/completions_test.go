package vllmsim_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/switchyard/switchyard/vllmsim"
)

func TestCompletions(t *testing.T) {
	_, ts := start(t, vllmsim.Profile{DefaultMaxTokens: 6})
	tests := []struct {
		name        string
		body        string
		wantChoices int
		wantPrompt  int
		wantTokens  int // per choice
		wantFinish  string
	}{
		{"string", `{"model":"sim/test-model","prompt":"Once upon a time there was"}`, 1, 6, 6, "stop"},
		{"max_tokens", `{"prompt":"Once upon a time","max_tokens":3}`, 1, 4, 3, "length"},
		{"batch of strings", `{"prompt":["abcdabcd","abcdabcdabcd"],"max_tokens":2}`, 2, 5, 2, "length"},
		{"token ids", `{"prompt":[1,2,3,4,5,6,7],"max_tokens":2}`, 1, 7, 2, "length"},
		{"batch of token ids", `{"prompt":[[1,2,3],[4,5]],"n":2,"max_tokens":2}`, 4, 5, 2, "length"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := post(t, ts, "/v1/completions", tc.body)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			got := decode[completionResponse](t, b)
			if !strings.HasPrefix(got.ID, "cmpl-") || got.Object != "text_completion" || got.Model != testModel {
				t.Errorf("envelope %s", b)
			}
			if len(got.Choices) != tc.wantChoices {
				t.Fatalf("%d choices, want %d", len(got.Choices), tc.wantChoices)
			}
			for i, ch := range got.Choices {
				if ch.Index != i || len(strings.Fields(ch.Text)) != tc.wantTokens || ch.FinishReason == nil || *ch.FinishReason != tc.wantFinish {
					t.Errorf("choice %d: %+v", i, ch)
				}
			}
			if u := got.Usage; u.PromptTokens != tc.wantPrompt || u.CompletionTokens != tc.wantChoices*tc.wantTokens {
				t.Errorf("usage %+v, want %d prompt and %d completion tokens", u, tc.wantPrompt, tc.wantChoices*tc.wantTokens)
			}
		})
	}
}

func TestCompletionsStream(t *testing.T) {
	_, ts := start(t, vllmsim.Profile{})
	const prompt = `"prompt":"The harbor at dawn","max_tokens":5,"logprobs":2`
	_, b := post(t, ts, "/v1/completions", `{`+prompt+`}`)
	whole := decode[completionResponse](t, b)
	want := whole.Choices[0].Text

	lp := whole.Choices[0].Logprobs
	if lp == nil || len(lp.Tokens) != 5 || len(lp.TokenLogprobs) != 5 || len(lp.TopLogprobs) != 5 || len(lp.TextOffset) != 5 {
		t.Fatalf("logprobs %s: want 5 of each", b)
	}
	offset := 0
	for i, tok := range lp.Tokens {
		if lp.TextOffset[i] != offset {
			t.Errorf("text_offset[%d] = %d, want %d", i, lp.TextOffset[i], offset)
		}
		offset += len(tok)
		if len(lp.TopLogprobs[i]) != 2 || lp.TopLogprobs[i][tok] != lp.TokenLogprobs[i] {
			t.Errorf("top_logprobs[%d] %v: want 2 entries including %q at %v", i, lp.TopLogprobs[i], tok, lp.TokenLogprobs[i])
		}
	}
	if strings.Join(lp.Tokens, "") != want {
		t.Errorf("tokens %q do not spell %q", lp.Tokens, want)
	}

	resp := send(t, context.Background(), ts, "/v1/completions", `{"stream":true,"stream_options":{"include_usage":true},`+prompt+`}`)
	defer resp.Body.Close()
	raw, done, err := readSSE(resp.Body)
	if err != nil || !done {
		t.Fatalf("stream: done %v err %v", done, err)
	}
	var text string
	var finish string
	var u *usage
	for _, ev := range raw {
		c := decode[completionResponse](t, []byte(ev))
		if c.Object != "text_completion" {
			t.Errorf("chunk object %q", c.Object)
		}
		if c.Usage != nil {
			u = c.Usage
		}
		for _, ch := range c.Choices {
			text += ch.Text
			if ch.FinishReason != nil {
				finish = *ch.FinishReason
			} else if ch.Logprobs == nil || len(ch.Logprobs.Tokens) != 1 || ch.Logprobs.Tokens[0] != ch.Text {
				t.Errorf("token chunk %s: want its own logprobs", ev)
			}
		}
	}
	if text != want || finish != "length" {
		t.Errorf("streamed %q finish %q, want %q and length", text, finish, want)
	}
	if u == nil || u.CompletionTokens != 5 {
		t.Errorf("usage %+v", u)
	}
}

func TestCompletionsChoice(t *testing.T) {
	_, ts := start(t, vllmsim.Profile{})
	_, b := post(t, ts, "/v1/completions", `{"prompt":"Classify: hello","guided_choice":["positive","negative"],"logprobs":5}`)
	got := decode[completionResponse](t, b)
	ch := got.Choices[0]
	if ch.Text != "positive" || ch.Logprobs == nil || len(ch.Logprobs.TopLogprobs) != 1 {
		t.Fatalf("response %s: want the first label with one logprobs step", b)
	}
	if tops := ch.Logprobs.TopLogprobs[0]; len(tops) != 2 || tops["positive"] <= tops["negative"] {
		t.Errorf("top_logprobs %v: want both labels, the answer likelier", tops)
	}
}

func TestErrors(t *testing.T) {
	_, ts := start(t, vllmsim.Profile{MaxModelLen: 100})
	tests := []struct {
		name       string
		path       string
		body       string
		wantStatus int
		wantType   string
		wantMsg    string // exact, or "" to only check it is not empty
	}{
		{"bad JSON", "/v1/chat/completions", `{"messages":`, 400, "BadRequestError", ""},
		{"not an object", "/v1/chat/completions", `[1,2]`, 400, "BadRequestError", ""},
		{"missing messages", "/v1/chat/completions", `{"model":"sim/test-model"}`, 400, "BadRequestError", ""},
		{"empty messages", "/v1/chat/completions", `{"messages":[]}`, 400, "BadRequestError", ""},
		{"message without role", "/v1/chat/completions", `{"messages":[{"content":"hi"}]}`, 400, "BadRequestError", ""},
		{"wrong model", "/v1/chat/completions", `{"model":"nope","messages":[{"role":"user","content":"hi"}]}`, 404, "NotFoundError", "The model `nope` does not exist."},
		{"wrong model on completions", "/v1/completions", `{"model":"nope","prompt":"hi"}`, 404, "NotFoundError", "The model `nope` does not exist."},
		{"missing prompt", "/v1/completions", `{"model":"sim/test-model"}`, 400, "BadRequestError", ""},
		{"mixed prompt list", "/v1/completions", `{"prompt":["a",1]}`, 400, "BadRequestError", ""},
		{"max_tokens 0", "/v1/chat/completions", `{"max_tokens":0,"messages":[{"role":"user","content":"hi"}]}`, 400, "BadRequestError", ""},
		{"n 0", "/v1/chat/completions", `{"n":0,"messages":[{"role":"user","content":"hi"}]}`, 400, "BadRequestError", ""},
		{"stream not a bool", "/v1/chat/completions", `{"stream":"yes","messages":[{"role":"user","content":"hi"}]}`, 400, "BadRequestError", ""},
		{"empty choice list", "/v1/chat/completions", `{"guided_choice":[],"messages":[{"role":"user","content":"hi"}]}`, 400, "BadRequestError", ""},
		{"unknown named tool", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],` + weatherTools + `,"tool_choice":{"type":"function","function":{"name":"nope"}}}`, 400, "BadRequestError", "Tool 'nope' has not been passed in `tools`."},
		{"context length", "/v1/chat/completions", `{"max_tokens":90,"messages":[{"role":"user","content":"` + strings.Repeat("abcd", 20) + `"}]}`, 400, "BadRequestError",
			"This model's maximum context length is 100 tokens. However, you requested 110 tokens (20 in the messages, 90 in the completion). Please reduce the length of the messages or completion."},
		{"context length on completions", "/v1/completions", `{"max_tokens":100,"prompt":[1]}`, 400, "BadRequestError",
			"This model's maximum context length is 100 tokens. However, you requested 101 tokens (1 in the messages, 100 in the completion). Please reduce the length of the messages or completion."},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := post(t, ts, tc.path, tc.body)
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.wantStatus, b)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			e := decode[errorBody](t, b).Error
			if e.Type != tc.wantType || e.Code != tc.wantStatus || string(e.Param) != "null" || e.Message == "" {
				t.Errorf("error body %s", b)
			}
			if tc.wantMsg != "" && e.Message != tc.wantMsg {
				t.Errorf("message %q\nwant    %q", e.Message, tc.wantMsg)
			}
		})
	}
}

func TestContextFitsWithoutMaxTokens(t *testing.T) {
	// Without max_tokens the default length shrinks to the room left.
	_, ts := start(t, vllmsim.Profile{MaxModelLen: 100, DefaultMaxTokens: 50})
	_, b := post(t, ts, "/v1/completions", `{"prompt":[`+strings.Repeat("1,", 89)+`1]}`)
	got := decode[completionResponse](t, b)
	if got.Usage == nil || got.Usage.CompletionTokens != 10 || *got.Choices[0].FinishReason != "length" {
		t.Errorf("response %s: want 10 tokens and finish length", b)
	}
}

func TestModelsAndHealth(t *testing.T) {
	sim, ts := start(t, vllmsim.Profile{MaxModelLen: 4096})
	resp, body := get(t, ts, "/v1/models")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	type model struct {
		ID          string `json:"id"`
		Object      string `json:"object"`
		OwnedBy     string `json:"owned_by"`
		Root        string `json:"root"`
		MaxModelLen int    `json:"max_model_len"`
	}
	got := decode[struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}](t, []byte(body))
	want := model{ID: testModel, Object: "model", OwnedBy: "vllm", Root: testModel, MaxModelLen: 4096}
	if got.Object != "list" || len(got.Data) != 1 || got.Data[0] != want {
		t.Errorf("models %s", body)
	}

	resp, body = get(t, ts, "/health")
	if resp.StatusCode != http.StatusOK || body != "" {
		t.Errorf("health: %d %q, want 200 and an empty body", resp.StatusCode, body)
	}
	sim.SetFaults(vllmsim.Faults{Unhealthy: true})
	if resp, _ = get(t, ts, "/health"); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("unhealthy: status %d, want 503", resp.StatusCode)
	}
	sim.SetFaults(vllmsim.Faults{})
	if resp, _ = get(t, ts, "/health"); resp.StatusCode != http.StatusOK {
		t.Errorf("healthy again: status %d", resp.StatusCode)
	}
}

func TestRequestHook(t *testing.T) {
	var got []string
	_, ts := start(t, vllmsim.Profile{}, vllmsim.WithRequestHook(func(r *http.Request, body []byte) {
		got = append(got, r.URL.Path+" "+string(body))
	}))
	bodies := []string{
		"{\"messages\":[{\"role\":\"user\",\"content\":\"h\\u00e9\"}] , \"model\" : \"sim/test-model\"}",
		`{"prompt":"x"}`,
		`not json`,
	}
	post(t, ts, "/v1/chat/completions", bodies[0])
	post(t, ts, "/v1/completions", bodies[1])
	post(t, ts, "/v1/completions", bodies[2])
	want := []string{"/v1/chat/completions " + bodies[0], "/v1/completions " + bodies[1], "/v1/completions " + bodies[2]}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("hook saw\n%q\nwant\n%q", got, want)
	}
}

func TestUnchunkedBodyWithoutContentLength(t *testing.T) {
	_, ts := start(t, vllmsim.Profile{})
	req, err := http.NewRequest(http.MethodPost, ts.URL+"/v1/completions", io.NopCloser(strings.NewReader(`{"prompt":"hi"}`)))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("status %d for a chunked request body", resp.StatusCode)
	}
}
