// Package recorder writes the requests an operator chose to capture (the
// capture: config section: chosen API keys, or a sampled share) to
// rotating JSON Lines files, one {"path", "headers", "body"} a line, the
// format switchyard replay reads. It never blocks a request: lines wait
// in a bounded queue for one writer, and a full queue, a full disk or an
// unwritable folder drops the line, counted and logged. Only the headers
// it is told to keep are written (session ids, the API version): never
// an API key or authorization. It imports nothing of Switchyard.
package recorder
