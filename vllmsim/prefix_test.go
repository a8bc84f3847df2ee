package vllmsim_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/tidwall/gjson"

	"github.com/switchyard/switchyard/vllmsim"
)

// The simulator's tokenizer counts a token per 4 bytes and vLLM's block is
// 16 tokens, so a block is 64 bytes of prompt.
const blockBytes = 64

// text is n bytes of text that starts with tag, so that texts with
// different tags differ in their first block.
func text(tag string, n int) string {
	s := tag + " " + strings.Repeat("the harbor master logs every boat. ", n/35+1)
	return s[:n]
}

// chatWith is a chat request with a system prompt and one user message.
func chatWith(system, user string) string {
	b, _ := json.Marshal(map[string]any{
		"max_tokens": 1,
		"messages": []map[string]string{
			{"role": "system", "content": system},
			{"role": "user", "content": user},
		},
	})
	return string(b)
}

// cachedOf is usage.prompt_tokens_details.cached_tokens of a chat answer,
// -1 when prompt_tokens_details is null.
func cachedOf(t *testing.T, body []byte) int {
	t.Helper()
	d := gjson.GetBytes(body, "usage.prompt_tokens_details")
	if !d.Exists() {
		t.Fatalf("no usage.prompt_tokens_details in %s", body)
	}
	if d.Type == gjson.Null {
		return -1
	}
	return int(d.Get("cached_tokens").Int())
}

// step is one request of a prefix-cache scenario and what it must count.
type step struct {
	body       string
	wantHits   int64 // tokens
	wantPrompt int64 // tokens, all queried
}

func TestPrefixCache(t *testing.T) {
	system := text("agent-a", 64*blockBytes) // exactly 64 blocks, 1024 tokens
	other := text("agent-b", 64*blockBytes)
	userA, userB := text("first task", 100), text("second task", 100)
	tests := []struct {
		name  string
		steps []step
	}{
		{"a shared system prompt hits its blocks", []step{
			{chatWith(system, userA), 0, (64*blockBytes + 100) / 4},
			// The user message starts block 64, which differs: 64 blocks hit.
			{chatWith(system, userB), 64 * 16, (64*blockBytes + 100) / 4},
		}},
		{"a different system prompt misses", []step{
			{chatWith(system, userA), 0, (64*blockBytes + 100) / 4},
			{chatWith(other, userA), 0, (64*blockBytes + 100) / 4},
		}},
		{"a repeated prompt hits every full block but recomputes the last", []step{
			{chatWith(system, userA), 0, 1049},
			// 1049 tokens: 65 full blocks, all cached, but at most 1048
			// tokens may hit, so 65 blocks = 1040.
			{chatWith(system, userA), 65 * 16, 1049},
			// Exactly 64 blocks: the last block holds the last token, so
			// only 63 hit.
			{chatWith(system[:32*blockBytes], system[32*blockBytes:]), 63 * 16, 1024},
		}},
		{"a growing conversation hits everything before its new turn", []step{
			{chatWith(system, userA), 0, 1049},
			{`{"max_tokens":1,"messages":[{"role":"system","content":"` + system + `"},{"role":"user","content":"` + userA +
				`"},{"role":"assistant","content":"` + text("answer", 60) + `"},{"role":"user","content":"` + userB + `"}]}`,
				65 * 16, (64*blockBytes + 260) / 4},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// 1,000,000 tokens/s: a 1,049-token prefill takes about 1 ms.
			sim, ts := start(t, vllmsim.Profile{PrefillTPS: 1e6, PrefixCacheBlocks: 1000, PromptTokensDetails: true})
			var queries, hits int64
			for i, st := range tc.steps {
				before := sim.Stats()
				resp, body := post(t, ts, "/v1/chat/completions", st.body)
				if resp.StatusCode != 200 {
					t.Fatalf("step %d: status %d: %s", i, resp.StatusCode, body)
				}
				after := sim.Stats()
				gotQ, gotH := after.PrefixCacheQueries-before.PrefixCacheQueries, after.PrefixCacheHits-before.PrefixCacheHits
				if gotQ != st.wantPrompt || gotH != st.wantHits {
					t.Errorf("step %d: queried %d tokens, hit %d; want %d, %d", i, gotQ, gotH, st.wantPrompt, st.wantHits)
				}
				queries, hits = queries+gotQ, hits+gotH
				wantCached := int(st.wantHits)
				if wantCached == 0 {
					wantCached = -1 // null, as vLLM leaves it without a hit
				}
				if got := cachedOf(t, body); got != wantCached {
					t.Errorf("step %d: usage cached_tokens %d, want %d (-1: null)", i, got, wantCached)
				}
				// Prefill is the uncached tokens over PrefillTPS.
				wantPrefill := time.Duration(float64(st.wantPrompt-st.wantHits) / 1e6 * float64(time.Second))
				if d := after.PrefillTime - before.PrefillTime - wantPrefill; d < -time.Microsecond || d > time.Microsecond {
					t.Errorf("step %d: prefill %v, want %v", i, after.PrefillTime-before.PrefillTime, wantPrefill)
				}
			}
			_, m := get(t, ts, "/metrics")
			const l = `{model_name="sim/test-model"}`
			if got := sample(t, m, "vllm:prefix_cache_queries_total"+l); got != float64(queries) {
				t.Errorf("vllm:prefix_cache_queries_total %v, want %d", got, queries)
			}
			if got := sample(t, m, "vllm:prefix_cache_hits_total"+l); got != float64(hits) {
				t.Errorf("vllm:prefix_cache_hits_total %v, want %d", got, hits)
			}
		})
	}
}

func TestPrefixCacheShortensPrefill(t *testing.T) {
	// A second request sharing a long system prompt prefills only its own
	// tail: the simulator schedules its first token that much sooner.
	sim, ts := start(t, vllmsim.Profile{PrefillTPS: 1e6, PrefixCacheBlocks: 1000})
	system := text("agent-a", 4000)
	post(t, ts, "/v1/chat/completions", chatWith(system, text("first task", 100)))
	first := sim.Stats().PrefillTime
	post(t, ts, "/v1/chat/completions", chatWith(system, text("second task", 100)))
	second := sim.Stats().PrefillTime - first
	if first <= 0 || second <= 0 || second*10 > first {
		t.Errorf("prefill %v then %v, want the second under a tenth of the first (only ~2%% of its prompt is new)", first, second)
	}
}

func TestPrefixCacheEviction(t *testing.T) {
	// Each prompt has 64 full blocks (4,128 bytes = 1,032 tokens). A
	// request caches its blocks tail first, so its leading blocks are
	// evicted last, as vLLM frees a request's blocks in reverse.
	a := chatWith(text("agent-a", 64*blockBytes), text("task", 32))
	b := chatWith(text("agent-b", 64*blockBytes), text("task", 32))
	tests := []struct {
		name     string
		capacity int
		wantHits int64 // a's tokens hit when it comes back after b
	}{
		{"room for both", 128, 64 * 16},
		// 28 of a's blocks were evicted, all from its tail.
		{"room for 100 blocks", 100, 36 * 16},
		{"room for one prompt", 64, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sim, ts := start(t, vllmsim.Profile{PrefixCacheBlocks: tc.capacity})
			post(t, ts, "/v1/chat/completions", a)
			post(t, ts, "/v1/chat/completions", b)
			before := sim.Stats().PrefixCacheHits
			post(t, ts, "/v1/chat/completions", a)
			if got := sim.Stats().PrefixCacheHits - before; got != tc.wantHits {
				t.Errorf("a hit %d tokens after b, want %d", got, tc.wantHits)
			}
		})
	}
}

func TestPrefixCacheOff(t *testing.T) {
	// Without PrefixCacheBlocks nothing is cached or counted, and the
	// series are still exposed (at 0), as vLLM exposes them.
	sim, ts := start(t, vllmsim.Profile{PrefillTPS: 1e6, PromptTokensDetails: true})
	req := chatWith(text("agent-a", 4000), "hi")
	for range 2 {
		_, body := post(t, ts, "/v1/chat/completions", req)
		if got := cachedOf(t, body); got != -1 {
			t.Errorf("cached_tokens %d, want null", got)
		}
	}
	st := sim.Stats()
	if st.PrefixCacheQueries != 0 || st.PrefixCacheHits != 0 {
		t.Errorf("stats %+v, want no prefix-cache counts", st)
	}
	if want := time.Duration(float64(st.PromptTokens) / 1e6 * float64(time.Second)); st.PrefillTime < want-time.Microsecond || st.PrefillTime > want+time.Microsecond {
		t.Errorf("prefill %v, want the whole prompts (%v)", st.PrefillTime, want)
	}
	_, m := get(t, ts, "/metrics")
	if got := sample(t, m, `vllm:prefix_cache_hits_total{model_name="sim/test-model"}`); got != 0 {
		t.Errorf("hits %v, want 0", got)
	}
}

func TestPrefixCacheUsageDetails(t *testing.T) {
	// Without PromptTokensDetails (vLLM's --enable-prompt-tokens-details)
	// chat and completions keep prompt_tokens_details null even on a hit.
	_, ts := start(t, vllmsim.Profile{PrefixCacheBlocks: 100})
	req := chatWith(text("agent-a", 2000), "hi")
	post(t, ts, "/v1/chat/completions", req)
	_, body := post(t, ts, "/v1/chat/completions", req)
	if got := cachedOf(t, body); got != -1 {
		t.Errorf("cached_tokens %d without PromptTokensDetails, want null", got)
	}

	// With it, a stream's usage chunk reports the hit too.
	_, ts = start(t, vllmsim.Profile{PrefixCacheBlocks: 100, PromptTokensDetails: true})
	post(t, ts, "/v1/chat/completions", req)
	stream := strings.Replace(req, `{`, `{"stream":true,"stream_options":{"include_usage":true},`, 1)
	s := collectChat(t, send(t, t.Context(), ts, "/v1/chat/completions", stream))
	last := s.raw[len(s.raw)-1]
	if got := gjson.Get(last, "usage.prompt_tokens_details.cached_tokens").Int(); got != 31*16 {
		t.Errorf("stream usage %s: cached_tokens %d, want %d", gjson.Get(last, "usage").Raw, got, 31*16)
	}

	// Legacy completions, a string prompt and a token-id prompt, each
	// looked up on its own.
	ids := make([]string, 40)
	for i := range ids {
		ids[i] = fmt.Sprint(1000 + i)
	}
	prompt := text("document", 640) // 10 blocks
	comp := `{"max_tokens":1,"prompt":[` + strings.Join(ids, ",") + `]}`
	post(t, ts, "/v1/completions", comp)
	_, body = post(t, ts, "/v1/completions", comp)
	if got := gjson.GetBytes(body, "usage.prompt_tokens_details.cached_tokens").Int(); got != 32 {
		t.Errorf("token ids: cached_tokens %d, want 32 (2 of 2 full blocks, the last token recomputed): %s", got, body)
	}
	comp = `{"max_tokens":1,"prompt":"` + prompt + `"}`
	post(t, ts, "/v1/completions", comp)
	_, body = post(t, ts, "/v1/completions", comp)
	if got := gjson.GetBytes(body, "usage.prompt_tokens_details.cached_tokens").Int(); got != 9*16 {
		t.Errorf("text: cached_tokens %d, want %d", got, 9*16)
	}
}

func TestPrefixCacheResponses(t *testing.T) {
	sim, ts := start(t, vllmsim.Profile{PrefixCacheBlocks: 1000, DefaultMaxTokens: 8})
	long := text("repository summary", 64*blockBytes)
	_, body := post(t, ts, "/v1/responses", `{"input":"`+long+`"}`)
	if got := gjson.GetBytes(body, "usage.input_tokens_details.cached_tokens"); got.Raw != "0" {
		t.Fatalf("first response: cached_tokens %s, want 0: %s", got.Raw, body)
	}
	id := gjson.GetBytes(body, "id").Str

	// A follow-up without instructions extends the previous prompt: its
	// 64 input blocks hit (the block after them holds output text, which
	// no request prefilled yet). The Responses API reports the hit
	// without PromptTokensDetails, as vLLM does.
	before := sim.Stats().PrefixCacheHits
	_, body = post(t, ts, "/v1/responses", `{"previous_response_id":"`+id+`","input":"and the tests?"}`)
	if got := gjson.GetBytes(body, "usage.input_tokens_details.cached_tokens").Int(); got != 64*16 {
		t.Errorf("follow-up: cached_tokens %d, want %d: %s", got, 64*16, gjson.GetBytes(body, "usage").Raw)
	}
	if got := sim.Stats().PrefixCacheHits - before; got != 64*16 {
		t.Errorf("follow-up hit %d tokens, want %d", got, 64*16)
	}

	// With new instructions vLLM puts them before the inherited messages,
	// so the prompt no longer extends the previous one.
	_, body = post(t, ts, "/v1/responses", `{"previous_response_id":"`+id+`","instructions":"Be brief.","input":"and the tests?"}`)
	if got := gjson.GetBytes(body, "usage.input_tokens_details.cached_tokens").Int(); got != 0 {
		t.Errorf("follow-up with instructions: cached_tokens %d, want 0", got)
	}
}

func TestPrefixCacheMessages(t *testing.T) {
	// Claude Code's per-request billing header is dropped, as vLLM drops
	// it, so it does not defeat the cache.
	sim, ts := start(t, vllmsim.Profile{PrefixCacheBlocks: 1000})
	system := text("you are claude code", 64*blockBytes)
	req := func(billing, user string) string {
		return `{"model":"sim/test-model","max_tokens":1,"system":[{"type":"text","text":"x-anthropic-billing-header: cc_version=` + billing +
			`"},{"type":"text","text":"` + system + `"}],"messages":[{"role":"user","content":"` + user + `"}]}`
	}
	post(t, ts, "/v1/messages", req("1", text("fix the bug", 100)))
	before := sim.Stats().PrefixCacheHits
	resp, body := post(t, ts, "/v1/messages", req("2", text("write a test", 100)))
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if got := sim.Stats().PrefixCacheHits - before; got != 64*16 {
		t.Errorf("second request hit %d tokens, want %d", got, 64*16)
	}
}

func TestPrefixCacheConcurrent(t *testing.T) {
	// Many requests sharing a prefix at once, for the race detector, and
	// the counters add up.
	sim, ts := start(t, vllmsim.Profile{PrefixCacheBlocks: 50, MaxBatch: 4})
	system := text("agent", 20*blockBytes)
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			post(t, ts, "/v1/chat/completions", chatWith(system, text(fmt.Sprint("task ", i), 200)))
		}()
	}
	wg.Wait()
	st := sim.Stats()
	if want := int64(16 * (20*blockBytes + 200) / 4); st.PrefixCacheQueries != want {
		t.Errorf("queried %d tokens, want %d", st.PrefixCacheQueries, want)
	}
	// The first request admitted misses; every later one finds the 20
	// system blocks at least.
	if st.PrefixCacheHits < 15*20*16 {
		t.Errorf("hit %d tokens, want at least %d", st.PrefixCacheHits, 15*20*16)
	}
}

func TestPrefixCacheLegacyMetrics(t *testing.T) {
	_, ts := start(t, vllmsim.Profile{PrefixCacheBlocks: 10, LegacyMetrics: true})
	post(t, ts, "/v1/chat/completions", chatHi)
	_, m := get(t, ts, "/metrics")
	var got []string
	for _, name := range []string{"vllm:gpu_prefix_cache_queries_total", "vllm:gpu_prefix_cache_hits_total", "vllm:prefix_cache_queries_total"} {
		if strings.Contains(m, "# TYPE "+name+" counter") {
			got = append(got, name)
		}
	}
	if diff := cmp.Diff([]string{"vllm:gpu_prefix_cache_queries_total", "vllm:gpu_prefix_cache_hits_total"}, got); diff != "" {
		t.Errorf("legacy prefix-cache series (-want +got):\n%s", diff)
	}
}

func TestSerialPrefill(t *testing.T) {
	// Three requests of 100 ms of prefill each, admitted together: with
	// SerialPrefill the replica prefills them one after another, so the
	// last one cannot answer before 300 ms. (Only a lower bound is
	// asserted: timers never fire early, however loaded the machine.)
	const prefill = 100 * time.Millisecond
	_, ts := start(t, vllmsim.Profile{PrefillTPS: 4000, SerialPrefill: true, DefaultMaxTokens: 1})
	body := chatWith(text("a", 800), text("b", 800)) // 400 tokens at 4,000/s
	began := time.Now()
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			post(t, ts, "/v1/chat/completions", body)
		}()
	}
	wg.Wait()
	if took := time.Since(began); took < 3*prefill {
		t.Errorf("three serial prefills of %v took %v, want at least %v", prefill, took, 3*prefill)
	}
}
