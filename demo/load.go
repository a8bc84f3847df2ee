package demo

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Result is one request of the load, as the client saw it.
type Result struct {
	// API is the client API used: chat, responses or messages.
	API     string
	Kind    string
	Route   string
	Pool    string
	Class   string
	Status  int
	Stream  bool
	Latency time.Duration
	TTFT    time.Duration
	Err     string
	At      time.Time
}

// Load is a closed-loop generator of agent-like traffic: multi-turn
// sessions, tool calls and tool results, short chat, long reasoning
// requests, streaming and not.
type Load struct {
	// BaseURL is the gateway's client API, e.g. http://127.0.0.1:8080.
	BaseURL string
	// Model is the model name clients send (default "auto").
	Model string
	// Workers is the number of concurrent sessions (default 16).
	Workers int
	// MaxTokens bounds each answer (default 48).
	MaxTokens int
	// Think is the pause between a session's requests (default 20ms).
	Think  time.Duration
	Client *http.Client
	// Seed makes the mix reproducible.
	Seed uint64
	// OnResult receives every result; it must be safe for concurrent use.
	OnResult func(Result)
}

// scenario weights of the mix.
var scenarios = []struct {
	name   string
	weight int
}{
	{"chat", 35}, {"agent", 25}, {"reasoning", 20}, {"long-doc", 10}, {"multi-tool", 10},
}

// apis are the client APIs of the mix and their weights: the agents of
// each (the OpenAI SDKs and most frameworks; Codex and the Agents SDK;
// Claude Code).
var apis = []struct {
	name   string
	weight int
}{{"chat", 60}, {"responses", 20}, {"messages", 20}}

func pickAPI(rng *rand.Rand) string {
	n := rng.IntN(100)
	for _, a := range apis {
		if n < a.weight {
			return a.name
		}
		n -= a.weight
	}
	return apis[0].name
}

// Run drives the load until ctx ends.
func (l *Load) Run(ctx context.Context) {
	if l.Model == "" {
		l.Model = "auto"
	}
	if l.Workers <= 0 {
		l.Workers = 16
	}
	if l.MaxTokens <= 0 {
		l.MaxTokens = 48
	}
	if l.Think <= 0 {
		l.Think = 20 * time.Millisecond
	}
	if l.Client == nil {
		l.Client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, DisableCompression: true}}
	}
	var wg sync.WaitGroup
	for w := range l.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(l.Seed, uint64(w)))
			for s := 0; ctx.Err() == nil; s++ {
				l.session(ctx, rng, fmt.Sprintf("demo-%d-%d", w, s))
			}
		}()
	}
	wg.Wait()
}

func pick(rng *rand.Rand) string {
	total := 0
	for _, s := range scenarios {
		total += s.weight
	}
	n := rng.IntN(total)
	for _, s := range scenarios {
		if n < s.weight {
			return s.name
		}
		n -= s.weight
	}
	return scenarios[0].name
}

type message map[string]any

// session runs one conversation of the chosen scenario.
func (l *Load) session(ctx context.Context, rng *rand.Rand, id string) {
	kind := pick(rng)
	api := pickAPI(rng)
	stream := rng.IntN(2) == 0
	var msgs []message
	var tools []any
	sys := message{"role": "system", "content": "You are a helpful assistant for a software team."}
	msgs = append(msgs, sys)
	turns := 1
	switch kind {
	case "chat":
		turns = 1 + rng.IntN(3)
		msgs = append(msgs, message{"role": "user", "content": shortQuestions[rng.IntN(len(shortQuestions))]})
	case "agent":
		turns = 2
		tools = toolDefs(2)
		msgs = append(msgs, message{"role": "user", "content": "Check the weather in Lisbon and tell me if I need an umbrella."})
	case "multi-tool":
		turns = 2
		tools = toolDefs(5)
		msgs = append(msgs, message{"role": "user", "content": "Book the team offsite: find a venue, check calendars and send invites."})
	case "reasoning":
		msgs = append(msgs, message{"role": "user", "content": reasoningPrompts[rng.IntN(len(reasoningPrompts))]})
	case "long-doc":
		msgs = append(msgs, message{"role": "user", "content": "Summarise this design document for the team:\n" + strings.Repeat(docParagraph, 4+rng.IntN(4))})
	}
	for t := 0; t < turns && ctx.Err() == nil; t++ {
		reply, toolCall := l.do(ctx, api, kind, id, msgs, tools, stream)
		if reply == nil {
			// Back off before the next session, as a client would, so that
			// a failing gateway is not flooded by the load itself.
			select {
			case <-ctx.Done():
			case <-time.After(max(l.Think, 100*time.Millisecond)):
			}
			return
		}
		msgs = append(msgs, reply)
		if toolCall != "" {
			msgs = append(msgs, message{"role": "tool", "tool_call_id": toolCall, "content": `{"result":"ok","detail":"sunny, 21°C"}`})
		} else {
			msgs = append(msgs, message{"role": "user", "content": shortQuestions[rng.IntN(len(shortQuestions))]})
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(l.Think):
		}
	}
}

// do sends one request in the given API and returns the assistant message
// to append, in chat form (and a tool call id when the answer was a tool
// call); nil when it failed.
func (l *Load) do(ctx context.Context, api, kind, session string, msgs []message, tools []any, stream bool) (message, string) {
	path, body := requestFor(api, l.Model, l.MaxTokens, msgs, tools, stream)
	hr, _ := http.NewRequestWithContext(ctx, http.MethodPost, l.BaseURL+path, bytes.NewReader(body))
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("X-Session-Id", session)
	if api == "messages" {
		hr.Header.Set("Anthropic-Version", "2023-06-01")
	}
	start := time.Now()
	res := Result{API: api, Kind: kind, Stream: stream, At: start}
	resp, err := l.Client.Do(hr)
	if err != nil {
		if ctx.Err() == nil {
			res.Err = err.Error()
			l.report(res)
		}
		return nil, ""
	}
	defer resp.Body.Close()
	res.Status = resp.StatusCode
	res.Route, res.Pool, res.Class = resp.Header.Get("X-Switchyard-Route"), resp.Header.Get("X-Switchyard-Pool"), resp.Header.Get("X-Switchyard-Class")
	var a answer
	switch {
	case resp.StatusCode != http.StatusOK:
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		res.Err = strings.TrimSpace(string(b))
	case stream:
		a, err = readStream(api, resp.Body, start)
		res.TTFT = a.ttft
		if err != nil && ctx.Err() == nil {
			res.Err = err.Error()
		}
	default:
		b, err := io.ReadAll(resp.Body)
		if err == nil {
			a, err = readAnswer(api, b)
		}
		if err != nil {
			res.Err = fmt.Sprintf("bad response body: %v", err)
		}
	}
	res.Latency = time.Since(start)
	if ctx.Err() != nil {
		return nil, "" // cut by the end of the run: neither a failure nor a success
	}
	l.report(res)
	if res.Err != "" {
		return nil, ""
	}
	if a.toolID != "" {
		return message{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{
			"id": a.toolID, "type": "function", "function": map[string]any{"name": "get_weather", "arguments": `{"city":"Lisbon"}`}}}}, a.toolID
	}
	return message{"role": "assistant", "content": a.text}, ""
}

func (l *Load) report(r Result) {
	if l.OnResult != nil {
		l.OnResult(r)
	}
}

func toolDefs(n int) []any {
	names := []string{"get_weather", "search_venues", "read_calendar", "send_invite", "create_ticket", "lookup_user"}
	out := make([]any, 0, n)
	for i := 0; i < n && i < len(names); i++ {
		out = append(out, map[string]any{"type": "function", "function": map[string]any{
			"name": names[i], "description": "Tool " + names[i],
			"parameters": map[string]any{"type": "object", "properties": map[string]any{
				"city": map[string]any{"type": "string"}}, "required": []string{"city"}},
		}})
	}
	return out
}

var shortQuestions = []string{
	"What's the capital of Portugal?",
	"Translate 'good morning' into French.",
	"Give me a synonym for 'fast'.",
	"What time zone is Tokyo in?",
	"Format this as a bullet list: apples, pears, plums.",
	"How many days are in a leap year?",
	"Thanks, that's all.",
}

var reasoningPrompts = []string{
	"Think step by step: design a rate limiter for a multi-tenant API and analyze its failure modes.",
	"Debug this and explain why it deadlocks:\n```go\nmu.Lock()\nch <- v\nmu.Unlock()\n```",
	"Prove that the sum of two even numbers is even, step by step.",
	"Plan a migration of our monolith to services; analyze the trade-offs of each step.",
	"Refactor this function and explain the architecture:\n```python\ndef f(x):\n    return [i*i for i in x if i%2]\n```",
}

const docParagraph = "The gateway receives requests from agents and applications, classifies each one with a small model, " +
	"and applies an ordered policy to choose a pool of replicas. Replicas report their load through vLLM metrics; the " +
	"balancer prefers replicas with short queues and warm prefix caches, and ejects replicas that fail. "
