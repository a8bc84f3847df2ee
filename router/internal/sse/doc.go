// Package sse frames server-sent event streams as the WHATWG EventSource
// algorithm reads them: where one event ends (CRLF, LF or CR line ends),
// the data of an event, and the edits the gateway makes to an event's data
// without re-framing the rest of it. It knows no API and imports no other
// Switchyard package; the pump in router reads replicas' streams with it.
package sse
