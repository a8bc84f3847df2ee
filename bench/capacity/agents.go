package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tidwall/gjson"

	"github.com/switchyard/switchyard/demo"
	"github.com/switchyard/switchyard/policy"
	"github.com/switchyard/switchyard/router"
	"github.com/switchyard/switchyard/vllmsim"
)

// The agents workload: a few agents, each with a long system prompt of its
// own, hold multi-turn conversations. Every turn resends the whole
// conversation (system prompt, task, each earlier answer and tool result)
// plus a new tool result, as agent loops do, so consecutive turns of one
// conversation share everything but their last message. On vLLM that
// shared prefix is what the automatic prefix cache saves, if the turn
// reaches the replica that served the previous one.
//
// All sizes are in the simulator's tokens (4 bytes each).
var agentSystemTokens = []int{2000, 2600, 3200, 4000}

const (
	// agentTurns is the length of a conversation, in requests.
	agentTurns = 8
	// taskTokens is the size of a conversation's first user message.
	taskTokens = 150
	// toolResultTokens is the size of the tool result every later turn
	// appends after the previous answer.
	toolResultTokens = 600
)

// agentPool is the pool the agents workload runs on: its model, its
// replicas and its simulated profile.
func agentPool(o Options) (name, model string, replicas int, prof vllmsim.Profile) {
	q, m := profiles(o)
	if o.AgentPool == "minicpm" {
		return "minicpm", "openbmb/MiniCPM5-2B", 2, m
	}
	return "qwen", "Qwen/Qwen3.8-Flash-Next", 3, q
}

// AgentBalancers are the pool balancers the agents workload compares.
var AgentBalancers = []string{"affinity", "least_outstanding", "round_robin"}

// AgentResult is one balancer's measurement of the agents workload, over
// the window after warm-up.
type AgentResult struct {
	Balance string
	// RPS is completed requests per second.
	RPS float64
	// TTFT is measured by the client, through the gateway: from sending
	// the request to the first content delta of the stream.
	TTFTP50, TTFTP99 time.Duration
	// HitRate is the pool's prefix-cache hits over lookups, in tokens (the
	// vllm:prefix_cache_hits / vllm:prefix_cache_queries counters, summed
	// over the replicas).
	HitRate float64
	// PrefillPerRequest is the mean prefill time a request was scheduled,
	// in model time (not divided by SpeedUp): uncached prompt tokens over
	// the replica's prefill rate.
	PrefillPerRequest time.Duration
	// PromptTokens is the mean prompt length.
	PromptTokens float64
	// Bound is the pool's capacity in requests per second given the
	// measured prefill per request: its batch slots over the time a
	// request holds one (prefill plus decoding MaxTokens), and with
	// SerialPrefill at most one prefill at a time per replica.
	Bound float64
	// Busiest is the busiest replica's share of the completed requests
	// over a fair share (1 = perfectly even).
	Busiest  float64
	Requests int
	Errors   int
}

// agentSystemPrompt is agent a's system prompt: deterministic text of
// agentSystemTokens[a] tokens that differs from the others' from its first
// block on.
func agentSystemPrompt(a int) string {
	return fillText(fmt.Sprintf("You are agent %d of the harbor operations team. Follow these rules.", a), agentSystemTokens[a]*4, uint64(a)+1)
}

// fillText is head followed by pseudo-random words up to n bytes.
func fillText(head string, n int, seed uint64) string {
	words := []string{"berth", "crane", "manifest", "tide", "pilot", "ledger", "cargo", "schedule", "quay", "vessel",
		"container", "customs", "draft", "mooring", "tug", "invoice", "route", "weather", "check", "report"}
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	var b strings.Builder
	b.Grow(n + 16)
	b.WriteString(head)
	for b.Len() < n {
		b.WriteByte(' ')
		b.WriteString(words[rng.IntN(len(words))])
	}
	return b.String()[:n]
}

// conversation is one agent session: the messages so far, as the JSON
// elements of a chat request's messages array.
type conversation struct {
	agent    int
	messages []byte
	turns    int // requests it will send
}

func newConversation(worker, index, turns int, systems []string) *conversation {
	c := &conversation{agent: (worker + index) % len(systems), turns: turns}
	c.add("system", systems[c.agent])
	id := fmt.Sprintf("%d-%d", worker, index)
	c.add("user", fillText("Task "+id+": investigate the delayed departures and fix the schedule.", taskTokens*4, uint64(worker)<<32|uint64(index)))
	return c
}

// add appends a message.
func (c *conversation) add(role, content string) {
	if len(c.messages) > 0 {
		c.messages = append(c.messages, ',')
	}
	c.messages = append(c.messages, `{"role":"`...)
	c.messages = append(c.messages, role...)
	c.messages = append(c.messages, `","content":`...)
	b, _ := json.Marshal(content)
	c.messages = append(c.messages, b...)
	c.messages = append(c.messages, '}')
}

// body is the chat request of the next turn.
func (c *conversation) body(maxTokens int) []byte {
	b := fmt.Appendf(nil, `{"model":"auto","stream":true,"max_tokens":%d,"messages":[`, maxTokens)
	b = append(b, c.messages...)
	return append(b, "]}"...)
}

// agentsConfig is the agents' pool (see agentPool) with balancer balance;
// every request goes to it.
func agentsConfig(o Options, balance string) string {
	name, model, replicas, _ := agentPool(o)
	var sb strings.Builder
	fmt.Fprintf(&sb, "version: 1\npools:\n  %s:\n    model: %s\n    balance: %s\n    health: {disabled: true}\n    replicas:\n", name, model, balance)
	for i := range replicas {
		fmt.Fprintf(&sb, "      - {name: %s-%d, url: http://sim}\n", name, i)
	}
	fmt.Fprintf(&sb, "routes:\n  - name: all\n    to: %s\n", name)
	return sb.String()
}

// MeasureAgents runs the agents workload, closed loop, against one Qwen
// pool balanced by balance, through the gateway.
func MeasureAgents(ctx context.Context, o Options, balance string) (AgentResult, error) {
	cfg, err := policy.Load("agents.yaml", []byte(agentsConfig(o, balance)), router.LoadOptions())
	if err != nil {
		return AgentResult{}, err
	}
	_, _, _, qp := agentPool(o)
	cl, err := demo.StartCluster(cfg, func(*policy.Pool) vllmsim.Profile { return qp }, o.SpeedUp)
	if err != nil {
		return AgentResult{}, err
	}
	defer cl.Close()
	sims := make([]*vllmsim.Server, 0, len(cl.Replicas))
	for _, s := range cl.Replicas {
		sims = append(sims, s)
	}
	g, err := router.New(cfg, router.Options{Logger: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry()})
	if err != nil {
		return AgentResult{}, err
	}
	defer g.Close()
	srv := httptest.NewServer(g.Handler())
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: o.Workers, MaxIdleConns: o.Workers, DisableCompression: true}}
	defer client.CloseIdleConnections()

	systems := make([]string, len(agentSystemTokens))
	for a := range systems {
		systems[a] = agentSystemPrompt(a)
	}
	warmup := o.Duration / 2
	runCtx, cancel := context.WithTimeout(ctx, warmup+o.Duration)
	defer cancel()
	start := time.Now()
	windowStart, windowEnd := start.Add(warmup), start.Add(warmup+o.Duration)

	// The replicas' counters at both ends of the window.
	var before, after []vllmsim.Stats
	snap := func() []vllmsim.Stats {
		st := make([]vllmsim.Stats, len(sims))
		for i, s := range sims {
			st[i] = s.Stats()
		}
		return st
	}
	var snaps sync.WaitGroup
	snaps.Add(1)
	go func() {
		defer snaps.Done()
		for _, at := range []time.Time{windowStart, windowEnd} {
			t := time.NewTimer(time.Until(at))
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return
			}
			if before == nil {
				before = snap()
			} else {
				after = snap()
			}
		}
	}()

	var mu sync.Mutex
	var ttfts []time.Duration
	var completed, errs atomic.Int64
	var wg sync.WaitGroup
	for w := range o.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The first conversation is shorter by w turns (mod the
			// length), so the workers' turns are spread from the start.
			turns := agentTurns - w%agentTurns
			for index := 0; runCtx.Err() == nil; index++ {
				c := newConversation(w, index, turns, systems)
				turns = agentTurns
				for turn := 0; turn < c.turns && runCtx.Err() == nil; turn++ {
					ttft, answer, err := agentTurn(runCtx, client, srv.URL, c.body(o.MaxTokens))
					if err != nil {
						if runCtx.Err() == nil {
							errs.Add(1)
						}
						break // the conversation is lost; start another
					}
					if t1 := time.Now(); t1.After(windowStart) && t1.Before(windowEnd) {
						completed.Add(1)
						mu.Lock()
						ttfts = append(ttfts, ttft)
						mu.Unlock()
					}
					c.add("assistant", answer)
					c.add("user", fillText(fmt.Sprintf("Tool output %d-%d-%d:", w, index, turn), toolResultTokens*4, uint64(w)<<40|uint64(index)<<8|uint64(turn)))
				}
			}
		}()
	}
	wg.Wait()
	snaps.Wait()
	if ctx.Err() != nil {
		return AgentResult{}, ctx.Err()
	}
	if before == nil || after == nil {
		return AgentResult{}, fmt.Errorf("the measurement window did not complete")
	}

	r := AgentResult{Balance: balance, Requests: int(completed.Load()), Errors: int(errs.Load())}
	r.RPS = float64(completed.Load()) / o.Duration.Seconds()
	slices.Sort(ttfts)
	if len(ttfts) > 0 {
		r.TTFTP50, r.TTFTP99 = ttfts[len(ttfts)/2], ttfts[min(len(ttfts)-1, len(ttfts)*99/100)]
	}
	var queries, hits, done, prompt int64
	var prefill time.Duration
	var busiest int64
	for i := range sims {
		queries += after[i].PrefixCacheQueries - before[i].PrefixCacheQueries
		hits += after[i].PrefixCacheHits - before[i].PrefixCacheHits
		prefill += after[i].PrefillTime - before[i].PrefillTime
		n := after[i].Completed - before[i].Completed
		done += n
		busiest = max(busiest, n)
		prompt += after[i].PromptTokens - before[i].PromptTokens
	}
	if queries > 0 {
		r.HitRate = float64(hits) / float64(queries)
	}
	if done > 0 {
		r.PrefillPerRequest = time.Duration(float64(prefill) * o.SpeedUp / float64(done))
		r.PromptTokens = float64(prompt) / float64(done)
		r.Busiest = float64(busiest) / (float64(done) / float64(len(sims)))
		pre := r.PrefillPerRequest.Seconds()
		r.Bound = float64(len(sims)*qp.MaxBatch) / (pre + float64(o.MaxTokens)/qp.DecodeTPS) * o.SpeedUp
		if o.SerialPrefill && pre > 0 {
			r.Bound = min(r.Bound, float64(len(sims))/pre*o.SpeedUp)
		}
	}
	if r.Errors > 0 {
		return r, fmt.Errorf("%s: %d requests failed", balance, r.Errors)
	}
	return r, nil
}

// agentTurn sends one turn as a stream and returns the time to its first
// content delta and the answer's text.
func agentTurn(ctx context.Context, client *http.Client, url string, body []byte) (time.Duration, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	t0 := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, "", fmt.Errorf("status %d", resp.StatusCode)
	}
	var ttft time.Duration
	var answer strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 16<<10), 1<<20)
	done := false
	for sc.Scan() {
		data, ok := bytes.CutPrefix(sc.Bytes(), []byte("data: "))
		if !ok {
			continue
		}
		if string(data) == "[DONE]" {
			done = true
			break
		}
		if c := gjson.GetBytes(data, "choices.0.delta.content"); c.Str != "" {
			if ttft == 0 {
				ttft = time.Since(t0)
			}
			answer.WriteString(c.Str)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, "", err
	}
	if !done || ttft == 0 {
		return 0, "", fmt.Errorf("stream ended without an answer")
	}
	return ttft, answer.String(), nil
}
