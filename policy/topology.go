package policy

import (
	"math"
	"slices"
	"strings"
)

// Fabrics are the valid topology.fabric values (a ring of direct
// cables, or a switch).
var Fabrics = []string{"switch", "ring"}

// topology checks replica placement against the declared nodes and fabric:
//   - every replica node is declared, and serves one replica unless
//     shared_nodes is set;
//   - ring: a replica's nodes are contiguous on the ring (the order of
//     topology.nodes), and no partitions are declared, since a ring cannot
//     express independent groups;
//   - switch: a replica's nodes sit in one partition when partitions exist.
func (v *validator) topology() {
	t := v.cfg.Topology
	if t == nil {
		for _, pool := range v.decodedPools() {
			for i, r := range pool.Replicas {
				if len(r.Nodes) > 0 {
					v.errf(p("pools", pool.Name, "replicas", i, "nodes"), "pool %q: replica %q names nodes but there is no topology section declaring them", pool.Name, r.Name)
				}
			}
		}
		return
	}
	index, partOf := v.topologyNodes(t)
	v.topologyReplicas(t, index, partOf)
}

// topologyNodes checks the topology's own section and returns each node's
// ring position and partition.
func (v *validator) topologyNodes(t *Topology) (index map[string]int, partOf map[string]string) {
	at := p("topology")
	if !slices.Contains(Fabrics, t.Fabric) {
		v.errf(appendCopy(at, "fabric"), "topology: unknown fabric %q (known: %s)", t.Fabric, strings.Join(Fabrics, ", "))
	}
	index = map[string]int{}
	for i, n := range t.Nodes {
		if _, dup := index[n]; dup {
			v.errf(p("topology", "nodes", i), "topology: duplicate node %q", n)
		}
		index[n] = i
	}
	if len(t.Nodes) == 0 {
		v.errf(at, "topology: nodes must list at least one node")
	}
	if t.MemoryUtilization <= 0 || t.MemoryUtilization > 1 {
		v.errf(appendCopy(at, "memory_utilization"), "topology: memory_utilization must be within (0, 1]")
	}
	partOf = map[string]string{}
	if t.Fabric == "ring" && len(t.Partitions) > 0 {
		v.errf(appendCopy(at, keyOf("partitions")), "topology: a ring cannot be split into independent partitions; use fabric: switch")
	}
	for i, part := range t.Partitions {
		for j, n := range part.Nodes {
			path := p("topology", "partitions", i, "nodes", j)
			if _, ok := index[n]; !ok {
				v.errf(path, "topology: partition %q: node %q is not declared in topology.nodes", part.Name, n)
			} else if other, dup := partOf[n]; dup {
				v.errf(path, "topology: node %q is in partitions %q and %q", n, other, part.Name)
			}
			partOf[n] = part.Name
		}
	}
	return index, partOf
}

// topologyReplicas checks each replica's nodes: declared, not shared unless
// allowed, enough memory, and placed as the fabric needs.
func (v *validator) topologyReplicas(t *Topology, index map[string]int, partOf map[string]string) {
	owner := map[string]string{}
	// load is the model memory each node holds (a replica's need shared
	// equally over its nodes), checked against node_memory when nodes are
	// shared.
	load := map[string]float64{}
	fits := true
	usable := float64(t.NodeMemory) * t.MemoryUtilization
	defer func() {
		if !fits || !t.SharedNodes || t.NodeMemory == 0 {
			return
		}
		for i, n := range t.Nodes {
			if load[n] > usable {
				v.errf(p("topology", "nodes", i), "topology: node %q holds %s of model memory from the replicas sharing it, over the %s vLLM may use of it", n, ByteSize(load[n]).Human(), ByteSize(usable).Human())
			}
		}
	}()
	for _, pool := range v.decodedPools() {
		for i, r := range pool.Replicas {
			rat := p("pools", pool.Name, "replicas", i, "nodes")
			declared := true
			for j, n := range r.Nodes {
				if _, ok := index[n]; !ok {
					v.errf(appendCopy(rat, j), "pool %q: replica %q: node %q is not declared in topology.nodes", pool.Name, r.Name, n)
					declared = false
					continue
				}
				if o, taken := owner[n]; taken && !t.SharedNodes {
					v.errf(appendCopy(rat, j), "pool %q: replica %q: node %q already serves replica %s (set topology.shared_nodes: true to allow sharing)", pool.Name, r.Name, n, o)
				}
				owner[n] = pool.Name + "/" + r.Name
			}
			if !declared {
				continue
			}
			if need := pool.MemoryNeed(); need > 0 && usable > 0 && len(r.Nodes) > 0 {
				for _, n := range r.Nodes {
					load[n] += float64(need) / float64(len(r.Nodes))
				}
				if have := float64(len(r.Nodes)) * usable; have < float64(need) {
					v.errf(p("pools", pool.Name, "replicas", i), "pool %q: replica %q: its model needs %s (%s) but its %d node(s) give vLLM %s (%s each at memory_utilization %g): give it at least %d nodes",
						pool.Name, r.Name, need.Human(), pool.memorySource(), len(r.Nodes), ByteSize(have).Human(), t.NodeMemory.Human(),
						t.MemoryUtilization, int(math.Ceil(float64(need)/usable)))
					fits = false
				}
			}
			if len(r.Nodes) >= 2 {
				v.replicaFabric(t, pool.Name, r.Name, r.Nodes, rat, index, partOf)
			}
		}
	}
}

// replicaFabric checks that a replica's nodes sit where the fabric needs
// them: contiguous on a ring, in one partition of a partitioned switch.
func (v *validator) replicaFabric(t *Topology, pool, name string, nodes []string, rat []any, index map[string]int, partOf map[string]string) {
	switch t.Fabric {
	case "ring":
		if !contiguousOnRing(nodes, index, len(t.Nodes)) {
			v.errf(rat, "pool %q: replica %q: nodes %v are not contiguous on the ring (ring order: %s)", pool, name, nodes, strings.Join(t.Nodes, " → "))
		}
	case "switch":
		if len(t.Partitions) == 0 {
			return
		}
		first := partOf[nodes[0]]
		if first == "" {
			v.errf(rat, "pool %q: replica %q: node %q is in no partition; with partitions declared, a replica's nodes must sit in one", pool, name, nodes[0])
			return
		}
		for _, n := range nodes[1:] {
			if partOf[n] != first {
				v.errf(rat, "pool %q: replica %q: nodes %v span partitions (%q and %q); a replica's nodes must sit in one partition", pool, name, nodes, first, partOf[n])
				break
			}
		}
	}
}

// contiguousOnRing reports whether nodes occupy consecutive ring positions
// (in any order, wrapping around).
func contiguousOnRing(nodes []string, index map[string]int, size int) bool {
	if len(nodes) >= size {
		return true
	}
	on := make([]bool, size)
	for _, n := range nodes {
		on[index[n]] = true
	}
	// Contiguous (cyclically) iff there is exactly one place where an
	// occupied position follows an empty one.
	starts := 0
	for i := range size {
		if on[i] && !on[(i+size-1)%size] {
			starts++
		}
	}
	return starts == 1
}
