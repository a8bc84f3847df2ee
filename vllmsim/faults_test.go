package vllmsim_test

import (
	"context"
	"errors"
	"flag"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard/switchyard/vllmsim"
)

const chatHi = `{"messages":[{"role":"user","content":"hi"}]}`

func TestBatchLimitQueues(t *testing.T) {
	// 100 tokens at 100 tok/s: each request would hold its slot a second.
	sim, ts := start(t, vllmsim.Profile{MaxBatch: 1, DecodeTPS: 100})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	body := `{"max_tokens":100,"messages":[{"role":"user","content":"hi"}]}`

	first := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/v1/chat/completions", strings.NewReader(body))
		resp, err := ts.Client().Do(req)
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		first <- err
	}()
	eventually(t, 5*time.Second, "the first request running", func() bool { return sim.Running() == 1 })

	secondCtx, cancelSecond := context.WithCancel(ctx)
	second := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(secondCtx, http.MethodPost, ts.URL+"/v1/chat/completions", strings.NewReader(body))
		resp, err := ts.Client().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		second <- err
	}()
	eventually(t, 5*time.Second, "the second request waiting", func() bool { return sim.Waiting() == 1 })
	if got := sim.Running(); got != 1 {
		t.Errorf("Running() = %d with MaxBatch 1", got)
	}
	if _, m := get(t, ts, "/metrics"); !strings.Contains(m, `vllm:num_requests_waiting{model_name="sim/test-model"} 1`) ||
		!strings.Contains(m, `vllm:num_requests_running{model_name="sim/test-model"} 1`) {
		t.Errorf("metrics do not show 1 running and 1 waiting:\n%s", grepVLLM(m))
	}

	// A client that gives up while queued leaves the queue.
	cancelSecond()
	if err := <-second; !errors.Is(err, context.Canceled) {
		t.Errorf("second request: %v, want context.Canceled", err)
	}
	eventually(t, settle, "the queue to empty", func() bool { return sim.Waiting() == 0 })
	eventually(t, settle, "the queued request counted cancelled", func() bool { return sim.Stats().Cancelled == 1 })
	if got := sim.Running(); got != 1 {
		t.Errorf("Running() = %d after the queued request left, want 1", got)
	}
	cancel()
	<-first
	eventually(t, settle, "the slot to be released", func() bool { return sim.Running() == 0 })
}

func TestBatchFIFO(t *testing.T) {
	// Three requests, one slot: they finish in arrival order.
	sim, ts := start(t, vllmsim.Profile{MaxBatch: 1, DecodeTPS: 100})
	order := make(chan int, 3)
	for i := range 3 {
		go func() {
			resp := send(t, context.Background(), ts, "/v1/chat/completions", `{"max_tokens":20,"messages":[{"role":"user","content":"hi"}]}`)
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			order <- i
		}()
		eventually(t, 5*time.Second, "the request to arrive", func() bool { return sim.Running()+sim.Waiting() == i+1 })
	}
	for want := range 3 {
		if got := <-order; got != want {
			t.Errorf("request %d finished at position %d", got, want)
		}
	}
}

func TestDisconnectMidStream(t *testing.T) {
	sim, ts := start(t, vllmsim.Profile{DecodeTPS: 50, KVCacheTokens: 1000})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp := send(t, ctx, ts, "/v1/chat/completions", `{"stream":true,"max_tokens":500,"messages":[{"role":"user","content":"hi"}]}`)
	defer resp.Body.Close()
	buf := make([]byte, 1)
	if _, err := resp.Body.Read(buf); err != nil {
		t.Fatalf("reading the first byte: %v", err)
	}
	eventually(t, settle, "the stream running", func() bool { return sim.Running() == 1 })
	cancel()
	eventually(t, settle, "the slot released after the disconnect", func() bool { return sim.Running() == 0 })
	eventually(t, settle, "the request counted cancelled", func() bool { return sim.Stats().Cancelled == 1 })
	st := sim.Stats()
	if st.Completed != 0 || st.Failed != 0 || st.CompletionTokens >= 500 {
		t.Errorf("stats %+v: want only a cancelled, unfinished request", st)
	}
	if _, m := get(t, ts, "/metrics"); !strings.Contains(m, `vllm:kv_cache_usage_perc{model_name="sim/test-model"} 0`) ||
		!strings.Contains(m, `vllm:request_success_total{finished_reason="abort",model_name="sim/test-model"} 1`) {
		t.Errorf("metrics after the disconnect:\n%s", grepVLLM(m))
	}
}

// TestTimingIsHonest: a chat stream keeps the profile's schedule, on a
// fake clock: headers at once, the first token after prefill, one token
// per decode step.
func TestTimingIsHonest(t *testing.T) {
	clock := newFakeClock()
	_, ts := start(t, vllmsim.Profile{PrefillTPS: 2000, DecodeTPS: 200, SpeedUp: 2}, clock.option())
	body := `{"stream":true,"max_tokens":20,"messages":[{"role":"user","content":"` + strings.Repeat("abcd", 400) + `"}]}`
	s := runTimed(t, clock, ts, "/v1/chat/completions", body, 0)
	checkSchedule(t, ts, s)
	if n := countPrefix(s.lines, `data: {"id"`); n != 1+20+1 || s.lines[len(s.lines)-1] != "data: [DONE]" {
		t.Errorf("%d chunks (%q…): want the role, 20 tokens, the finish and [DONE]", n, s.lines[0])
	}
}

// TestSlowStartAndStall, on a fake clock: slow_start delays the first
// token by exactly its time; stall holds a request, before any answer,
// until the client gives up.
func TestSlowStartAndStall(t *testing.T) {
	clock := newFakeClock()
	sim, ts := start(t, vllmsim.Profile{}, clock.option())
	sim.SetFaults(vllmsim.Faults{SlowStart: 60 * time.Millisecond})
	s := runTimed(t, clock, ts, "/v1/chat/completions", `{"stream":true,"max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`, 0)
	if len(s.waits) == 0 || s.waits[0] != 60*time.Millisecond {
		t.Errorf("waits %v: want the 60ms slow start first", s.waits)
	}
	if n := countPrefix(s.lines, `data: {"id"`); n < 2 || s.lines[len(s.lines)-1] != "data: [DONE]" {
		t.Errorf("slow-started stream %q: want its chunks and [DONE]", s.lines)
	}

	sim.SetFaults(vllmsim.Faults{Stall: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/v1/chat/completions", strings.NewReader(chatHi))
		resp, err := ts.Client().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	if d, _ := clock.next(t, nil); d != time.Hour {
		t.Fatalf("the stalled request waits %v, want the 1h stall", d)
	}
	select {
	case err := <-errc:
		t.Fatalf("the stalled request was answered (err %v) while the clock stood still", err)
	default:
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("stalled request: %v, want the client's cancel", err)
	}
	eventually(t, 10*time.Second, "the stalled request counted cancelled", func() bool { return sim.Stats().Cancelled == 1 })
	if got := sim.Faults(); got.Stall != time.Hour {
		t.Errorf("Faults() = %+v", got)
	}
}

func TestFailPercent(t *testing.T) {
	sim, ts := start(t, vllmsim.Profile{})
	tests := []struct {
		name       string
		faults     vllmsim.Faults
		wantStatus int
		wantType   string
	}{
		{"default status", vllmsim.Faults{FailPercent: 100}, 500, "InternalServerError"},
		{"rate limited", vllmsim.Faults{FailPercent: 100, FailStatus: 429}, 429, "RateLimitError"},
		{"unavailable", vllmsim.Faults{FailPercent: 100, FailStatus: 503}, 503, "ServiceUnavailableError"},
		{"off", vllmsim.Faults{}, 200, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sim.SetFaults(tc.faults)
			for _, stream := range []string{"false", "true"} {
				resp, b := post(t, ts, "/v1/chat/completions", `{"stream":`+stream+`,"messages":[{"role":"user","content":"hi"}]}`)
				if resp.StatusCode != tc.wantStatus {
					t.Fatalf("stream %s: status %d, want %d", stream, resp.StatusCode, tc.wantStatus)
				}
				if tc.wantType != "" {
					if e := decode[errorBody](t, b).Error; e.Type != tc.wantType || e.Code != tc.wantStatus {
						t.Errorf("error body %s", b)
					}
				}
			}
		})
	}

	sim.SetFaults(vllmsim.Faults{FailPercent: 50})
	failed := 0
	for range 200 {
		if resp, _ := post(t, ts, "/v1/completions", `{"prompt":"x","max_tokens":1}`); resp.StatusCode != http.StatusOK {
			failed++
		}
	}
	if failed < 60 || failed > 140 {
		t.Errorf("%d of 200 failed at 50%%", failed)
	}
}

func TestCutAfterChunks(t *testing.T) {
	sim, ts := start(t, vllmsim.Profile{})
	sim.SetFaults(vllmsim.Faults{CutAfterChunks: 3})

	resp := send(t, context.Background(), ts, "/v1/chat/completions", `{"stream":true,"max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`)
	events, done, err := readSSE(resp.Body)
	resp.Body.Close()
	if done || len(events) != 3 || err == nil {
		t.Errorf("cut stream: %d events, done %v, err %v: want 3 events, no [DONE] and a read error", len(events), done, err)
	}

	resp = send(t, context.Background(), ts, "/v1/chat/completions", chatHi)
	_, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("cut body: read error %v, want unexpected EOF", err)
	}

	// A stream shorter than the cut is untouched: 4 events and [DONE].
	sim.SetFaults(vllmsim.Faults{CutAfterChunks: 5})
	resp = send(t, context.Background(), ts, "/v1/chat/completions", `{"stream":true,"max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`)
	events, done, err = readSSE(resp.Body)
	resp.Body.Close()
	if !done || len(events) != 4 || err != nil {
		t.Errorf("short stream: %d events, done %v, err %v", len(events), done, err)
	}

	eventually(t, settle, "the cut requests counted failed", func() bool { return sim.Stats().Failed == 2 })
	if st := sim.Stats(); st.Completed != 1 || sim.Running() != 0 {
		t.Errorf("stats %+v, running %d", st, sim.Running())
	}
}

func TestStatsAddUp(t *testing.T) {
	sim, ts := start(t, vllmsim.Profile{DefaultMaxTokens: 3})
	post(t, ts, "/v1/chat/completions", chatHi)
	post(t, ts, "/v1/completions", `{"prompt":"abcdabcd","n":2}`)
	post(t, ts, "/v1/chat/completions", `{"model":"nope","messages":[]}`)
	want := vllmsim.Stats{Requests: 3, Completed: 2, Failed: 1, PromptTokens: 1 + 2, CompletionTokens: 3 + 6}
	if diff := cmp.Diff(want, sim.Stats()); diff != "" {
		t.Errorf("stats (-want +got):\n%s", diff)
	}
}

func TestRegisterFlags(t *testing.T) {
	var p vllmsim.Profile
	var f vllmsim.Faults
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	p.RegisterFlags(fs)
	f.RegisterFlags(fs)
	err := fs.Parse([]string{
		"--model", "m", "--prefill-tps", "1000.5", "--decode-tps", "20", "--max-batch", "8", "--speedup", "10",
		"--max-tokens", "32", "--max-model-len", "4096", "--kv-cache-tokens", "65536", "--legacy-metrics",
		"--prefix-cache-blocks", "4096", "--block-size", "32", "--enable-prompt-tokens-details", "--serial-prefill",
		"--fail-percent", "12.5", "--fail-status", "503", "--stall", "2s", "--slow-start", "150ms", "--cut-after", "4", "--unhealthy",
	})
	if err != nil {
		t.Fatal(err)
	}
	wantP := vllmsim.Profile{Model: "m", PrefillTPS: 1000.5, DecodeTPS: 20, MaxBatch: 8, SpeedUp: 10, DefaultMaxTokens: 32,
		MaxModelLen: 4096, KVCacheTokens: 65536, LegacyMetrics: true, PrefixCacheBlocks: 4096, BlockSize: 32, PromptTokensDetails: true, SerialPrefill: true}
	wantF := vllmsim.Faults{FailPercent: 12.5, FailStatus: 503, Stall: 2 * time.Second, SlowStart: 150 * time.Millisecond,
		CutAfterChunks: 4, Unhealthy: true}
	if diff := cmp.Diff(wantP, p); diff != "" {
		t.Errorf("profile (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantF, f); diff != "" {
		t.Errorf("faults (-want +got):\n%s", diff)
	}

	// Defaults come from the values already set.
	q := vllmsim.QwenFlashNext2Node()
	fs = flag.NewFlagSet("sim", flag.ContinueOnError)
	q.RegisterFlags(fs)
	if err := fs.Parse([]string{"--speedup", "50"}); err != nil {
		t.Fatal(err)
	}
	want := vllmsim.QwenFlashNext2Node()
	want.SpeedUp = 50
	if diff := cmp.Diff(want, q); diff != "" {
		t.Errorf("preset with a flag (-want +got):\n%s", diff)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		err     error
		wantErr []string // substrings, all present; none for nil
	}{
		{"qwen preset", vllmsim.QwenFlashNext2Node().Validate(), nil},
		{"minicpm preset", vllmsim.MiniCPM5_2B().Validate(), nil},
		{"bad profile", vllmsim.Profile{DecodeTPS: -1, MaxBatch: -2}.Validate(), []string{"model is required", "decode-tps -1", "max-batch -2"}},
		{"bad prefix cache", vllmsim.Profile{Model: "m", PrefixCacheBlocks: -1, BlockSize: -16}.Validate(), []string{"prefix-cache-blocks -1", "block-size -16"}},
		{"good faults", vllmsim.Faults{FailPercent: 100, FailStatus: 429}.Validate(), nil},
		{"bad faults", vllmsim.Faults{FailPercent: 101, FailStatus: 200, Stall: -1}.Validate(), []string{"fail-percent 101", "fail-status 200", "stall -1ns"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if len(tc.wantErr) == 0 {
				if tc.err != nil {
					t.Errorf("unexpected error: %v", tc.err)
				}
				return
			}
			if tc.err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(tc.err.Error(), w) {
					t.Errorf("error %q lacks %q", tc.err, w)
				}
			}
		})
	}
}
