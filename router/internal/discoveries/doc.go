// Package discoveries runs the discoveries (DNS, SRV, Kubernetes) of the
// gateway's pools across reloads: a new config keeps the running discovery
// of a pool whose discovery section did not change and makes new ones,
// resolved once at once; committing it starts the new ones' loops and
// stops those replaced or dropped. It reports a running discovery's change
// of set, which the gateway applies by rebuilding its snapshot, refuses an
// address naming the gateway's own listener (RefuseSelf), and tells what a
// request or the admin API asks of a discovered pool.
package discoveries
