// Package wire holds the shapes of the APIs the gateway speaks, as pure
// functions of bytes: the endpoint table, reading a request's routing
// fields, the adaptations made for vLLM, the error shapes of each API, the
// response-id codec and reading usage. Translating one API's shapes into
// another's is router/internal/translate's job. Nothing here holds state,
// does I/O beyond writing an error to a ResponseWriter, or knows a
// Gateway; how an upstream failure maps to an API error stays in router.
// It imports no other Switchyard package.
package wire
