package policy

import (
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard/switchyard/policy/internal/yamlnode"

	"github.com/goccy/go-yaml/ast"
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
	// Kubernetes follows a Service's EndpointSlices through the API
	// server instead of DNS (exclusive with DNS and SRV; Port, Interval
	// and Resolver are not used with it).
	Kubernetes KubernetesDiscovery `yaml:"kubernetes,omitempty"`
}

// KubernetesDiscovery follows the discovery.k8s.io/v1 EndpointSlices of a
// Service (those labelled kubernetes.io/service-name=SERVICE): its ready
// endpoints are the replicas, named after their address.
type KubernetesDiscovery struct {
	// Service is the Service's name.
	Service string `yaml:"service,omitempty"`
	// Namespace is the Service's namespace. Default: the gateway's own
	// (the service account's namespace in a pod, else the kubeconfig
	// context's, else "default").
	Namespace string `yaml:"namespace,omitempty"`
	// Port is the EndpointSlices' port: a name (the Service port's name)
	// or a number (the pods' port, the Service's targetPort).
	Port PortRef `yaml:"port,omitempty"`
	// Kubeconfig is a kubeconfig file to reach the API server with (its
	// current context). Default: the pod's service account (in-cluster).
	Kubeconfig string `yaml:"kubeconfig,omitempty"`
}

// PortRef is a port by name or by number.
type PortRef struct {
	Name   string
	Number int
}

// String is the name or the number.
func (p PortRef) String() string {
	if p.Name != "" {
		return p.Name
	}
	return strconv.Itoa(p.Number)
}

// UnmarshalYAML reads a port as a number (8000, or "8000") or a name
// (http).
func (p *PortRef) UnmarshalYAML(node ast.Node) error {
	s, ok := yamlnode.ScalarString(node)
	if !ok {
		return nodeErrorf(node, "expected a port name or number, got %s", yamlnode.Describe(node))
	}
	s = strings.TrimSpace(s)
	if n, err := strconv.Atoi(s); err == nil {
		*p = PortRef{Number: n}
		return nil
	}
	*p = PortRef{Name: s}
	return nil
}

// MarshalYAML writes the port back as its name or number.
func (p PortRef) MarshalYAML() (any, error) {
	if p.Name != "" {
		return p.Name, nil
	}
	return p.Number, nil
}

// DefaultDiscoveryInterval is discovery.interval's default.
const DefaultDiscoveryInterval = 10 * time.Second

// MinDiscoveryInterval is the shortest discovery.interval accepted.
const MinDiscoveryInterval = 100 * time.Millisecond

// Name is the name the discovery resolves (DNS or SRV), or with Kubernetes
// the Service as NAMESPACE/SERVICE (NAMESPACE empty when defaulted: the
// gateway's own).
func (d *Discovery) Name() string {
	if d.IsKubernetes() {
		return d.Kubernetes.Namespace + "/" + d.Kubernetes.Service
	}
	if d.SRV != "" {
		return d.SRV
	}
	return d.DNS
}

// IsKubernetes reports whether the section is discovery.kubernetes.
func (d *Discovery) IsKubernetes() bool { return d.Kubernetes != KubernetesDiscovery{} }

// Kind is "kubernetes", "srv" or "dns".
func (d *Discovery) Kind() string {
	if d.IsKubernetes() {
		return "kubernetes"
	}
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
	if v.written(appendCopy(dat, "kubernetes")) {
		v.kubernetes(dat, pool)
		return
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

// kubernetes checks pools.NAME.discovery.kubernetes (dat is the discovery
// section's path).
func (v *validator) kubernetes(dat []any, pool *Pool) {
	k := pool.Discovery.Kubernetes
	kat := appendCopy(dat, "kubernetes")
	for _, key := range []string{"dns", "srv", "port", "interval", "resolver"} {
		if v.written(appendCopy(dat, key)) {
			v.errf(appendCopy(dat, keyOf(key)), "pool %q: discovery: %s is for dns and srv, not used with kubernetes (its EndpointSlices give the replicas, and the API server tells every change); remove it", pool.Name, key)
		}
	}
	if k.Service == "" {
		v.errf(kat, "pool %q: discovery: kubernetes: service (the name of the Service whose EndpointSlices list the replicas) is required", pool.Name)
	} else if !dns1035Label(k.Service) {
		v.errf(appendCopy(kat, "service"), "pool %q: discovery: kubernetes: service %q is not a Service name (lower-case letters, digits and '-', starting with a letter, at most 63)", pool.Name, k.Service)
	}
	if k.Namespace != "" && !dns1123Label(k.Namespace) {
		v.errf(appendCopy(kat, "namespace"), "pool %q: discovery: kubernetes: namespace %q is not a namespace name (lower-case letters, digits and '-', at most 63)", pool.Name, k.Namespace)
	}
	switch {
	case k.Port == PortRef{}:
		v.errf(kat, "pool %q: discovery: kubernetes: port is required (the EndpointSlices' port: its name, such as http, or the pods' port number)", pool.Name)
	case k.Port.Name != "" && !ianaServiceName(k.Port.Name):
		v.errf(appendCopy(kat, "port"), "pool %q: discovery: kubernetes: port %q is neither a number nor a port name (lower-case letters, digits and '-', at most 15, with a letter)", pool.Name, k.Port.Name)
	case k.Port.Name == "" && (k.Port.Number < 1 || k.Port.Number > 65535):
		v.errf(appendCopy(kat, "port"), "pool %q: discovery: kubernetes: port must be within 1..65535", pool.Name)
	}
	if v.written(appendCopy(kat, "kubeconfig")) && strings.TrimSpace(k.Kubeconfig) == "" {
		v.errf(appendCopy(kat, "kubeconfig"), "pool %q: discovery: kubernetes: kubeconfig is empty (give a file, or remove the key to use the pod's service account)", pool.Name)
	}
}

// dns1123Label is a Kubernetes namespace name: 1 to 63 lower-case letters,
// digits and '-', starting and ending with a letter or digit.
func dns1123Label(s string) bool {
	if s == "" || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// dns1035Label is a Kubernetes Service name: a DNS-1123 label that starts
// with a letter.
func dns1035Label(s string) bool {
	return dns1123Label(s) && s[0] >= 'a' && s[0] <= 'z'
}

// ianaServiceName is a Kubernetes port name: 1 to 15 lower-case letters,
// digits and '-', at least one letter, no '-' at either end or twice in a
// row.
func ianaServiceName(s string) bool {
	if len(s) > 15 || !dns1123Label(s) || strings.Contains(s, "--") {
		return false
	}
	return strings.ContainsFunc(s, func(c rune) bool { return c >= 'a' && c <= 'z' })
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

// MarshalYAML writes a kubernetes section without the DNS keys' defaults
// (interval), which it does not take.
func (d Discovery) MarshalYAML() (any, error) {
	if d.IsKubernetes() {
		return struct {
			Kubernetes KubernetesDiscovery `yaml:"kubernetes"`
		}{d.Kubernetes}, nil
	}
	type plain Discovery
	return plain(d), nil
}
