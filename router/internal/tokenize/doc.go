// Package tokenize decides whether a request's prompt fits a pool's
// context before the request is sent there or past it. The prompt
// estimate (about four bytes of JSON a token) is cheap but rough: JSON
// quoting makes it high for prose, and code or non-Latin text makes it
// low. Where it is clearly under or over a pool's context it decides; in
// the band between (the estimate and a minimal answer within 0.75 and 1.5
// of max_model_len) the pool's own tokenizer counts the prompt, with one
// call to a replica's /tokenize.
//
// It holds the rules (Decide), what the call sends (Body) and reads of
// the answer (ReadCount), which replica is asked (Pick), and how a
// replica says a prompt was too long after all (Overflow). Sending the
// call, its span and its metric are router's.
package tokenize
