// Package spans holds the OpenTelemetry side of the request path as pure
// functions: the attribute names (HTTP server and client spans, GenAI
// client spans, Switchyard's own), the attributes read from a request and
// from an answer or its chunks, and how a client span records a status or
// an error. The router starts and ends the spans; this package only says
// what goes on them. It imports router/internal/{sse,wire,upstream}, never
// router.
package spans
