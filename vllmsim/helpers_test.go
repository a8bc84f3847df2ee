package vllmsim_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/switchyard/switchyard/internal/polltest"
	"github.com/switchyard/switchyard/vllmsim"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const testModel = "sim/test-model"

// start serves a simulator for p on a real socket for the test's duration.
func start(t testing.TB, p vllmsim.Profile, opts ...vllmsim.Option) (*vllmsim.Server, *httptest.Server) {
	t.Helper()
	if p.Model == "" {
		p.Model = testModel
	}
	sim := vllmsim.New(p, opts...)
	ts := httptest.NewServer(sim)
	t.Cleanup(ts.Close)
	return sim, ts
}

// post sends body to path and returns the response with its body read.
func post(t testing.TB, ts *httptest.Server, path, body string) (*http.Response, []byte) {
	t.Helper()
	return postCtx(t, context.Background(), ts, path, body)
}

func postCtx(t testing.TB, ctx context.Context, ts *httptest.Server, path, body string) (*http.Response, []byte) {
	t.Helper()
	resp := send(t, ctx, ts, path, body)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("POST %s: reading body: %v", path, err)
	}
	return resp, b
}

// send posts body and returns the response with its body unread.
func send(t testing.TB, ctx context.Context, ts *httptest.Server, path, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	return resp
}

func get(t testing.TB, ts *httptest.Server, path string) (*http.Response, string) {
	t.Helper()
	resp, err := ts.Client().Get(ts.URL + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: reading body: %v", path, err)
	}
	return resp, string(b)
}

// readSSE reads "data:" events up to the end of r. done reports a final
// [DONE]; err is the read error that ended the stream early, if any.
func readSSE(r io.Reader) (events []string, done bool, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			return events, done, fmt.Errorf("line %q is not a data event", line)
		}
		if done {
			return events, done, fmt.Errorf("event %q after [DONE]", data)
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		events = append(events, data)
	}
	return events, done, sc.Err()
}

// settle is how long a test waits for something that follows at once
// (a slot released, a failure counted): the slack a loaded machine may
// take to schedule it, not a speed asked for.
const settle = 10 * time.Second

// eventually polls cond until it holds or a deadline passes
// (polltest.Eventually, the repository's one polling loop).
var eventually = polltest.Eventually

func decode[T any](t testing.TB, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decoding %s: %v", b, err)
	}
	return v
}

// Wire shapes, as a client reads them.

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

type toolCall struct {
	Index    *int   `json:"index"`
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      *string `json:"name"`
		Arguments *string `json:"arguments"`
	} `json:"function"`
}

type topLogprob struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

type chatLogprobs struct {
	Content []struct {
		topLogprob
		TopLogprobs []topLogprob `json:"top_logprobs"`
	} `json:"content"`
}

type chatResponse struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Index   int `json:"index"`
		Message struct {
			Role      string     `json:"role"`
			Content   *string    `json:"content"`
			ToolCalls []toolCall `json:"tool_calls"`
		} `json:"message"`
		Logprobs     *chatLogprobs `json:"logprobs"`
		FinishReason string        `json:"finish_reason"`
	} `json:"choices"`
	Usage usage `json:"usage"`
}

type chatChunk struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Index int `json:"index"`
		Delta struct {
			Role      string     `json:"role"`
			Content   *string    `json:"content"`
			ToolCalls []toolCall `json:"tool_calls"`
		} `json:"delta"`
		Logprobs     *chatLogprobs `json:"logprobs"`
		FinishReason *string       `json:"finish_reason"`
	} `json:"choices"`
	Usage *usage `json:"usage"`
}

type legacyLogprobs struct {
	TextOffset    []int                `json:"text_offset"`
	TokenLogprobs []float64            `json:"token_logprobs"`
	Tokens        []string             `json:"tokens"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
}

type completionResponse struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Index        int             `json:"index"`
		Text         string          `json:"text"`
		Logprobs     *legacyLogprobs `json:"logprobs"`
		FinishReason *string         `json:"finish_reason"`
	} `json:"choices"`
	Usage *usage `json:"usage"`
}

type errorBody struct {
	Error struct {
		Message string          `json:"message"`
		Type    string          `json:"type"`
		Param   json.RawMessage `json:"param"`
		Code    int             `json:"code"`
	} `json:"error"`
}

// streamedChat is a chat stream put back together.
type streamedChat struct {
	events   []chatChunk
	raw      []string
	done     bool
	content  map[int]string
	finish   map[int]string
	toolArgs map[int]string
	usage    *usage
}

func collectChat(t testing.TB, resp *http.Response) streamedChat {
	t.Helper()
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q, want text/event-stream", ct)
	}
	raw, done, err := readSSE(resp.Body)
	if err != nil {
		t.Fatalf("reading stream: %v", err)
	}
	s := streamedChat{raw: raw, done: done, content: map[int]string{}, finish: map[int]string{}, toolArgs: map[int]string{}}
	for _, ev := range raw {
		c := decode[chatChunk](t, []byte(ev))
		s.events = append(s.events, c)
		if c.Usage != nil {
			s.usage = c.Usage
		}
		for _, ch := range c.Choices {
			if ch.Delta.Content != nil {
				s.content[ch.Index] += *ch.Delta.Content
			}
			for _, tc := range ch.Delta.ToolCalls {
				if tc.Function.Arguments != nil {
					s.toolArgs[ch.Index] += *tc.Function.Arguments
				}
			}
			if ch.FinishReason != nil {
				s.finish[ch.Index] = *ch.FinishReason
			}
		}
	}
	return s
}
