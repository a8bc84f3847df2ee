// Package pump copies one SSE stream from a replica to the client as it
// arrives: complete events are written and flushed at once, byte for byte,
// but for what the gateway must change (the usage it asked for on the
// client's behalf, the model name with rewrite_response_model, the
// Responses API's response ids and vLLM's per-turn usage arrays, and calls
// to Responses custom tools, and invalid UTF-8, which becomes U+FFFD),
// and drops what a replica sends after the answer (or a part of it) ended
// (ended.go). On the way it reads the first token, usage
// and the terminal event, bounds writes to a slow client, tells the
// upstream clock of progress, and feeds a stream being followed for resume
// (router/internal/resume), relaying a continuation's translated events.
// It imports router/internal/{sse,wire,translate,resume,upstream}, never
// router.
package pump
