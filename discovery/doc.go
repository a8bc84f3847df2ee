// Package discovery finds a pool's replicas and keeps its set in step with
// their source: DNS A/AAAA or SRV records (DNSLookup, StdLookup), or a
// Kubernetes Service's discovery.k8s.io/v1 EndpointSlices through
// client-go (Kubernetes), followed by a Discovery that keeps the last good
// set when the source fails. The set reaches pools as []pools.ReplicaSpec.
//
// It imports pools (for ReplicaSpec), no other Switchyard package; only
// router imports it.
package discovery
