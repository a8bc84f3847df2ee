// Package capacity is the capacity model of a routed cluster: how much more
// traffic it serves than a cluster of the large model alone on the same
// nodes, when a classifier sends only a share of the requests to the large
// model and the rest to a small one.
//
// Each pool completes at most replicas × batch limit / service time
// requests per second; the routed cluster saturates when the first of its
// pools does, so its throughput is the smaller over the pools of the
// pool's capacity over its share of the traffic. bench/capacity measures
// the same ratio through the real gateway; switchyard eval projects it from
// the share a labelled set would send to the large pool.
//
// capacity imports only the simulator, whose profiles time the reference
// cluster's models.
package capacity
