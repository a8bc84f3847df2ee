// Package admin is the admin listener: /metrics, the /admin/* API (reload,
// explain, pools, config, control, shadow, status), the probes and the
// embedded status page, with the guard that keeps browsers of other origins
// and unknown Host names out. It sees the gateway only through [View], and
// owns the shapes it shows (PoolView, ReplicaView, DiscoveryView, ...) and
// the status page's memory ([Ring]), which the request path records a
// [Sample] into. What it shows arrives as plain values ([Running],
// [ReplicaFlags], the views): it imports router/internal/wire, no other
// Switchyard package.
package admin
