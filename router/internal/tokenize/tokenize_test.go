package tokenize

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/switchyard/switchyard/router/internal/translate"
	"github.com/switchyard/switchyard/router/internal/upstream"
	"github.com/switchyard/switchyard/router/internal/wire"
)

// TestDecide: out of the band (the estimate and a minimal answer within
// 0.75 and 1.5 of the context) the estimate decides and nothing is
// counted; in it the count does, and a failed count leaves the estimate
// to decide, named a failure unless the client left. A pool without
// max_model_len, or an endpoint that generates nothing, always fits.
func TestDecide(t *testing.T) {
	failed := errors.New("404 Not Found")
	left, leave := context.WithCancel(context.Background())
	leave()
	// With max_model_len 8192 and the minimal answer of 1024 tokens, the
	// band is estimates of 5120 to 11264.
	for _, c := range []struct {
		name   string
		ctx    context.Context
		ep     wire.Endpoint
		info   *wire.Info
		limit  int
		count  int
		err    error
		fits   bool
		result string
		asked  bool
	}{
		{"no max_model_len", nil, wire.Chat, &wire.Info{PromptTokens: 1 << 20}, 0, 0, nil, true, "", false},
		{"embeddings", nil, wire.Embeddings, &wire.Info{PromptTokens: 1 << 20}, 8192, 0, nil, true, "", false},
		{"no request read", nil, wire.Chat, nil, 8192, 0, nil, true, "", false},
		{"clearly under", nil, wire.Chat, &wire.Info{PromptTokens: 100}, 8192, 0, nil, true, "", false},
		{"clearly over", nil, wire.Chat, &wire.Info{PromptTokens: 15000}, 8192, 0, nil, false, "", false},
		// JSON-escaped text: an estimate over the context, 2,500 real tokens.
		{"escaped text fits", nil, wire.Chat, &wire.Info{PromptTokens: 7500}, 8192, 2500, nil, true, Fits, true},
		{"too long", nil, wire.Messages, &wire.Info{PromptTokens: 7500}, 8192, 7500, nil, false, TooLong, true},
		{"at the limit", nil, wire.Chat, &wire.Info{PromptTokens: 7500}, 8192, 8192 - wire.MinFitAnswer, nil, true, Fits, true},
		{"count fails: the estimate decides", nil, wire.Chat, &wire.Info{PromptTokens: 7500}, 8192, 0, failed, false, Failed, true},
		{"count fails under the limit", nil, wire.Chat, &wire.Info{PromptTokens: 6000}, 8192, 0, failed, true, Failed, true},
		{"the client left", left, wire.Chat, &wire.Info{PromptTokens: 7500}, 8192, 0, context.Canceled, false, "", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := c.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			asked := false
			fits, result, err := Decide(ctx, c.ep, c.info, c.limit, func() (int, error) { asked = true; return c.count, c.err })
			if fits != c.fits || result != c.result || asked != c.asked {
				t.Errorf("fits %t, result %q, counted %t; want %t, %q, %t", fits, result, asked, c.fits, c.result, c.asked)
			}
			if (err != nil) != (c.result == Failed) {
				t.Errorf("error %v with result %q", err, result)
			}
			if est := Estimate(c.ep, c.info, c.limit); result == "" && fits != est {
				t.Errorf("the estimate says %t, Decide %t without a count", est, fits)
			}
		})
	}
}

// TestBody: what /tokenize is sent for each API: the pool's model and a
// chat request's messages and tools with the generation prompt, a
// completion's string prompt, and Responses and Messages requests
// translated to chat; what cannot be counted so is refused.
func TestBody(t *testing.T) {
	for _, c := range []struct {
		name string
		ep   wire.Endpoint
		body string
		want string // the body sent, or "" when refused
	}{
		{"chat", wire.Chat, `{"model":"auto","max_tokens":8,"messages":[{"role":"user","content":"h\u00e9"}],"tools":[{"type":"function","function":{"name":"f"}}]}`,
			`{"model":"m","messages":[{"role":"user","content":"h\u00e9"}],"tools":[{"type":"function","function":{"name":"f"}}],"add_generation_prompt":true}`},
		{"chat without tools", wire.Chat, `{"model":"auto","messages":[{"role":"user","content":"hi"}]}`,
			`{"model":"m","messages":[{"role":"user","content":"hi"}],"add_generation_prompt":true}`},
		{"completion", wire.Completions, `{"model":"auto","prompt":"Once upon a time"}`, `{"model":"m","prompt":"Once upon a time"}`},
		{"completion of token ids", wire.Completions, `{"model":"auto","prompt":[1,2,3]}`, ""},
		{"embeddings", wire.Embeddings, `{"model":"auto","input":"hi"}`, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := Body(c.ep, parse(t, c.ep, c.body), []byte(c.body), "m")
			if c.want == "" {
				if !errors.Is(err, translate.ErrNotTranslatable) {
					t.Errorf("%s, %v; want ErrNotTranslatable", got, err)
				}
				return
			}
			if err != nil || string(got) != c.want {
				t.Errorf("%s, %v\nwant %s", got, err, c.want)
			}
		})
	}
	for _, c := range []struct {
		ep   wire.Endpoint
		body string
	}{
		{wire.Responses, `{"model":"auto","instructions":"Be brief.","input":"hi","tools":[{"type":"function","name":"f","parameters":{"type":"object"}}]}`},
		{wire.Messages, `{"model":"auto","max_tokens":8,"system":"Be brief.","messages":[{"role":"user","content":"hi"}],"tools":[{"name":"f","input_schema":{"type":"object"}}]}`},
	} {
		got, err := Body(c.ep, parse(t, c.ep, c.body), []byte(c.body), "m")
		b := gjson.ParseBytes(got)
		if err != nil || b.Get("model").Str != "m" || !b.Get("add_generation_prompt").Bool() || b.Get("messages.#").Int() != 2 ||
			b.Get("messages.0.role").Str != "system" || b.Get("messages.1.content").String() != "hi" || b.Get("tools.0.function.name").Str != "f" {
			t.Errorf("%s: %s, %v; want the chat request vLLM makes of it", c.body, got, err)
		}
	}
}

func parse(t *testing.T, ep wire.Endpoint, body string) *wire.Info {
	t.Helper()
	info, err := wire.Parse([]byte(body), ep, 0)
	if err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	return info
}

// TestReadCount: a 200 with a count is the count; any other answer, one
// nested too deep or without a count that is a whole number, is a failure
// carrying its status and the replica's message.
func TestReadCount(t *testing.T) {
	if n, err := ReadCount(200, []byte(`{"count":5,"max_model_len":8192,"tokens":[1,2,3,4,5]}`), 8); n != 5 || err != nil {
		t.Errorf("a count of 5: %d, %v", n, err)
	}
	for _, c := range []struct {
		status int
		answer string
	}{
		{404, `{"error":{"message":"Not Found"}}`},
		{200, `{"count":-1}`},
		{200, `{"count":"5"}`},
		{200, `{"tokens":[1]}`},
		{200, `{"count":5,"x":` + strings.Repeat("[", 9) + strings.Repeat("]", 9) + `}`},
	} {
		n, err := ReadCount(c.status, []byte(c.answer), 8)
		var f *upstream.Failure
		if !errors.As(err, &f) || f.Status != c.status || n != 0 {
			t.Errorf("%d %s: %d, %v; want a failure", c.status, c.answer, n, err)
		}
		if c.status == 404 && f.Msg != "Not Found" {
			t.Errorf("failure message %q, want the replica's", f.Msg)
		}
	}
}

type fakeReplica struct {
	name     string
	down     bool
	inflight int64
}

func (r *fakeReplica) Available(time.Time) bool { return !r.down }
func (r *fakeReplica) Inflight() int64          { return r.inflight }

// TestPick: the calls go to the least busy available replica, in turn
// among equals: two idle replicas get every other call, and with one of
// them busy every call goes to the other (before, every call went to the
// first available replica).
func TestPick(t *testing.T) {
	a, b := &fakeReplica{name: "a"}, &fakeReplica{name: "b"}
	reps := []*fakeReplica{a, b}
	var turns Turns
	picks := func(n int) string {
		var got []string
		for range n {
			r, ok := Pick(&turns, reps, time.Time{})
			if !ok {
				t.Fatal("no replica picked")
			}
			got = append(got, r.name)
		}
		return strings.Join(got, " ")
	}
	if got := picks(4); strings.Count(got, "a") != 2 || strings.Count(got, "b") != 2 || got[0] == got[2] {
		t.Errorf("two idle replicas: %s, want them in turn", got)
	}
	a.inflight = 1
	if got := picks(3); got != "b b b" {
		t.Errorf("a busy: %s, want every call on b", got)
	}
	b.down = true
	if got := picks(2); got != "a a" {
		t.Errorf("b unavailable: %s, want a, busy or not", got)
	}
	a.down = true
	if _, ok := Pick(&turns, reps, time.Time{}); ok {
		t.Error("a replica picked with none available")
	}
	if _, ok := Pick(&turns, []*fakeReplica(nil), time.Time{}); ok {
		t.Error("a replica picked from none")
	}
}

// TestOverflow: a replica's 400 saying the prompt exceeds its context, in
// each of vLLM's wordings, is an overflow; another 400, or such words
// with another status, is not.
func TestOverflow(t *testing.T) {
	for _, msg := range []string{
		`{"error":{"message":"This model's maximum context length is 4096 tokens. However, you requested 6000 tokens."}}`,
		`{"message":"Input length exceeds max_model_len"}`,
		`{"detail":"Please reduce the length of the messages: the Maximum Model Length is 4096"}`,
		`{"error":{"message":"prompt is longer than the context length"}}`,
	} {
		if !Overflow(400, []byte(msg)) {
			t.Errorf("400 %s: not an overflow", msg)
		}
		if Overflow(500, []byte(msg)) {
			t.Errorf("500 %s: an overflow", msg)
		}
	}
	if Overflow(400, []byte(`{"error":{"message":"max_tokens must be at least 1"}}`)) {
		t.Error("another 400 taken for an overflow")
	}
}
