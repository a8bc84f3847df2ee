// Package resume follows what a stream has sent its client, so that when
// the replica cuts it another replica can continue the answer (vLLM's
// continue_final_message) and the client sees one uninterrupted stream:
// State records the text sent and says why a stream cannot be resumed,
// builds the continuation's request, rewrites a chat continuation's chunks
// into the original stream's, and, for the Responses and Messages APIs
// (whose continuation vLLM makes only through chat completions), a
// Translator turns the continuation's chat chunks back into the client
// API's events. It runs nothing and knows no pump or Gateway: the request
// path in router feeds it events and asks for the continuation. It imports
// router/internal/wire, router/internal/translate and router/internal/sse,
// no other Switchyard package.
package resume
