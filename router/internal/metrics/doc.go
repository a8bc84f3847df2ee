// Package metrics defines the gateway's own Prometheus series (requests,
// latency, tokens, retries, resumes, reloads, connections, ..., and the
// share controller's, read at each scrape) on an injected Registerer;
// docs/observability.md lists them. The request path in router counts
// into them. It imports no other Switchyard package.
package metrics
