package discovery_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/switchyard/switchyard/discovery"
	"github.com/switchyard/switchyard/internal/kubetest"
)

func ptr[T any](v T) *T { return &v }

// slice is an EndpointSlice of Service svc as the EndpointSlice controller
// writes one: the service-name label, one port, and one endpoint per
// address with the given conditions.
func slice(name, svc string, typ discoveryv1.AddressType, ports []discoveryv1.EndpointPort, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			discoveryv1.LabelServiceName: svc, discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"}},
		AddressType: typ, Ports: ports, Endpoints: eps,
	}
}

func httpPort(n int32) []discoveryv1.EndpointPort {
	return []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(n), Protocol: ptr(corev1.ProtocolTCP)}}
}

// endpoint is one pod's endpoint: ready, serving, terminating as the
// kubelet and the controller set them (nil: not set).
func endpoint(addr string, ready, serving, terminating *bool) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{Addresses: []string{addr},
		Conditions: discoveryv1.EndpointConditions{Ready: ready, Serving: serving, Terminating: terminating}}
}

var (
	yes = ptr(true)
	no  = ptr(false)
)

// TestKubernetesAddresses: the set in use is the ready endpoints that are
// not terminating, on the selected port; with none, the serving
// terminating ones; never the others, nor FQDN slices, other protocols or
// unparsable addresses.
func TestKubernetesAddresses(t *testing.T) {
	byName := discovery.KubernetesOptions{Service: "vllm", PortName: "http"}
	byNumber := discovery.KubernetesOptions{Service: "vllm", PortNumber: 8000}
	ready := endpoint("192.0.2.1", yes, yes, no)
	tests := []struct {
		name string
		o    discovery.KubernetesOptions
		eps  []*discoveryv1.EndpointSlice
		want []string
	}{
		{"ready only", byName, []*discoveryv1.EndpointSlice{slice("a", "vllm", discoveryv1.AddressTypeIPv4, httpPort(8000),
			ready,
			endpoint("192.0.2.2", nil, nil, nil),     // unset conditions: ready
			endpoint("192.0.2.3", no, no, no),        // not ready yet
			endpoint("192.0.2.4", no, yes, yes),      // terminating, still serving
			endpoint("192.0.2.5", no, no, yes),       // terminating, no longer serving
			endpoint("192.0.2.6", yes, yes, yes),     // publishNotReadyAddresses: terminating
			endpoint("not-an-address", yes, yes, no), // unparsable
			endpoint("fe80::1%eth0", yes, yes, no),   // zoned
		)}, []string{"192.0.2.1:8000", "192.0.2.2:8000"}},
		{"serving terminating when none is ready", byName, []*discoveryv1.EndpointSlice{slice("a", "vllm", discoveryv1.AddressTypeIPv4, httpPort(8000),
			endpoint("192.0.2.3", no, no, no),
			endpoint("192.0.2.4", no, yes, yes),
			endpoint("192.0.2.5", no, no, yes),
		)}, []string{"192.0.2.4:8000"}},
		{"port by number, IPv6, duplicates across slices", byNumber, []*discoveryv1.EndpointSlice{
			slice("a", "vllm", discoveryv1.AddressTypeIPv4, httpPort(8000), ready),
			slice("b", "vllm", discoveryv1.AddressTypeIPv4, httpPort(8000), ready),
			slice("c", "vllm", discoveryv1.AddressTypeIPv6, httpPort(8000), endpoint("2001:db8::1", yes, yes, no)),
			slice("d", "vllm", discoveryv1.AddressTypeIPv4, httpPort(9000), endpoint("192.0.2.9", yes, yes, no)),
		}, []string{"192.0.2.1:8000", "[2001:db8::1]:8000"}},
		{"each slice's own port number", byName, []*discoveryv1.EndpointSlice{
			slice("a", "vllm", discoveryv1.AddressTypeIPv4, httpPort(8000), ready),
			slice("b", "vllm", discoveryv1.AddressTypeIPv4, httpPort(8001), endpoint("192.0.2.2", yes, yes, no)),
		}, []string{"192.0.2.1:8000", "192.0.2.2:8001"}},
		{"skipped slices", byName, []*discoveryv1.EndpointSlice{
			slice("fqdn", "vllm", discoveryv1.AddressTypeFQDN, httpPort(8000), endpoint("vllm.example", yes, yes, no)),
			slice("udp", "vllm", discoveryv1.AddressTypeIPv4, []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(8000)), Protocol: ptr(corev1.ProtocolUDP)}}, ready),
			slice("other-name", "vllm", discoveryv1.AddressTypeIPv4, []discoveryv1.EndpointPort{{Name: ptr("metrics"), Port: ptr(int32(8000))}}, ready),
			slice("no-port", "vllm", discoveryv1.AddressTypeIPv4, []discoveryv1.EndpointPort{{Name: ptr("http")}}, ready),
			slice("bad-port", "vllm", discoveryv1.AddressTypeIPv4, httpPort(70000), ready),
		}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, discovery.KubernetesAddresses(tc.o, tc.eps)); diff != "" {
				t.Errorf("addresses (-want +got):\n%s", diff)
			}
		})
	}
}

// TestKubernetesMalformedSlices: what the API server sends is read as
// JSON, so a field of another type than EndpointSlice's (from a broken
// server or proxy) skips that slice, port or endpoint, never panics.
func TestKubernetesMalformedSlices(t *testing.T) {
	o := discovery.KubernetesOptions{Service: "vllm", PortName: "http"}
	good := map[string]any{"addressType": "IPv4",
		"ports":     []any{map[string]any{"name": "http", "port": int64(8000)}},
		"endpoints": []any{map[string]any{"addresses": []any{"192.0.2.1"}}}}
	bad := []map[string]any{
		{"addressType": 4, "ports": good["ports"], "endpoints": good["endpoints"]},
		{"addressType": "IPv4", "ports": "http", "endpoints": good["endpoints"]},
		{"addressType": "IPv4", "ports": []any{"http", map[string]any{"name": "http", "port": "8000"}}, "endpoints": good["endpoints"]},
		{"addressType": "IPv4", "ports": []any{map[string]any{"name": 1, "port": int64(8000)}}, "endpoints": good["endpoints"]},
		{"addressType": "IPv4", "ports": []any{map[string]any{"name": "http", "port": int64(8000), "protocol": 6}}, "endpoints": good["endpoints"]},
		{"addressType": "IPv4", "ports": good["ports"], "endpoints": map[string]any{"addresses": []any{"192.0.2.9"}}},
		{"addressType": "IPv4", "ports": good["ports"], "endpoints": []any{"192.0.2.9", map[string]any{"addresses": "192.0.2.9"},
			map[string]any{"addresses": []any{"192.0.2.9", 7}}}},
		{},
	}
	if got := discovery.KubernetesAddressesOf(o, append(bad, good)...); !cmp.Equal(got, []string{"192.0.2.1:8000"}) {
		t.Errorf("addresses = %v, want only the well-formed slice's 192.0.2.1:8000", got)
	}
	// A condition that is not a boolean is unknown: ready and serving
	// default to true, terminating to false.
	odd := map[string]any{"addressType": "IPv4", "ports": good["ports"], "endpoints": []any{map[string]any{
		"addresses": []any{"192.0.2.2"}, "conditions": map[string]any{"ready": "no", "terminating": "yes"}}}}
	if got := discovery.KubernetesAddressesOf(o, odd); !cmp.Equal(got, []string{"192.0.2.2:8000"}) {
		t.Errorf("addresses = %v, want 192.0.2.2:8000", got)
	}
}

// TestKubernetesNoClient: a source that cannot make a client says why in
// every lookup and in its watch, and names the Service with its namespace.
func TestKubernetesNoClient(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	missing := filepath.Join(t.TempDir(), "kubeconfig")
	garbage := filepath.Join(t.TempDir(), "garbage")
	if err := os.WriteFile(garbage, []byte("clusters: [{"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		o          discovery.KubernetesOptions
		name, want string
	}{
		{discovery.KubernetesOptions{Service: "vllm", Namespace: "inference", PortName: "http"}, "inference/vllm", "not in a pod with a service account"},
		{discovery.KubernetesOptions{Service: "vllm", PortName: "http", Kubeconfig: missing}, "default/vllm", "kubeconfig"},
		{discovery.KubernetesOptions{Service: "vllm", PortName: "http", Kubeconfig: garbage}, "default/vllm", "kubeconfig"},
	} {
		k := discovery.NewKubernetes(tc.o)
		if k.Name() != tc.name {
			t.Errorf("Name() = %s, want %s", k.Name(), tc.name)
		}
		_, _, err := k.Lookup(t.Context(), "kubernetes", k.Name(), 0)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: Lookup error %v, want one mentioning %q", tc.o, err, tc.want)
		}
		ctx, cancel := context.WithCancel(t.Context())
		var got error
		k.Watch(ctx, func(_ []string, err error) { got = err; cancel() })
		if got == nil || got.Error() != err.Error() {
			t.Errorf("Watch told %v, want %v", got, err)
		}
	}
}

// watched records a watcher's updates.
type watched struct {
	mu      sync.Mutex
	cond    *sync.Cond
	addrs   []string
	err     error
	updates int
}

func newWatched() *watched { w := &watched{}; w.cond = sync.NewCond(&w.mu); return w }

func (w *watched) update(addrs []string, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.updates++
	w.err = err
	if err == nil {
		w.addrs = addrs
	}
	w.cond.Broadcast()
}

// await waits until ok holds of the last update (the source tells every
// change; the bound is only for a broken test).
func (w *watched) await(t *testing.T, what string, ok func(addrs []string, err error) bool) {
	t.Helper()
	stop := time.AfterFunc(2*time.Minute, func() { w.mu.Lock(); w.updates = -1; w.cond.Broadcast(); w.mu.Unlock() })
	defer stop.Stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	for !ok(w.addrs, w.err) {
		if w.updates < 0 {
			t.Fatalf("%s: never seen; last update: %v, %v", what, w.addrs, w.err)
		}
		w.cond.Wait()
	}
}

func (w *watched) awaitSet(t *testing.T, want ...string) {
	t.Helper()
	w.await(t, strings.Join(want, ","), func(addrs []string, err error) bool { return err == nil && cmp.Equal(addrs, want) })
}

// TestKubernetesWatch follows a Service's EndpointSlices on a real API
// server: the first List, then every change the informer tells (a pod
// joining, turning ready, terminating, leaving, a slice deleted and
// created again), another Service's slices ignored, and a restart of the
// API server: the watch is lost (told as an error, once per failed
// attempt at most), then the set is told again.
func TestKubernetesWatch(t *testing.T) {
	srv := kubetest.Start(t)
	ctx := t.Context()
	ns := "inference"
	if _, err := srv.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	api := srv.Client.DiscoveryV1().EndpointSlices(ns)
	put := func(s *discoveryv1.EndpointSlice) {
		t.Helper()
		old, err := api.Get(ctx, s.Name, metav1.GetOptions{})
		if err == nil {
			s.ResourceVersion = old.ResourceVersion
			_, err = api.Update(ctx, s, metav1.UpdateOptions{})
		} else {
			_, err = api.Create(ctx, s, metav1.CreateOptions{})
		}
		if err != nil {
			t.Fatalf("writing EndpointSlice %s: %v", s.Name, err)
		}
	}
	put(slice("vllm-a", "vllm", discoveryv1.AddressTypeIPv4, httpPort(8000),
		endpoint("192.0.2.1", yes, yes, no), endpoint("192.0.2.2", no, no, no)))
	put(slice("other-a", "other", discoveryv1.AddressTypeIPv4, httpPort(8000), endpoint("192.0.2.50", yes, yes, no)))

	k := discovery.NewKubernetes(discovery.KubernetesOptions{Service: "vllm", Namespace: ns, PortName: "http", Kubeconfig: srv.Kubeconfig})
	addrs, ttl, err := k.Lookup(ctx, "kubernetes", k.Name(), 0)
	if err != nil || ttl >= 0 || !cmp.Equal(addrs, []string{"192.0.2.1:8000"}) {
		t.Fatalf("Lookup = %v, %v, %v; want [192.0.2.1:8000], no TTL", addrs, ttl, err)
	}
	none := discovery.NewKubernetes(discovery.KubernetesOptions{Service: "none", Namespace: ns, PortName: "http", Kubeconfig: srv.Kubeconfig})
	if _, _, err := none.Lookup(ctx, "kubernetes", none.Name(), 0); !errors.Is(err, discovery.ErrNoReadyEndpoints) ||
		!strings.Contains(err.Error(), `service "inference/none"`) {
		t.Errorf("Lookup of a Service without EndpointSlices: %v, want ErrNoReadyEndpoints naming it", err)
	}

	w := newWatched()
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); k.Watch(wctx, w.update) }()
	defer func() { cancel(); <-done }()
	w.awaitSet(t, "192.0.2.1:8000")

	// The second pod turns ready; a third joins, not ready yet.
	put(slice("vllm-a", "vllm", discoveryv1.AddressTypeIPv4, httpPort(8000),
		endpoint("192.0.2.1", yes, yes, no), endpoint("192.0.2.2", yes, yes, no), endpoint("192.0.2.3", no, no, no)))
	w.awaitSet(t, "192.0.2.1:8000", "192.0.2.2:8000")
	// The first terminates (still serving): out at once.
	put(slice("vllm-a", "vllm", discoveryv1.AddressTypeIPv4, httpPort(8000),
		endpoint("192.0.2.1", no, yes, yes), endpoint("192.0.2.2", yes, yes, no), endpoint("192.0.2.3", yes, yes, no)))
	w.awaitSet(t, "192.0.2.2:8000", "192.0.2.3:8000")
	// A second slice (the controller splits at 100 endpoints).
	put(slice("vllm-b", "vllm", discoveryv1.AddressTypeIPv4, httpPort(8000), endpoint("192.0.2.4", yes, yes, no)))
	w.awaitSet(t, "192.0.2.2:8000", "192.0.2.3:8000", "192.0.2.4:8000")
	// The first slice deleted: its endpoints leave.
	if err := api.Delete(ctx, "vllm-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	w.awaitSet(t, "192.0.2.4:8000")

	// The API server restarts: the watch fails (an error, the set kept by
	// the discovery), then the set is told again once it answers.
	srv.StopAPIServer()
	w.await(t, "the lost watch", func(_ []string, err error) bool { return err != nil })
	w.mu.Lock()
	if errors.Is(w.err, discovery.ErrNoRecords) {
		t.Errorf("a lost watch told as %v, want a watch error", w.err)
	}
	w.mu.Unlock()
	srv.StartAPIServer()
	w.awaitSet(t, "192.0.2.4:8000")
	// And it follows changes after.
	put(slice("vllm-a", "vllm", discoveryv1.AddressTypeIPv4, httpPort(8000), endpoint("192.0.2.1", yes, yes, no)))
	w.awaitSet(t, "192.0.2.1:8000", "192.0.2.4:8000")

	// Every endpoint not ready and not serving: ErrNoReadyEndpoints, the
	// API server's word (the discovery empties the set), not a lost watch.
	if err := api.Delete(ctx, "vllm-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	put(slice("vllm-b", "vllm", discoveryv1.AddressTypeIPv4, httpPort(8000), endpoint("192.0.2.4", no, no, yes)))
	w.await(t, "no ready endpoint", func(_ []string, err error) bool { return errors.Is(err, discovery.ErrNoReadyEndpoints) })
	// Every slice deleted: the same.
	put(slice("vllm-b", "vllm", discoveryv1.AddressTypeIPv4, httpPort(8000), endpoint("192.0.2.4", yes, yes, no)))
	w.awaitSet(t, "192.0.2.4:8000")
	if err := api.Delete(ctx, "vllm-b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	w.await(t, "every slice deleted", func(_ []string, err error) bool {
		return errors.Is(err, discovery.ErrNoReadyEndpoints) && strings.Contains(err.Error(), `service "inference/vllm" (port "http")`)
	})
}
