// Package metrics defines the gateway's own Prometheus series (requests,
// latency, tokens, retries, resumes, reloads, connections, ..., and the
// share controller's and the replicas', read at each scrape) on an
// injected Registerer; docs/observability.md lists them. The request path
// in router counts into them. It imports pools (for the replica gauges),
// no other Switchyard package.
package metrics
