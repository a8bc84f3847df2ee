package router_test

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard/switchyard/discovery/dnstest"
	"github.com/switchyard/switchyard/internal/polltest"
	"github.com/switchyard/switchyard/vllmsim"
)

// loopbackSims starts one simulator on each of 127.0.0.2, 127.0.0.3, …
// (Linux routes all of 127.0.0.0/8 to lo), all on one port, and returns
// the port and each simulator's request count by IP.
func loopbackSims(t *testing.T, n int) (int, map[string]*atomic.Int64) {
	t.Helper()
	for attempt := 0; attempt < 20; attempt++ {
		first, err := net.Listen("tcp", "127.0.0.2:0")
		if err != nil {
			t.Skipf("cannot listen on 127.0.0.2: %v", err)
		}
		port := first.Addr().(*net.TCPAddr).Port
		lns := []net.Listener{first}
		for i := 1; i < n; i++ {
			ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.%d:%d", i+2, port))
			if err != nil {
				break
			}
			lns = append(lns, ln)
		}
		if len(lns) < n {
			for _, ln := range lns {
				ln.Close()
			}
			continue
		}
		counts := map[string]*atomic.Int64{}
		for i, ln := range lns {
			ip := fmt.Sprintf("127.0.0.%d", i+2)
			counts[ip] = serveSim(t, ln)
		}
		return port, counts
	}
	t.Fatal("no port free on every loopback address")
	return 0, nil
}

// serveSim serves a simulator on ln and counts its completions.
func serveSim(t *testing.T, ln net.Listener) *atomic.Int64 {
	sim := vllmsim.New(fast("org/small"))
	var n atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			n.Add(1)
		}
		sim.ServeHTTP(w, r)
	}))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return &n
}

// healthyReplicas lists the replicas of the first pool that take traffic.
func healthyReplicas(t *testing.T, gw *gateway) []string {
	var out []string
	for _, r := range getPools(t, gw).Pools[0].Replicas {
		if r.State == "healthy" {
			out = append(out, r.Name)
		}
	}
	slices.Sort(out)
	return out
}

// TestDiscoveryUnderLoad follows a DNS name whose records are added,
// removed and changed, and whose resolver goes down and returns, while
// clients send requests: no request fails, new addresses take traffic
// after their first passing probe, vanished ones take no more, and the
// last good set is kept through failures and an empty answer. (What is
// logged of each change: discoveries' TestLogEvent, once per change:
// discovery's TestDiscoveryKeepsLastGoodSet.)
func TestDiscoveryUnderLoad(t *testing.T) {
	port, counts := loopbackSims(t, 4)
	dnsSrv := dnstest.New(t)
	a := func(ips ...string) {
		var rrs []string
		for _, ip := range ips {
			rrs = append(rrs, "vllm.test. 30 IN A "+ip)
		}
		dnsSrv.Zone(rrs...)
	}
	a("127.0.0.2", "127.0.0.3")
	cfg := loadConfig(t, `
version: 1
pools:
  small:
    model: org/small
    health: {interval: 20ms, timeout: 500ms, healthy_after: 1}
    discovery: {dns: vllm.test, port: {{port}}, interval: 1s, resolver: {{dns}}}
routes:
  - {name: default, to: small}
`, map[string]string{"port": strconv.Itoa(port), "dns": dnsSrv.Addr}, nil)
	// interval 1s makes each resolution's timeout 1s (min(interval, 5s)):
	// the scheduling slack a loopback DNS answer is given on a loaded
	// machine. At 100ms, an answer delayed by a busy CPU after the
	// resolver recovered counted as a failure and was logged again.
	gw := startGateway(t, cfg)
	name := func(ip string) string { return ip + ":" + strconv.Itoa(port) }
	want := func(what string, ips ...string) {
		t.Helper()
		var names []string
		for _, ip := range ips {
			names = append(names, name(ip))
		}
		polltest.Eventually(t, 30*time.Second, what, func() bool { return slices.Equal(healthyReplicas(t, gw), names) })
	}
	want("the first set healthy", "127.0.0.2", "127.0.0.3")
	p := getPools(t, gw).Pools[0]
	if p.Discovery == nil || p.Discovery.Kind != "dns" || p.Discovery.Name != "vllm.test" || p.Discovery.LastResolved == "" {
		t.Fatalf("/admin/pools discovery = %+v", p.Discovery)
	}
	for _, r := range p.Replicas {
		if r.Source != "dns" || r.URL != "http://"+r.Name {
			t.Errorf("replica %+v: want source dns and url http://NAME", r)
		}
	}

	l := startLoad(t, gw.API.URL, 4, false)
	served := func(ip string) func() bool {
		start := counts[ip].Load()
		return func() bool { return counts[ip].Load() > start+5 }
	}
	polltest.Eventually(t, 30*time.Second, "traffic on the first set", served("127.0.0.2"))

	a("127.0.0.2", "127.0.0.3", "127.0.0.4") // added
	want("127.0.0.4 added", "127.0.0.2", "127.0.0.3", "127.0.0.4")
	polltest.Eventually(t, 30*time.Second, "traffic on 127.0.0.4", served("127.0.0.4"))

	a("127.0.0.3", "127.0.0.4") // removed
	want("127.0.0.2 removed", "127.0.0.3", "127.0.0.4")
	l.drain(t) // requests that picked 127.0.0.2 before the removal end
	gone := counts["127.0.0.2"].Load()

	a("127.0.0.4", "127.0.0.5") // changed: .3 becomes .5
	want("127.0.0.3 changed to 127.0.0.5", "127.0.0.4", "127.0.0.5")
	polltest.Eventually(t, 30*time.Second, "traffic on 127.0.0.5", served("127.0.0.5"))

	for _, m := range []dnstest.Mode{dnstest.Silent, dnstest.ServFail} {
		before := gw.MetricValue(t, "switchyard_discovery_resolutions_total", map[string]string{"pool": "small", "result": "error"})
		dnsSrv.SetMode(m)
		polltest.Eventually(t, 30*time.Second, "failed resolutions counted", func() bool {
			return gw.MetricValue(t, "switchyard_discovery_resolutions_total", map[string]string{"pool": "small", "result": "error"}) >= before+2
		})
		want("the last good set kept while the resolver fails", "127.0.0.4", "127.0.0.5")
		polltest.Eventually(t, 30*time.Second, "traffic while the resolver fails", served("127.0.0.4"))
	}
	dnsSrv.SetMode(dnstest.Answer)
	dnsSrv.Zone() // NXDOMAIN: no replica at all
	polltest.Eventually(t, 30*time.Second, "empty resolutions counted", func() bool {
		return gw.MetricValue(t, "switchyard_discovery_resolutions_total", map[string]string{"pool": "small", "result": "empty"}) >= 2
	})
	want("the last good set kept on an empty answer", "127.0.0.4", "127.0.0.5")
	if p := getPools(t, gw).Pools[0]; p.Discovery.Result != "empty" || p.Discovery.Error == "" {
		t.Errorf("/admin/pools discovery after an empty answer = %+v", p.Discovery)
	}
	if got := gw.MetricValue(t, "switchyard_discovery_replicas", map[string]string{"pool": "small"}); got != 2 {
		t.Errorf("switchyard_discovery_replicas = %g, want 2", got)
	}
	a("127.0.0.4", "127.0.0.5")
	polltest.Eventually(t, 30*time.Second, "a good resolution again", func() bool { return getPools(t, gw).Pools[0].Discovery.Result == "ok" })
	polltest.Eventually(t, 30*time.Second, "traffic after recovery", served("127.0.0.5"))
	l.end()

	if n := counts["127.0.0.2"].Load(); n != gone {
		t.Errorf("127.0.0.2 got %d requests after it left DNS", n-gone)
	}
	l.check(t)
	t.Logf("%d requests, none failed", l.ok.Load())
}

// TestDiscoveryStartsWithoutDNS: a gateway whose resolver does not answer
// at start serves the pool's 503 (no replica), retries, and takes the
// replicas once the name resolves; a reload that changes the name starts
// a new discovery and one that drops the section lists the replicas. (A
// kept section, SRV and the series' end: router/internal/discoveries.)
func TestDiscoveryStartsWithoutDNS(t *testing.T) {
	port, counts := loopbackSims(t, 2)
	dnsSrv := dnstest.New(t)
	dnsSrv.SetMode(dnstest.ServFail)
	yaml := `
version: 1
pools:
  small:
    model: org/small
    health: {interval: 20ms, timeout: 500ms, healthy_after: 1}
    discovery: {dns: {{name}}, port: {{port}}, interval: 100ms, resolver: {{dns}}}
routes:
  - {name: default, to: small}
`
	vars := map[string]string{"name": "vllm.test", "port": strconv.Itoa(port), "dns": dnsSrv.Addr}
	gw := startGateway(t, loadConfig(t, yaml, vars, nil))
	resp, body := post(t, gw.API.URL+"/v1/chat/completions", `{"model":"small","messages":[{"role":"user","content":"hi"}]}`, nil)
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("no replica yet: status %d %s, want 503", resp.StatusCode, body)
	}
	if p := getPools(t, gw).Pools[0]; len(p.Replicas) != 0 || p.Discovery.Result != "error" || p.Discovery.LastResolved != "" {
		t.Fatalf("/admin/pools before any resolution = %+v", p)
	}
	dnsSrv.Zone("vllm.test. 30 IN A 127.0.0.2", "other.test. 30 IN A 127.0.0.3")
	dnsSrv.SetMode(dnstest.Answer)
	a := "127.0.0.2:" + strconv.Itoa(port)
	polltest.Eventually(t, 30*time.Second, "the replica after the resolver recovers", func() bool { return slices.Equal(healthyReplicas(t, gw), []string{a}) })
	resp, body = post(t, gw.API.URL+"/v1/chat/completions", `{"model":"small","messages":[{"role":"user","content":"hi"}]}`, nil)
	if resp.StatusCode != http.StatusOK || counts["127.0.0.2"].Load() == 0 {
		t.Fatalf("status %d %s", resp.StatusCode, body)
	}

	// A reload naming another name resolves it at once.
	vars["name"] = "other.test"
	if _, err := gw.G.Apply(loadConfig(t, yaml, vars, nil)); err != nil {
		t.Fatal(err)
	}
	b := "127.0.0.3:" + strconv.Itoa(port)
	if p := getPools(t, gw).Pools[0]; len(p.Replicas) != 1 || p.Replicas[0].Name != b {
		t.Fatalf("after the reload: %+v", p.Replicas)
	}
	polltest.Eventually(t, 30*time.Second, "the new name's replica healthy", func() bool { return slices.Equal(healthyReplicas(t, gw), []string{b}) })

	// A reload listing the replicas instead ends the discovery and its series.
	static := strings.Replace(yaml, "discovery: {dns: {{name}}, port: {{port}}, interval: 100ms, resolver: {{dns}}}", "replicas: [{name: a, url: 'http://"+a+"'}]", 1)
	if _, err := gw.G.Apply(loadConfig(t, static, vars, nil)); err != nil {
		t.Fatal(err)
	}
	p := getPools(t, gw).Pools[0]
	if p.Discovery != nil || len(p.Replicas) != 1 || p.Replicas[0].Source != "config" {
		t.Fatalf("after the static reload: %+v", p)
	}
}
