// Package vllmsim is a simulated vLLM backend: an http.Handler that speaks the
// OpenAI-compatible API of vLLM's server (chat and legacy completions, stream
// and non-stream, tool calls, constrained choice with logprobs, /v1/models,
// /health), vLLM's OpenAI Responses API and its Anthropic Messages API, and
// exposes the same vllm:* Prometheus series on /metrics, while timing its
// work honestly from a Profile.
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
// prefill takes prompt_tokens/PrefillTPS seconds (only the tokens the prefix
// cache did not hold, see below; with Profile.SerialPrefill one request at a
// time, after the prefills admitted before it), each output step takes
// 1/DecodeTPS seconds, both divided by SpeedUp. A request with n > 1 choices
// produces one token per choice per step, as vLLM's parallel sampling does, and
// holds a single slot. Streams send each token when it is produced. With both
// rates at 0 (and no Stall or SlowStart fault) no timer is created at all, so
// the simulator costs little when it measures proxy overhead. A client that
// goes away stops its request at once: it leaves the queue or frees its slot
// and is counted as cancelled. Time is real unless WithClock sets the
// clock every wait and timestamp is read from, so tests step simulated
// time by hand and never depend on the machine's speed.
//
// # Prefix cache
//
// With Profile.PrefixCacheBlocks the Server models vLLM's automatic prefix
// caching: a per-Server LRU cache of up to that many KV blocks of
// Profile.BlockSize tokens (16 by default, as in vLLM). A prompt is cut
// into blocks of 4 × BlockSize bytes (the simulator's tokenizer counts a
// token per four bytes) in the order vLLM's chat template lays it out:
// tool definitions, system prompt, then the messages' text; each block's
// hash is chained over everything before it, as vLLM's are, so requests
// sharing their tools, system prompt and first messages share their
// leading blocks. When a request gets its batch slot, its leading run of
// cached full blocks is counted as hit (at most prompt tokens − 1, as vLLM
// recomputes the last token) and prefill takes only the uncached tokens
// over PrefillTPS; then its blocks are cached, the leading ones most
// recently used. Lookups and hits, in tokens, are exported as vLLM v1
// exports them, vllm:prefix_cache_queries_total and
// vllm:prefix_cache_hits_total (vllm:gpu_prefix_cache_* with
// LegacyMetrics), and kept in Stats with the prefill time scheduled. Chat
// and completions answers report the hit in
// usage.prompt_tokens_details.cached_tokens with
// Profile.PromptTokensDetails (vLLM's --enable-prompt-tokens-details);
// the Responses API always reports it in input_tokens_details. Each prompt
// of a completions batch is looked up on its own; a request with n > 1
// choices is looked up once.
//
// # Content
//
// Generated text is deterministic: words of a fixed passage, one token per word.
// Prompt tokens are estimated as a quarter of the prompt's bytes (message
// contents, tool-call arguments and tool definitions), at least 1. A request
// that offers tools gets tool calls or text as an agent loop needs (see
// Agent loops). A request with structured_outputs.choice (or the older
// guided_choice) gets exactly one label, chosen by a Chooser; each label
// counts as a single token, so the logprobs of that token list the labels.
// With Profile.ReasoningTokens a chat text answer begins with reasoning, sent
// in the "reasoning" field as vLLM's reasoning parsers do (message or delta).
//
// Answer lengths: by default a text answer is DefaultMaxTokens long, or
// max_tokens long when the request sets it (finish_reason "length"). With
// Profile.NaturalLengths (what `switchyard sim` runs with) it ends by itself
// as a model's answer does: its natural length is drawn from a log-normal
// distribution (median 200 tokens; 1,500 when the first user message asks
// for a long answer; see NaturalLength), keyed by Profile.LengthSeed, the
// first user message's text and the number of assistant answers before it
// (so the same answer has the same length on every API and when the
// gateway continues it as a chat request), and only a smaller budget cuts it (finish_reason
// "length"): max_tokens, or without it the room left in max_model_len, as
// vLLM gives. An agent's max_tokens of 32000 is then a budget, not a length.
//
// continue_final_message continues a final assistant message that holds the
// start of an answer this simulator wrote, so prefix and continuation read as
// one answer, ending where the uncut answer would: its natural length is
// DefaultMaxTokens in all (with NaturalLengths, the conversation's natural
// length), or less when max_tokens says so (a chat answer that asked for
// more than the default is continued to the default only).
// Reasoning in such a message is written as reasoning models' chat
// templates render it: "<think>" + reasoning, and once the reasoning has
// ended "</think>" + the content so far.
//
// POST /tokenize answers as vLLM's does: a chat request (messages, tools)
// or a completion request (prompt) gets {"count", "max_model_len",
// "tokens", "token_strs": null}, the count being the simulator's
// tokenizer over what chat and completions count as the prompt; no length
// is refused.
//
// # Agent loops
//
// A request that offers tools is read as a turn of an agent loop, so that
// agents (Claude Code, Codex, SDK agent runners) finish their tasks. Its
// turn is 1 + the assistant answers its conversation holds; a tool round is
// an answer that called tools. With tool_choice "auto" it gets tool calls
// on a user turn, and text after a tool result (the last message is a chat
// "tool" message, a Responses function_call_output or
// custom_tool_call_output item, or an Anthropic user message of tool_result
// blocks only) and on any turn once the conversation has had
// DefaultMaxToolRounds (3) tool rounds: an agent's background notices,
// which come back as user messages, then get text and the loop ends. A
// forced tool_choice (chat and Responses "required" or a named function,
// Anthropic "any" or "tool") always gets calls, as vLLM's guided decoding
// guarantees; "none" gets text.
//
// Calls name distinct offered tools, chosen deterministically from the
// prompt's size and the turn (the same request always gets the same
// answer): one call, or one to three when parallel calls are allowed
// (parallel_tool_calls, true by default on chat and Responses; on Messages
// unless tool_choice.disable_parallel_tool_use) and several tools fit. They
// are carried as vLLM carries them: chat tool_calls streamed one call after
// the other with index 0, 1, …; one Responses function_call output item per
// call (output_index 0, 1, …); one Messages tool_use block per call. Each
// call's arguments are built from its JSON schema: the required properties
// (every property when none is required), by type: const, enum (first
// value), default or examples first; strings fitting the property's name
// or format (a path for path/file_path/filename, a shell command for
// command/cmd, …); numbers within minimum/maximum; booleans; arrays of one
// item; nested objects. A call's header (id and name) is one token and
// each argument piece another, so the timing and token counts follow the
// profile as text does; calls are never cut at max_tokens.
//
// A Scenario (WithScenario, or the --scenario file of `switchyard sim`,
// documented in docs/reference.md)
// scripts turns by number: turn N calls given tools with given arguments
// (or arguments built from the tool's schema), or answers given text; the
// turns it does not script get the rules above, with its max_tool_rounds
// in place of the default. The file is YAML (or JSON):
//
//	max_tool_rounds: 2        # optional; default 3
//	turns:
//	  - calls:                # turn 1: two calls in one answer
//	      - tool: Read
//	        arguments: {file_path: /tmp/notes.txt}
//	      - tool: Bash        # no arguments: built from Bash's schema
//	  - {}                    # turn 2: the simulator's own answer
//	  - text: "Done: the notes are summarized."
//
// Unknown and duplicate keys are errors, as is a turn with both text and
// calls, a call without a tool, or a negative max_tool_rounds; each error
// names the file, line and column. A scripted turn is answered as written,
// whatever the request's tools and tool_choice say; a text turn's tokens
// are its words (cut by max_tokens, finish "length").
//
// # Responses API
//
// POST /v1/responses answers as vLLM's Responses endpoint (vLLM ≥ 0.10,
// the non-Harmony path) does, on the same queue, timing, faults, metrics
// and text as chat: input as a string or items (messages of role user,
// system, developer or assistant with string or part content;
// function_call, function_call_output and reasoning items), instructions,
// flat function tools and tool_choice. The answer is a message item, or a
// function_call item whose arguments are built from the tool's parameters
// schema (several with parallel calls, see Agent loops); a last input item
// that is a function_call_output or custom_tool_call_output gets text. With
// Profile.ReasoningTokens a reasoning item comes first. The answer's length
// is DefaultMaxTokens (with NaturalLengths, its natural length), cut by
// max_output_tokens or the context left (status "incomplete"). The response object carries vLLM's fields in vLLM's order,
// echoing the request's instructions, tools, tool_choice, temperature,
// top_p, text, reasoning, metadata and the like.
//
// A stream sends "event: <type>" and "data: {…}" with a sequence_number
// from 0: response.created and response.in_progress at once, then per item
// response.output_item.added, response.content_part.added (text),
// vLLM's own response.reasoning_part.added (reasoning), the deltas
// (response.output_text.delta, response.reasoning_text.delta,
// response.function_call_arguments.delta), their .done events, and
// response.output_item.done, and last response.completed with the whole
// response and its usage. As in vLLM, streamed items carry bare random ids
// (the call id "call_…") while the response in response.completed, like a
// non-stream answer, names them "msg_…", "rs_…" and "fc_…" (call id
// "chatcmpl-tool-…").
//
// Responses with "store" (default true) are kept, as a vLLM started with
// VLLM_ENABLE_RESPONSES_API_STORE=1 keeps them (the newest 4096 here):
// GET /v1/responses/{id} returns one, and previous_response_id continues
// from one, its conversation and output text counted in the prompt. An
// unknown id is vLLM's 404 ("invalid_request_error", param "response_id").
// POST /v1/responses/{id}/cancel answers as vLLM does for a response not
// made in the background (400, or 404); vLLM has no DELETE route, so
// DELETE /v1/responses/{id} gets FastAPI's 405. Background mode is refused.
//
// # Messages API
//
// POST /v1/messages (any query string, such as ?beta=true) answers as
// vLLM's Anthropic endpoint (vLLM ≥ 0.11), which runs the request as a chat
// completion: system as a string or text blocks (and role-system
// messages), content blocks (text, tool_use, tool_result; images and
// thinking accepted and not counted), tools with input_schema,
// tool_choice, max_tokens (required). The answer's length is
// DefaultMaxTokens (with NaturalLengths, its natural length), cut by a
// smaller max_tokens (stop_reason
// "max_tokens"); a tool call is a tool_use block (stop_reason "tool_use");
// with Profile.ReasoningTokens a thinking block with a signature comes
// first. The message id is the chat id ("chatcmpl-…"), tool_use ids are
// "chatcmpl-tool-…", and the non-stream answer leaves out the null
// stop_sequence, as vLLM does. A stream sends message_start
// (usage.input_tokens, output_tokens 0), then per block
// content_block_start, content_block_delta (text_delta, thinking_delta
// then signature_delta, input_json_delta) and content_block_stop, then
// message_delta (stop_reason, a null stop_sequence; usage with both
// counts) and message_stop. vLLM sends no ping events and neither does the
// simulator.
//
// Errors come in Anthropic's envelope, {"type":"error","error":{"type",
// "message"}}, with vLLM's error type names ("NotFoundError", …); a request
// that fails schema validation (no max_tokens, a bad role or block) gets
// the OpenAI-shaped error (type "Bad Request", param "body.<field>"), as
// vLLM's validation handler answers it before the Anthropic endpoint runs. POST /v1/messages/count_tokens answers
// {"input_tokens": N, "context_management": {"original_input_tokens": N}}
// with the prompt tokens the same request would count; it is not
// inference (no queue, faults, Stats or metrics).
//
// # Faults
//
// Faults (failure rate, stalls, slow first token, cut streams, unhealthy
// /health) can be changed while serving with SetFaults; a request reads them
// once when it arrives.
package vllmsim
