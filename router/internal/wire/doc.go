// Package wire holds the shapes of the APIs the gateway speaks, as pure
// functions of bytes: the endpoint table, reading a request's routing
// fields, the adaptations made for vLLM, the codec of Responses custom
// tools, the translation of Responses and Messages requests into the chat
// request vLLM continues a cut answer on (tochat_responses.go,
// tochat_messages.go), the error shapes of each API, the response-id codec
// and reading usage. Nothing here holds state, does I/O beyond writing an
// error to a ResponseWriter, or knows a Gateway; how an upstream failure
// maps to an API error stays in router. It imports router/internal/sse and
// policy (for its defaults), no other Switchyard package.
package wire
