package policy

import (
	"net"
	"strconv"
	"strings"
	"time"
)

// Discovery finds a pool's replicas in DNS instead of listing them, as
// Envoy's STRICT_DNS clusters do: every address a name resolves to is one
// replica, named after its address (http://ADDRESS:PORT). It is exclusive
// with Pool.Replicas. Discovered replicas have no nodes, so the topology
// checks (node declarations, ring contiguity, partitions, memory fit per
// node) do not apply to them.
type Discovery struct {
	// DNS is a name whose A and AAAA records are the replicas (a
	// Kubernetes headless Service: one record per ready pod). Port is then
	// required.
	DNS string `yaml:"dns,omitempty"`
	// Port is the replicas' port with DNS.
	Port int `yaml:"port,omitempty"`
	// SRV is a name whose SRV records give each replica's target and port
	// (_http._tcp.NAME for a Kubernetes Service port named http). Exclusive
	// with DNS; Port is not given.
	SRV string `yaml:"srv,omitempty"`
	// Interval is the longest time between two resolutions; a record's
	// TTL makes the next one sooner (never sooner than 1s). Default 10s.
	Interval Duration `yaml:"interval"`
	// Resolver is the DNS server asked, HOST:PORT with an IP address.
	// Default: the system's resolvers (/etc/resolv.conf, with its search
	// list and ndots).
	Resolver string `yaml:"resolver,omitempty"`
}

// DefaultDiscoveryInterval is discovery.interval's default.
const DefaultDiscoveryInterval = 10 * time.Second

// MinDiscoveryInterval is the shortest discovery.interval accepted.
const MinDiscoveryInterval = 100 * time.Millisecond

// Name is the name the discovery resolves (DNS or SRV).
func (d *Discovery) Name() string {
	if d.SRV != "" {
		return d.SRV
	}
	return d.DNS
}

// Kind is "srv" or "dns".
func (d *Discovery) Kind() string {
	if d.SRV != "" {
		return "srv"
	}
	return "dns"
}

// discovery checks pools.NAME.discovery. The pool's other keys apply to the
// discovered replicas as to listed ones and are checked by pools.
func (v *validator) discovery(at []any, pool *Pool) {
	d := pool.Discovery
	dat := appendCopy(at, "discovery")
	if len(pool.Replicas) > 0 {
		v.errf(appendCopy(at, keyOf("discovery")), "pool %q: give either replicas or discovery, not both", pool.Name)
	}
	switch {
	case d.DNS != "" && d.SRV != "":
		v.errf(appendCopy(dat, keyOf("srv")), "pool %q: discovery: give either dns or srv, not both", pool.Name)
	case d.DNS == "" && d.SRV == "":
		v.errf(dat, "pool %q: discovery: dns (a name whose A/AAAA records are the replicas) or srv (a name whose SRV records are) is required", pool.Name)
	case d.DNS != "":
		if !validDNSName(d.DNS) {
			v.errf(appendCopy(dat, "dns"), "pool %q: discovery: dns %q is not a DNS name (give a name such as vllm.inference.svc.cluster.local, without scheme or port)", pool.Name, d.DNS)
		}
		if f, given := v.number(appendCopy(dat, "port")); !given {
			v.errf(dat, "pool %q: discovery: port is required with dns (the replicas' port)", pool.Name)
		} else if f < 1 || f > 65535 || d.Port < 1 || d.Port > 65535 {
			v.errf(appendCopy(dat, "port"), "pool %q: discovery: port must be within 1..65535", pool.Name)
		}
	default:
		if !validDNSName(d.SRV) {
			v.errf(appendCopy(dat, "srv"), "pool %q: discovery: srv %q is not a DNS name (give a name such as _http._tcp.vllm.inference.svc.cluster.local)", pool.Name, d.SRV)
		}
		if _, given := v.number(appendCopy(dat, "port")); given {
			v.errf(appendCopy(dat, "port"), "pool %q: discovery: port is not used with srv (the SRV records give each replica's port); remove it", pool.Name)
		}
	}
	if d.Interval.Std() < MinDiscoveryInterval {
		v.errf(appendCopy(dat, "interval"), "pool %q: discovery: interval must be at least %s", pool.Name, MinDiscoveryInterval)
	}
	if d.Resolver != "" {
		host, port, err := net.SplitHostPort(d.Resolver)
		n, perr := strconv.Atoi(port)
		if err != nil || net.ParseIP(host) == nil || perr != nil || n < 1 || n > 65535 {
			v.errf(appendCopy(dat, "resolver"), "pool %q: discovery: resolver %q must be IP:PORT (e.g. 10.96.0.10:53 or [fd00::10]:53)", pool.Name, d.Resolver)
		}
	}
}

// validDNSName reports whether s is a DNS name: dot-separated labels of
// letters, digits, hyphens and underscores (SRV's _service._proto), each
// 1 to 63 bytes, 253 bytes in all, an optional trailing dot.
func validDNSName(s string) bool {
	s = strings.TrimSuffix(s, ".")
	if s == "" || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}
