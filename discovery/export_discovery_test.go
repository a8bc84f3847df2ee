package discovery

import (
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

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

// KubernetesAddresses is the set in use that o's source takes from eps,
// given to it as the API server's JSON decodes (unstructured).
func KubernetesAddresses(o KubernetesOptions, eps []*discoveryv1.EndpointSlice) []string {
	objs := make([]*unstructured.Unstructured, len(eps))
	for i, s := range eps {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(s)
		if err != nil {
			panic(err)
		}
		objs[i] = &unstructured.Unstructured{Object: m}
	}
	return (&Kubernetes{o: o}).addresses(objs)
}

// KubernetesAddressesOf is KubernetesAddresses for slices as any JSON.
func KubernetesAddressesOf(o KubernetesOptions, objs ...map[string]any) []string {
	eps := make([]*unstructured.Unstructured, len(objs))
	for i, m := range objs {
		eps[i] = &unstructured.Unstructured{Object: m}
	}
	return (&Kubernetes{o: o}).addresses(eps)
}
