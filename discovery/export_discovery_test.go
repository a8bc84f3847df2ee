package discovery

import discoveryv1 "k8s.io/api/discovery/v1"

// NewDNSLookupVia is NewDNSLookup for the system resolver with its
// servers replaced by servers (resolv.conf cannot name a port).
func NewDNSLookupVia(resolvConf string, servers ...string) (*DNSLookup, error) {
	l, err := NewDNSLookup("", resolvConf)
	if err != nil {
		return nil, err
	}
	l.servers = servers
	return l, nil
}

// KubernetesAddresses is the set in use that o's source takes from eps.
func KubernetesAddresses(o KubernetesOptions, eps []*discoveryv1.EndpointSlice) []string {
	return (&Kubernetes{o: o}).addresses(eps)
}
