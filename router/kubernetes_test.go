package router_test

import (
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/switchyard/switchyard/internal/kubetest"
	"github.com/switchyard/switchyard/internal/polltest"
	"github.com/switchyard/switchyard/pools"
	"github.com/switchyard/switchyard/router"
)

// testNetDialer is the test-only dial mapping of the Kubernetes tests. The
// API server refuses loopback addresses in an EndpointSlice, so the slices
// list TEST-NET-1 addresses (192.0.2.0/24, RFC 5737: documentation only,
// routed nowhere) and the gateway's upstream transport reaches 192.0.2.N
// at 127.0.0.N, same port, where the simulators listen. Any other address
// is refused: nothing leaves loopback.
func testNetDialer() func(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		rest, ok := strings.CutPrefix(host, "192.0.2.")
		if n, err := strconv.Atoi(rest); !ok || err != nil || n < 2 || n > 254 {
			return nil, fmt.Errorf("test dial mapping: %s is not a 192.0.2.N address of the test", addr)
		}
		return d.DialContext(ctx, network, net.JoinHostPort("127.0.0."+rest, port))
	}
}

// endpointSlices writes Service inference/vllm's EndpointSlices as the
// EndpointSlice controller does (the service-name and managed-by labels,
// a named port), on a real API server or, with fake set, the fake one.
type endpointSlices struct {
	t    *testing.T
	srv  *kubetest.Server
	fake *kubetest.Slices
	port int32
}

// apiSlices starts a real API server with namespace inference (the test
// is skipped without one; see internal/kubetest).
func apiSlices(t *testing.T, port int) (*kubetest.Server, *endpointSlices) {
	srv := kubetest.Start(t)
	if _, err := srv.Client.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "inference"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return srv, &endpointSlices{t: t, srv: srv, port: int32(port)}
}

type podState int

const (
	notReady    podState = iota // starting: its readiness probe has not passed
	ready                       // ready and serving
	terminating                 // deleted, still serving while it drains
)

// put writes slice name with one endpoint per pod (192.0.2.N: state).
func (e *endpointSlices) put(name string, pods map[int]podState) {
	e.t.Helper()
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "inference", Labels: map[string]string{
			discoveryv1.LabelServiceName: "vllm", discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptrTo("http"), Port: ptrTo(e.port), Protocol: ptrTo(corev1.ProtocolTCP)}},
	}
	for _, n := range slices.Sorted(maps.Keys(pods)) {
		st := pods[n]
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{"192.0.2." + strconv.Itoa(n)},
			Conditions: discoveryv1.EndpointConditions{Ready: ptrTo(st == ready), Serving: ptrTo(st != notReady), Terminating: ptrTo(st == terminating)}})
	}
	if e.fake != nil {
		e.fake.Put(s)
		return
	}
	api := e.srv.Client.DiscoveryV1().EndpointSlices("inference")
	ctx := e.t.Context()
	old, err := api.Get(ctx, name, metav1.GetOptions{})
	if err == nil {
		s.ResourceVersion = old.ResourceVersion
		_, err = api.Update(ctx, s, metav1.UpdateOptions{})
	} else {
		_, err = api.Create(ctx, s, metav1.CreateOptions{})
	}
	if err != nil {
		e.t.Fatalf("writing EndpointSlice %s: %v", name, err)
	}
}

func (e *endpointSlices) delete(name string) {
	e.t.Helper()
	if e.fake != nil {
		e.fake.Delete(name)
	} else if err := e.srv.Client.DiscoveryV1().EndpointSlices("inference").Delete(e.t.Context(), name, metav1.DeleteOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

func ptrTo[T any](v T) *T { return &v }

// kubeConfig is pool small on Service inference/vllm's port (a name or a
// number) through kubeconfig.
func kubeConfig(kubeconfig, port string) string {
	return `
version: 1
pools:
  small:
    model: org/small
    health: {interval: 20ms, timeout: 500ms, healthy_after: 1}
    discovery:
      kubernetes: {service: vllm, namespace: inference, port: ` + port + `, kubeconfig: ` + strconv.Quote(kubeconfig) + `}
routes:
  - {name: default, to: small}
`
}

// viaTestNet has the gateway reach the slices' 192.0.2.N addresses at
// the simulators (testNetDialer).
func viaTestNet(o *router.Options) {
	tr := pools.NewTransport(2 * time.Second)
	tr.DialContext = testNetDialer()
	o.Transport = tr
}

// TestKubernetesDiscoveryUnderLoad follows a Service's EndpointSlices on a
// real API server while clients send requests through the gateway: a
// rolling update of a vLLM Deployment as the EndpointSlice controller
// writes it (new pods probing, then ready; old pods terminating, then
// gone), a slice removed and written again, and the API server stopped
// and started again. No request fails; a pod takes traffic only once
// ready and after its first passing probe; a terminating pod takes no new
// request once /admin/pools shows the update; a reload keeps the informer
// unless the section changed; the lost watch keeps the set and is logged
// once.
func TestKubernetesDiscoveryUnderLoad(t *testing.T) {
	port, counts := loopbackSims(t, 5) // 127.0.0.2 … 127.0.0.6
	srv, es := apiSlices(t, port)
	es.put("vllm-abcde", map[int]podState{2: ready, 3: ready})
	gw, path := fileGateway(t, kubeConfig(srv.Kubeconfig, "http"), viaTestNet)

	name := func(n int) string { return "192.0.2." + strconv.Itoa(n) + ":" + strconv.Itoa(port) }
	want := func(what string, ns ...int) {
		t.Helper()
		var names []string
		for _, n := range ns {
			names = append(names, name(n))
		}
		polltest.Eventually(t, 60*time.Second, what, func() bool { return slices.Equal(healthyReplicas(t, gw), names) })
	}
	// told writes with put and waits until the gateway's discovery has
	// taken an update of the informer since (each is counted).
	told := func(what string, put func()) {
		t.Helper()
		ok := map[string]string{"pool": "small", "result": "ok"}
		before := gw.MetricValue(t, "switchyard_discovery_resolutions_total", ok)
		put()
		polltest.Eventually(t, 60*time.Second, what, func() bool {
			return gw.MetricValue(t, "switchyard_discovery_resolutions_total", ok) > before
		})
	}
	sim := func(n int) string { return "127.0.0." + strconv.Itoa(n) }
	served := func(n int) func() bool {
		start := counts[sim(n)].Load()
		return func() bool { return counts[sim(n)].Load() > start+5 }
	}

	want("the first set healthy", 2, 3)
	p := getPools(t, gw).Pools[0]
	if d := p.Discovery; d == nil || d.Kind != "kubernetes" || d.Name != "inference/vllm" || d.LastResolved == "" || d.Result != "ok" {
		t.Fatalf("/admin/pools discovery = %+v", p.Discovery)
	}
	for _, r := range p.Replicas {
		if r.Source != "kubernetes" || r.URL != "http://"+r.Name {
			t.Errorf("replica %+v: want source kubernetes and url http://NAME", r)
		}
	}

	l := startLoad(t, gw.API.URL, 4, false)
	polltest.Eventually(t, 60*time.Second, "traffic on the first set", served(2))

	// The rolling update (maxSurge 1, maxUnavailable 0): a new pod
	// starts (listed, not ready: no traffic), turns ready, then an old
	// one terminates, and is deleted; and again.
	told("the new pod listed, not ready", func() { es.put("vllm-abcde", map[int]podState{2: ready, 3: ready, 4: notReady}) })
	want("the new pod not taking traffic", 2, 3)
	if n := counts[sim(4)].Load(); n != 0 {
		t.Errorf("the pod not ready got %d requests", n)
	}
	es.put("vllm-abcde", map[int]podState{2: ready, 3: ready, 4: ready})
	want("the new pod ready", 2, 3, 4)
	polltest.Eventually(t, 60*time.Second, "traffic on the new pod", served(4))
	es.put("vllm-abcde", map[int]podState{2: terminating, 3: ready, 4: ready})
	want("the old pod terminating", 3, 4)
	l.drain(t) // requests that picked .2 before the update end
	gone2 := counts[sim(2)].Load()
	es.put("vllm-abcde", map[int]podState{3: ready, 4: ready})
	es.put("vllm-abcde", map[int]podState{3: ready, 4: ready, 5: notReady})
	es.put("vllm-abcde", map[int]podState{3: ready, 4: ready, 5: ready})
	want("the second new pod ready", 3, 4, 5)
	polltest.Eventually(t, 60*time.Second, "traffic on the second new pod", served(5))
	es.put("vllm-abcde", map[int]podState{3: terminating, 4: ready, 5: ready})
	want("the second old pod terminating", 4, 5)
	l.drain(t)
	gone3 := counts[sim(3)].Load()
	es.put("vllm-abcde", map[int]podState{4: ready, 5: ready})
	want("the rolling update done", 4, 5)

	// A reload that keeps the section keeps the informer (no new list:
	// the updates counted stay); one that changes it (the port by number)
	// starts another, and the set carries over either way.
	okCount := func() float64 {
		return gw.MetricValue(t, "switchyard_discovery_resolutions_total", map[string]string{"pool": "small", "result": "ok"})
	}
	before := okCount()
	if _, err := gw.G.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := okCount(); got != before {
		t.Errorf("a reload with the same discovery section listed again (%g updates, were %g)", got, before)
	}
	reloadFile(t, gw, path, kubeConfig(srv.Kubeconfig, strconv.Itoa(port)))
	if got := okCount(); got <= before {
		t.Errorf("a reload with a changed discovery section did not list again (%g updates, were %g)", got, before)
	}
	want("the set kept across reloads", 4, 5)

	// A second slice joins; the first is deleted (its pods leave) and
	// written again (they come back, probed first).
	es.put("vllm-fghij", map[int]podState{6: ready})
	want("the second slice's pod", 4, 5, 6)
	polltest.Eventually(t, 60*time.Second, "traffic on the second slice's pod", served(6))
	es.delete("vllm-abcde")
	want("the first slice deleted", 6)
	es.put("vllm-abcde", map[int]podState{4: ready, 5: ready})
	want("the first slice back", 4, 5, 6)

	// The API server goes away: the watch is lost, the set kept, traffic
	// unchanged; it comes back and changes are followed again.
	srv.StopAPIServer()
	polltest.Eventually(t, 60*time.Second, "the lost watch in /admin/pools", func() bool {
		d := getPools(t, gw).Pools[0].Discovery
		return d.Result == "error" && d.Error != ""
	})
	want("the set kept while the API server is down", 4, 5, 6)
	polltest.Eventually(t, 60*time.Second, "traffic while the API server is down", served(6))
	if got := gw.MetricValue(t, "switchyard_discovery_replicas", map[string]string{"pool": "small"}); got != 3 {
		t.Errorf("switchyard_discovery_replicas = %g, want 3", got)
	}
	srv.StartAPIServer()
	polltest.Eventually(t, 60*time.Second, "the watch back in /admin/pools", func() bool { return getPools(t, gw).Pools[0].Discovery.Result == "ok" })
	es.put("vllm-fghij", map[int]podState{6: terminating})
	want("a change after the restart", 4, 5)
	l.drain(t)
	gone6 := counts[sim(6)].Load()
	polltest.Eventually(t, 60*time.Second, "traffic after the restart", served(5))
	l.end()

	for n, gone := range map[int]int64{2: gone2, 3: gone3, 6: gone6} {
		if got := counts[sim(n)].Load(); got != gone {
			t.Errorf("192.0.2.%d got %d requests after the gateway saw it terminating", n, got-gone)
		}
	}
	l.check(t)
	if got := gw.MetricValue(t, "switchyard_discovery_resolutions_total", map[string]string{"pool": "small", "result": "error"}); got < 1 {
		t.Errorf("switchyard_discovery_resolutions_total{result=error} = %g, want the lost watch counted", got)
	}
	logs := gw.Logs.String()
	for _, line := range []string{"discovery: replica set changed", "discovery: resolution failed; keeping the last good set",
		"discovery: the name resolves again"} {
		if !strings.Contains(logs, line) {
			t.Errorf("logs lack %q", line)
		}
	}
	if n := strings.Count(logs, "discovery: resolution failed"); n != 1 {
		t.Errorf("the lost watch was logged %d times, want once (one change)", n)
	}
	t.Logf("%d requests, none failed; per simulator: .2 %d, .3 %d, .4 %d, .5 %d, .6 %d", l.ok.Load(),
		counts[sim(2)].Load(), counts[sim(3)].Load(), counts[sim(4)].Load(), counts[sim(5)].Load(), counts[sim(6)].Load())
}
