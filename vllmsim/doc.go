// Package vllmsim is a simulated vLLM backend: an http.Handler that speaks the
// OpenAI-compatible API of vLLM's server (chat and legacy completions, stream
// and non-stream, tool calls, constrained choice with logprobs, /v1/models,
// /health) and exposes the same vllm:* Prometheus series on /metrics, while
// timing its work honestly from a Profile.
//
// Its job is to stand in for real replicas in Switchyard's tests, demo,
// benchmarks and the `switchyard sim` command. It imports no other Switchyard
// package.
//
// # Timing
//
// Every request that passes validation waits in a FIFO queue for one of
// Profile.MaxBatch batch slots (counted by Waiting and vllm:num_requests_waiting),
// then holds the slot (Running, vllm:num_requests_running) while it "computes":
// prefill takes prompt_tokens/PrefillTPS seconds, each output step takes
// 1/DecodeTPS seconds, both divided by SpeedUp. A request with n > 1 choices
// produces one token per choice per step, as vLLM's parallel sampling does, and
// holds a single slot. Streams send each token when it is produced. With both
// rates at 0 (and no Stall or SlowStart fault) no timer is created at all, so
// the simulator costs little when it measures proxy overhead. A client that
// goes away stops its request at once: it leaves the queue or frees its slot
// and is counted as cancelled.
//
// # Content
//
// Generated text is deterministic: words of a fixed passage, one token per word.
// Prompt tokens are estimated as a quarter of the prompt's bytes (message
// contents, tool-call arguments and tool definitions), at least 1. A request
// that offers tools gets one call to a function whose arguments are built from
// the function's JSON schema. A request with structured_outputs.choice (or the
// older guided_choice) gets exactly one label, chosen by a Chooser; each label
// counts as a single token, so the logprobs of that token list the labels.
// With Profile.ReasoningTokens a chat text answer begins with reasoning, sent
// in the "reasoning" field as vLLM's reasoning parsers do (message or delta).
//
// continue_final_message continues a final assistant message that holds the
// start of an answer this simulator wrote, so prefix and continuation read as
// one answer. Reasoning in such a message is written as reasoning models'
// chat templates render it: "<think>" + reasoning, and once the reasoning
// has ended "</think>" + the content so far.
//
// # Faults
//
// Faults (failure rate, stalls, slow first token, cut streams, unhealthy
// /health) can be changed while serving with SetFaults; a request reads them
// once when it arrives.
package vllmsim
