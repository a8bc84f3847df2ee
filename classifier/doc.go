// Package classifier decides what kind of request this is: a label among
// the configured classes and a probability per label.
//
// The model kind asks a small model served by vLLM for a constrained choice
// among the labels in one decode step (structured_outputs.choice, or the
// older guided_choice), with logprobs, and turns the logprobs into a
// probability per label. The heuristic kind needs no model. Both sit behind
// the same cache (LRU with TTL keyed on a hash of what is sent), a shared
// in-flight call per key, a concurrency cap and a timeout with an on_error
// label.
//
// classifier is a leaf: it imports no other Switchyard package. The model
// kind reaches its pool through a [Transport] the router provides.
package classifier
