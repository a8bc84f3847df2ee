// Package pools owns the replicas behind each pool and the choice of one
// replica for a request: balancers (filter → score → pick), per-replica
// in-flight counting and max_inflight admission with a bounded wait, health
// (active probes and passive ejection) and vLLM load scraping. Finding a
// pool's replicas (DNS, Kubernetes) is the discovery package's job.
//
// pools is a leaf: it imports no other Switchyard package. The router builds
// pools from the config through [Options].
package pools
