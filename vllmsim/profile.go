package vllmsim

import (
	"errors"
	"flag"
	"fmt"
	"math"
)

// fallbackMaxTokens is the completion length used when both the request and
// Profile.DefaultMaxTokens leave it unset; it is vLLM's default for the legacy
// completions API.
const fallbackMaxTokens = 16

// Profile is how a simulated model times its work. The zero value of every
// numeric field means "instant" or "unlimited" as documented per field; only
// Model is required.
type Profile struct {
	// Model is the served model name. Requests naming another model get vLLM's
	// 404 error body; requests that omit the model field are served.
	Model string
	// PrefillTPS is the prompt tokens processed per second per request; 0 means
	// prefill is instant.
	PrefillTPS float64
	// DecodeTPS is the output tokens per second per running request (one
	// decode step per token); 0 means decoding is instant.
	DecodeTPS float64
	// MaxBatch is how many requests run at once; further requests wait in a
	// FIFO queue. 0 means unlimited.
	MaxBatch int
	// SpeedUp divides every duration derived from the profile (prefill and
	// decode, not the durations in Faults). 0 is treated as 1 (real time).
	SpeedUp float64
	// DefaultMaxTokens is the completion length when the request sets neither
	// max_tokens nor max_completion_tokens; 0 means 16. On the Responses and
	// Messages APIs it is the answer's length, which max_output_tokens or
	// max_tokens only cut when smaller (agents ask for tens of thousands).
	DefaultMaxTokens int
	// MaxModelLen is the context length reported by /v1/models. A request whose
	// prompt plus requested max_tokens exceeds it gets vLLM's 400
	// context-length error; without an explicit max_tokens the completion is
	// shortened to fit instead (finish_reason "length"). 0 means no limit.
	MaxModelLen int
	// KVCacheTokens is the KV-cache capacity in tokens. vllm:kv_cache_usage_perc
	// reports the tokens held by running requests (prompt plus output so far)
	// divided by it, capped at 1; 0 reports 0. It does not limit admission.
	KVCacheTokens int
	// LegacyMetrics exposes vllm:gpu_cache_usage_perc instead of
	// vllm:kv_cache_usage_perc, as older vLLM versions did.
	LegacyMetrics bool
	// ReasoningTokens makes a chat text answer begin with this many tokens
	// of reasoning, sent as vLLM's reasoning parser does: the "reasoning"
	// field of the message (non-stream) or of stream deltas, before the
	// content. They count as completion tokens and against max_tokens. A
	// request with chat_template_kwargs.enable_thinking false gets none.
	// 0 means no reasoning.
	ReasoningTokens int
	// PrefixCacheBlocks is the capacity of the automatic prefix cache, in
	// blocks of BlockSize tokens; 0 means no prefix cache (vLLM's
	// --no-enable-prefix-caching). With it, a request's leading blocks
	// that an earlier request on this Server already computed are not
	// prefilled again: prefill takes only the uncached tokens over
	// PrefillTPS. Blocks are evicted least recently used first. Hits and
	// lookups are counted in vllm:prefix_cache_hits and
	// vllm:prefix_cache_queries (tokens) and in Stats.
	PrefixCacheBlocks int
	// BlockSize is the KV-cache block size in tokens, the prefix cache's
	// unit (vLLM's --block-size); 0 means 16, vLLM's default.
	BlockSize int
	// SerialPrefill makes prefill compute-bound, as it is on real
	// hardware: the Server prefills one request at a time at PrefillTPS,
	// in the order they got their batch slots, so a request's first token
	// also waits for the prefills admitted before it. Decoding is not
	// slowed by prefills (vLLM's chunked prefill shares each step between
	// them; the simulator does not model steps). A request that goes away
	// before its prefill ends keeps its turn. Off, each request prefills
	// on its own at PrefillTPS, however many run at once.
	SerialPrefill bool
	// PromptTokensDetails reports the cached prompt tokens of chat and
	// completions answers in usage.prompt_tokens_details.cached_tokens, as
	// vLLM does with --enable-prompt-tokens-details (only when some tokens
	// hit; otherwise prompt_tokens_details stays null). The Responses API
	// reports them in usage.input_tokens_details.cached_tokens regardless,
	// as vLLM does.
	PromptTokensDetails bool
	// NaturalLengths makes unscripted text answers end by themselves, as
	// a model's do, instead of at a fixed length: each answer has a
	// natural length drawn from NaturalLength's distribution (keyed by
	// LengthSeed, the first user message and the assistant answers before
	// it), and the answer is that long unless
	// its budget is smaller: max_tokens (max_completion_tokens,
	// max_output_tokens), or without one the room the context leaves, as
	// vLLM gives the rest of max_model_len. finish_reason is "length" only
	// when the budget cuts the answer. A continued answer
	// (continue_final_message) ends where the uncut one would have.
	// DefaultMaxTokens is then unused. Off (the default of a Profile
	// literal): an answer is DefaultMaxTokens long, or max_tokens when
	// set (finish_reason "length"). `switchyard sim` turns it on unless
	// --natural-lengths=false.
	NaturalLengths bool
	// LengthSeed seeds the natural lengths: the same seed and the same
	// conversation give the same length, on every Server.
	LengthSeed uint64
}

// blockSize is BlockSize with its default applied.
func (p Profile) blockSize() int {
	if p.BlockSize == 0 {
		return defaultBlockSize
	}
	return p.BlockSize
}

// Validate reports every invalid field of p, joined.
func (p Profile) Validate() error {
	var errs []error
	if p.Model == "" {
		errs = append(errs, errors.New("profile: model is required"))
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"prefill-tps", p.PrefillTPS}, {"decode-tps", p.DecodeTPS}, {"speedup", p.SpeedUp}} {
		if f.v < 0 || math.IsNaN(f.v) || math.IsInf(f.v, 0) {
			errs = append(errs, fmt.Errorf("profile %q: %s %v: must be a finite number >= 0", p.Model, f.name, f.v))
		}
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"max-batch", p.MaxBatch}, {"max-tokens", p.DefaultMaxTokens}, {"max-model-len", p.MaxModelLen}, {"kv-cache-tokens", p.KVCacheTokens}, {"reasoning-tokens", p.ReasoningTokens},
		{"prefix-cache-blocks", p.PrefixCacheBlocks}, {"block-size", p.BlockSize}} {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("profile %q: %s %d: must be >= 0", p.Model, f.name, f.v))
		}
	}
	return errors.Join(errs...)
}

// RegisterFlags binds p's fields to flags on fs, using p's current values as
// the defaults: --model --prefill-tps --decode-tps --max-batch --speedup
// --max-tokens --max-model-len --kv-cache-tokens --legacy-metrics
// --reasoning-tokens --prefix-cache-blocks --block-size --serial-prefill
// --enable-prompt-tokens-details --natural-lengths --length-seed.
func (p *Profile) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&p.Model, "model", p.Model, "served model name")
	fs.Float64Var(&p.PrefillTPS, "prefill-tps", p.PrefillTPS, "prompt tokens per second per request (0 = instant)")
	fs.Float64Var(&p.DecodeTPS, "decode-tps", p.DecodeTPS, "output tokens per second per running request (0 = instant)")
	fs.IntVar(&p.MaxBatch, "max-batch", p.MaxBatch, "max requests running at once; more wait in a FIFO queue (0 = unlimited)")
	fs.Float64Var(&p.SpeedUp, "speedup", p.SpeedUp, "divide every simulated duration by this (0 = 1, real time)")
	fs.IntVar(&p.DefaultMaxTokens, "max-tokens", p.DefaultMaxTokens, "completion length when a request sets no max_tokens (0 = 16); unused with --natural-lengths")
	fs.IntVar(&p.MaxModelLen, "max-model-len", p.MaxModelLen, "context length in tokens (0 = no limit)")
	fs.IntVar(&p.KVCacheTokens, "kv-cache-tokens", p.KVCacheTokens, "KV-cache capacity in tokens for vllm:kv_cache_usage_perc (0 = report 0)")
	fs.BoolVar(&p.LegacyMetrics, "legacy-metrics", p.LegacyMetrics, "expose vllm:gpu_cache_usage_perc instead of vllm:kv_cache_usage_perc")
	fs.IntVar(&p.ReasoningTokens, "reasoning-tokens", p.ReasoningTokens, "reasoning tokens before a chat answer's content, sent as \"reasoning\" (0 = none)")
	fs.IntVar(&p.PrefixCacheBlocks, "prefix-cache-blocks", p.PrefixCacheBlocks, "automatic prefix cache capacity in blocks, LRU (0 = no prefix cache)")
	fs.IntVar(&p.BlockSize, "block-size", p.BlockSize, "KV-cache block size in tokens, the prefix cache's unit (0 = 16)")
	fs.BoolVar(&p.SerialPrefill, "serial-prefill", p.SerialPrefill, "prefill one request at a time at --prefill-tps (compute-bound), instead of each request at that rate")
	fs.BoolVar(&p.NaturalLengths, "natural-lengths", p.NaturalLengths, "unscripted answers end by themselves at a drawn natural length, cut only by max_tokens or the context left (as vLLM); false: --max-tokens long, or max_tokens")
	fs.Uint64Var(&p.LengthSeed, "length-seed", p.LengthSeed, "seed of the natural answer lengths")
	fs.BoolVar(&p.PromptTokensDetails, "enable-prompt-tokens-details", p.PromptTokensDetails, "report cached prompt tokens in usage.prompt_tokens_details (chat, completions)")
}

// QwenFlashNext2Node is Qwen3.8 Flash Next served by one replica spread over
// two DGX Spark nodes, the layout of the routed reference deployment.
//
// Decode is the published 21.71 tok/s for two directly connected nodes.
// Prefill is interpolated linearly in the node count between the published
// 2,635 tok/s on one node and 5,105 tok/s on eight: 2,635 + 2,470/7 ≈ 2,988.
// The batch limit, context length, KV capacity and default completion length
// (256, the published benchmark's output length) are this package's
// assumptions, not published figures. The prefix cache is on, as it is by
// default in vLLM v1, with vLLM's default block size (16) and room for the
// whole KV capacity (262,144 tokens = 16,384 blocks): vLLM keeps prefix
// blocks in the KV cache itself, reusing any block no running request holds.
func QwenFlashNext2Node() Profile {
	return Profile{
		Model:             "Qwen/Qwen3.8-Flash-Next",
		PrefillTPS:        2988,
		DecodeTPS:         21.71,
		MaxBatch:          16,
		SpeedUp:           1,
		DefaultMaxTokens:  256,
		MaxModelLen:       131072,
		KVCacheTokens:     262144,
		PrefixCacheBlocks: 262144 / 16,
		BlockSize:         16,
	}
}

// MiniCPM5_2B is the MiniCPM5 2B classifier model on one DGX Spark node.
//
// No figures are published for it; these are plausible estimates for a 2B
// model on one node, clearly faster than the Qwen replicas: decode 90 tok/s
// per request, prefill 12,000 tok/s, up to 64 requests at once, a 32k context
// and room for about a million KV tokens in 128 GB. The prefix cache is on,
// sized like Qwen's to the whole KV capacity (2^20 tokens = 65,536 blocks
// of 16).
func MiniCPM5_2B() Profile {
	return Profile{
		Model:             "openbmb/MiniCPM5-2B",
		PrefillTPS:        12000,
		DecodeTPS:         90,
		MaxBatch:          64,
		SpeedUp:           1,
		DefaultMaxTokens:  256,
		MaxModelLen:       32768,
		KVCacheTokens:     1 << 20,
		PrefixCacheBlocks: (1 << 20) / 16,
		BlockSize:         16,
	}
}
