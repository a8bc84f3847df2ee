package router_test

import (
	"encoding/json"
	"net"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/polltest"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/switchyard/switchyard/internal/kubetest"
	"github.com/switchyard/switchyard/pools"
	"github.com/switchyard/switchyard/router"
	"github.com/switchyard/switchyard/vllmsim"
)

// emptiedSlice is Service vllm's EndpointSlice with one endpoint per
// address (HOST), ready, on port.
func emptiedSlice(name string, port int32, addrs ...string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "inference", Labels: map[string]string{
			discoveryv1.LabelServiceName: "vllm", discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptrTo("http"), Port: ptrTo(port), Protocol: ptrTo(corev1.ProtocolTCP)}},
	}
	for _, a := range addrs {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a},
			Conditions: discoveryv1.EndpointConditions{Ready: ptrTo(true), Serving: ptrTo(true), Terminating: ptrTo(false)}})
	}
	return s
}

// emptiedConfig is a gateway on Service inference/vllm through kubeconfig.
func emptiedConfig(t *testing.T, kubeconfig string) string {
	path := filepath.Join(t.TempDir(), "switchyard.yaml")
	writeFile(t, path, `
version: 1
pools:
  small:
    model: org/small
    health: {interval: 20ms, timeout: 500ms, healthy_after: 1}
    discovery:
      kubernetes: {service: vllm, namespace: inference, port: http, kubeconfig: `+strconv.Quote(kubeconfig)+`}
routes:
  - {name: default, to: small}
`)
	return path
}

// askEmptied sends one request and returns its status and error code.
func askEmptied(t *testing.T, gw *gateway) (int, string, string) {
	t.Helper()
	resp, body := post(t, gw.API.URL+"/v1/chat/completions", `{"model":"auto","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`, nil)
	var e struct {
		Error struct{ Code, Message string }
	}
	_ = json.Unmarshal(body, &e)
	return resp.StatusCode, e.Error.Code, e.Error.Message
}

// TestKubernetesServiceEmptied (on the fake API server, which needs no
// binary): when the API server lists no endpoint for the Service, the pool
// is empty and a request gets 503 no_replica_available naming the Service;
// a lost watch keeps the set; a pod listed again takes traffic again.
func TestKubernetesServiceEmptied(t *testing.T) {
	fs := kubetest.StartSlices(t, "inference")
	sim := httptest.NewServer(vllmsim.New(vllmsim.Profile{Model: "org/small", DefaultMaxTokens: 2}))
	defer sim.Close()
	host, portText, _ := net.SplitHostPort(sim.Listener.Addr().String())
	port, _ := strconv.Atoi(portText)
	replica := net.JoinHostPort(host, portText)
	fs.Put(emptiedSlice("vllm-a", int32(port), host))

	cfg, err := router.LoadConfig(emptiedConfig(t, fs.Kubeconfig))
	if err != nil {
		t.Fatal(err)
	}
	gw := startGateway(t, cfg)
	healthy := func(what string, want ...string) {
		t.Helper()
		polltest.Eventually(t, 30*time.Second, what, func() bool { return strings.Join(healthyReplicas(t, gw), ",") == strings.Join(want, ",") })
	}
	healthy("the replica listed", replica)
	if code, _, msg := askEmptied(t, gw); code != 200 {
		t.Fatalf("with a replica: %d %s", code, msg)
	}

	fs.Delete("vllm-a")
	polltest.Eventually(t, 30*time.Second, "the pool emptied", func() bool { return len(getPools(t, gw).Pools[0].Replicas) == 0 })
	code, errCode, msg := askEmptied(t, gw)
	const why = `service "inference/vllm" (port "http"): no ready or serving endpoint on the port in its EndpointSlices`
	if code != 503 || errCode != "no_replica_available" || !strings.Contains(msg, why) {
		t.Errorf("with the Service emptied: %d %s %q, want 503 no_replica_available naming the Service", code, errCode, msg)
	}
	d := getPools(t, gw).Pools[0].Discovery
	if d == nil || d.Result != "empty" || len(d.Addresses) != 0 || d.Error != why {
		t.Errorf("/admin/pools discovery with the Service emptied: %+v", d)
	}
	if logs := gw.Logs.String(); !strings.Contains(logs, "discovery: the Service lists no ready or serving endpoint; the pool has no replica") {
		t.Errorf("the emptied pool is not logged:\n%s", logs)
	}

	fs.Put(emptiedSlice("vllm-a", int32(port), host))
	healthy("the replica listed again", replica)
	if code, _, msg := askEmptied(t, gw); code != 200 {
		t.Errorf("listed again: %d %s", code, msg)
	}

	// A lost watch keeps the set: requests still reach the replica.
	fs.Break()
	polltest.Eventually(t, 30*time.Second, "the lost watch in /admin/pools", func() bool {
		d := getPools(t, gw).Pools[0].Discovery
		return d.Result == "error" && d.Error != ""
	})
	healthy("the set kept while the API server is down", replica)
	if code, _, msg := askEmptied(t, gw); code != 200 {
		t.Errorf("while the API server is down: %d %s", code, msg)
	}
}

// TestKubernetesServiceEmptiedAPIServer is TestKubernetesServiceEmptied on
// a real API server (skipped without one; see internal/kubetest): every
// slice deleted, or every pod not ready, empties the pool (503 naming the
// Service); the API server stopped keeps the set.
func TestKubernetesServiceEmptiedAPIServer(t *testing.T) {
	srv := kubetest.Start(t)
	port, _ := loopbackSims(t, 1) // 127.0.0.2, listed as 192.0.2.2
	if _, err := srv.Client.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "inference"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	es := &endpointSlices{t: t, srv: srv, ns: "inference", port: int32(port)}
	es.put("vllm-a", map[int]podState{2: ready})
	cfg, err := router.LoadConfig(emptiedConfig(t, srv.Kubeconfig))
	if err != nil {
		t.Fatal(err)
	}
	tr := pools.NewTransport(2 * time.Second)
	tr.DialContext = testNetDialer()
	gw := startGateway(t, cfg, func(o *router.Options) { o.Transport = tr })
	replica := "192.0.2.2:" + strconv.Itoa(port)
	healthy := func(what string, want ...string) {
		t.Helper()
		polltest.Eventually(t, 60*time.Second, what, func() bool { return strings.Join(healthyReplicas(t, gw), ",") == strings.Join(want, ",") })
	}
	empty := func(what string) {
		t.Helper()
		polltest.Eventually(t, 60*time.Second, what, func() bool { return len(getPools(t, gw).Pools[0].Replicas) == 0 })
		code, errCode, msg := askEmptied(t, gw)
		if code != 503 || errCode != "no_replica_available" || !strings.Contains(msg, `service "inference/vllm" (port "http")`) {
			t.Errorf("%s: %d %s %q, want 503 no_replica_available naming the Service", what, code, errCode, msg)
		}
	}
	healthy("the pod listed", replica)
	if code, _, msg := askEmptied(t, gw); code != 200 {
		t.Fatalf("with a pod: %d %s", code, msg)
	}
	es.delete("vllm-a")
	empty("every slice deleted")
	es.put("vllm-a", map[int]podState{2: notReady})
	empty("the pod listed, not ready")
	es.put("vllm-a", map[int]podState{2: ready})
	healthy("the pod ready again", replica)

	srv.StopAPIServer()
	polltest.Eventually(t, 60*time.Second, "the lost watch in /admin/pools", func() bool { return getPools(t, gw).Pools[0].Discovery.Result == "error" })
	healthy("the set kept while the API server is down", replica)
	if code, _, msg := askEmptied(t, gw); code != 200 {
		t.Errorf("while the API server is down: %d %s", code, msg)
	}
	srv.StartAPIServer()
	polltest.Eventually(t, 60*time.Second, "the watch back", func() bool { return getPools(t, gw).Pools[0].Discovery.Result == "ok" })
}
