package vllmsim_test

import (
	"context"
	"io"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/vllmsim"
)

// grepVLLM keeps the vllm:* sample lines of a scrape, for failure messages.
func grepVLLM(scrape string) string {
	var keep []string
	for _, l := range strings.Split(scrape, "\n") {
		if strings.HasPrefix(l, "vllm:") && !strings.Contains(l, "_bucket{") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

// sample is the value of the series named exactly series in a scrape.
func sample(t *testing.T, scrape, series string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(scrape)
	if m == nil {
		t.Fatalf("no series %s in:\n%s", series, grepVLLM(scrape))
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestMetrics(t *testing.T) {
	tests := []struct {
		name     string
		legacy   bool
		cache    string
		notCache string
		prefix   string
	}{
		{"current", false, "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "vllm:prefix_cache_"},
		{"legacy", true, "vllm:gpu_cache_usage_perc", "vllm:kv_cache_usage_perc", "vllm:gpu_prefix_cache_"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sim, ts := start(t, vllmsim.Profile{LegacyMetrics: tc.legacy, DefaultMaxTokens: 4})
			post(t, ts, "/v1/chat/completions", chatHi)
			post(t, ts, "/v1/completions", `{"prompt":"abcdabcdabcd","max_tokens":2}`)
			resp, m := get(t, ts, "/metrics")
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			for _, name := range []string{
				"vllm:num_requests_running", "vllm:num_requests_waiting", tc.cache,
				"vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:request_success_total",
				"vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds",
				tc.prefix + "queries_total", tc.prefix + "hits_total",
			} {
				if !strings.Contains(m, "# TYPE "+name+" ") {
					t.Errorf("no %s in the scrape", name)
				}
			}
			if strings.Contains(m, tc.notCache) {
				t.Errorf("scrape has %s", tc.notCache)
			}
			const l = `{model_name="sim/test-model"}`
			st := sim.Stats()
			if got := sample(t, m, "vllm:prompt_tokens_total"+l); got != float64(st.PromptTokens) || got != 4 {
				t.Errorf("prompt tokens %v, stats %d, want 4", got, st.PromptTokens)
			}
			if got := sample(t, m, "vllm:generation_tokens_total"+l); got != 6 {
				t.Errorf("generation tokens %v, want 6", got)
			}
			if got := sample(t, m, `vllm:request_success_total{finished_reason="stop",model_name="sim/test-model"}`); got != 1 {
				t.Errorf("success stop %v, want 1", got)
			}
			if got := sample(t, m, `vllm:request_success_total{finished_reason="length",model_name="sim/test-model"}`); got != 1 {
				t.Errorf("success length %v, want 1", got)
			}
			if got := sample(t, m, "vllm:time_to_first_token_seconds_count"+l); got != 2 {
				t.Errorf("ttft count %v, want 2", got)
			}
			if got := sample(t, m, "vllm:e2e_request_latency_seconds_count"+l); got != 2 {
				t.Errorf("e2e count %v, want 2", got)
			}
		})
	}
}

func TestKVCacheUsage(t *testing.T) {
	// 400 prompt tokens held by a running request out of 1,000.
	sim, ts := start(t, vllmsim.Profile{DecodeTPS: 20, KVCacheTokens: 1000})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		req := `{"stream":true,"max_tokens":200,"messages":[{"role":"user","content":"` + strings.Repeat("abcd", 400) + `"}]}`
		resp := send(t, ctx, ts, "/v1/chat/completions", req)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}()
	eventually(t, 5*time.Second, "the request running", func() bool { return sim.Running() == 1 })
	_, m := get(t, ts, "/metrics")
	if got := sample(t, m, `vllm:kv_cache_usage_perc{model_name="sim/test-model"}`); got < 0.4 || got > 0.5 {
		t.Errorf("kv usage %v, want 0.4 plus a few output tokens", got)
	}
	cancel()
	<-done
	eventually(t, settle, "the request to end", func() bool { return sim.Running() == 0 })
	_, m = get(t, ts, "/metrics")
	if got := sample(t, m, `vllm:kv_cache_usage_perc{model_name="sim/test-model"}`); got != 0 {
		t.Errorf("kv usage %v after the request ended, want 0", got)
	}
}
