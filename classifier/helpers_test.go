package classifier_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/switchyard/switchyard/classifier"
	"github.com/switchyard/switchyard/internal/polltest"
	"github.com/switchyard/switchyard/vllmsim"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const servedModel = "openbmb/MiniCPM5-2B"

// waitFor bounds every wait on another goroutine; it is far above what a
// passing run needs, so it only decides how long a broken run takes to fail.
const waitFor = 5 * time.Second

var labels = []string{"simple", "complex"}

// simTransport is the router's job in miniature: POST the body to the
// classifier pool's replica and return the answer.
type simTransport struct {
	url    string
	client *http.Client
}

func (t simTransport) ChatCompletion(ctx context.Context, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.url+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := t.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %d: %s", resp.StatusCode, out)
	}
	return out, nil
}

// startSim serves a simulated classifier replica on a real socket for the
// test's duration and returns a transport to it.
func startSim(t testing.TB, opts ...vllmsim.Option) (*vllmsim.Server, simTransport) {
	t.Helper()
	sim := vllmsim.New(vllmsim.Profile{Model: servedModel}, opts...)
	ts := httptest.NewServer(sim)
	t.Cleanup(ts.Close)
	return sim, simTransport{url: ts.URL, client: ts.Client()}
}

// transportFunc adapts a function to classifier.Transport.
type transportFunc func(ctx context.Context, body []byte) ([]byte, error)

func (f transportFunc) ChatCompletion(ctx context.Context, body []byte) ([]byte, error) {
	return f(ctx, body)
}

// gate is a transport whose calls block until the test lets them out, so a
// test decides when a classifier call is in flight and when it ends.
type gate struct {
	answer  []byte
	entered chan context.Context // each call's ctx, sent as it arrives
	release chan struct{}        // a send lets one call out; close lets all out

	calls            atomic.Int64
	inflight, maxRun atomic.Int64
	opened           sync.Once
}

func newGate(label string) *gate {
	return &gate{answer: answer(label), entered: make(chan context.Context, 100), release: make(chan struct{})}
}

func (g *gate) ChatCompletion(ctx context.Context, _ []byte) ([]byte, error) {
	g.calls.Add(1)
	n := g.inflight.Add(1)
	defer g.inflight.Add(-1)
	for {
		m := g.maxRun.Load()
		if n <= m || g.maxRun.CompareAndSwap(m, n) {
			break
		}
	}
	g.entered <- ctx
	select {
	case <-g.release:
		return g.answer, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// next waits for the next call to arrive and returns its ctx.
func (g *gate) next(t *testing.T) context.Context {
	t.Helper()
	select {
	case ctx := <-g.entered:
		return ctx
	case <-time.After(waitFor):
		t.Fatalf("no transport call arrived within %v (%d so far)", waitFor, g.calls.Load())
		return nil
	}
}

// open lets every blocked and future call out; safe to call twice.
func (g *gate) open() { g.opened.Do(func() { close(g.release) }) }

// capture is a transport that records every body and answers label.
type capture struct {
	label  string
	mu     sync.Mutex
	bodies [][]byte
}

func (c *capture) ChatCompletion(_ context.Context, body []byte) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.bodies = append(c.bodies, bytes.Clone(body))
	return answer(c.label), nil
}

func (c *capture) last(t *testing.T) []byte {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.bodies) == 0 {
		t.Fatal("the transport received no request")
	}
	return c.bodies[len(c.bodies)-1]
}

// top is one top_logprobs entry: a token and its probability.
type top struct {
	token string
	p     float64
}

// answer is a vLLM chat completion body whose reply is content. With tops,
// the first token carries logprobs: its token is tops[0] and its
// top_logprobs are all of tops.
func answer(content string, tops ...top) []byte {
	choice := map[string]any{
		"index":         0,
		"message":       map[string]any{"role": "assistant", "content": content},
		"logprobs":      nil,
		"finish_reason": "stop",
	}
	if len(tops) > 0 {
		list := make([]map[string]any, len(tops))
		for i, tp := range tops {
			list[i] = map[string]any{"token": tp.token, "logprob": math.Log(tp.p), "bytes": []int{int(tp.token[0])}}
		}
		choice["logprobs"] = map[string]any{"content": []map[string]any{{
			"token": tops[0].token, "logprob": math.Log(tops[0].p), "bytes": []int{int(tops[0].token[0])}, "top_logprobs": list,
		}}}
	}
	b, err := json.Marshal(map[string]any{
		"id": "chatcmpl-test", "object": "chat.completion", "created": 1, "model": servedModel,
		"choices": []any{choice},
		"usage":   map[string]any{"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11},
	})
	if err != nil {
		panic(err)
	}
	return b
}

// newModel builds a kind model classifier over tr with the labels simple and
// complex; edit adjusts the options first.
func newModel(t testing.TB, tr classifier.Transport, edit func(*classifier.Options)) *classifier.Classifier {
	t.Helper()
	o := classifier.Options{
		Kind:        "model",
		Labels:      labels,
		Model:       servedModel,
		OnError:     "complex",
		Timeout:     30 * time.Second, // a test that needs a timeout sets its own
		CacheSize:   100,
		Concurrency: 64,
		Transport:   tr,
	}
	if edit != nil {
		edit(&o)
	}
	c, err := classifier.New(filled(o))
	if err != nil {
		t.Fatalf("classifier.New: %v", err)
	}
	return c
}

// classifyAsync runs Classify on its own goroutine; the result arrives on
// the returned channel.
func classifyAsync(ctx context.Context, c *classifier.Classifier, in classifier.Input) <-chan classifier.Result {
	ch := make(chan classifier.Result, 1)
	go func() { ch <- c.Classify(ctx, in) }()
	return ch
}

func receive(t *testing.T, ch <-chan classifier.Result) classifier.Result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(waitFor):
		t.Fatalf("Classify did not return within %v", waitFor)
		return classifier.Result{}
	}
}

// eventually polls cond until it holds or waitFor passes
// (polltest.Eventually, the repository's one polling loop).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	polltest.Eventually(t, waitFor, what, cond)
}
