package router_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/polltest"
	"github.com/switchyard/switchyard/vllmsim"
)

// gate is an upstream whose chat answers wait until released, so a test
// controls exactly when a request finishes.
type gate struct {
	Srv     *httptest.Server
	release chan struct{}
	once    sync.Once
	hits    atomic.Int64
}

func startGate(t *testing.T, model string) *gate {
	t.Helper()
	g := &gate{release: make(chan struct{})}
	sim := vllmsim.New(fast(model))
	g.Srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			g.hits.Add(1)
			select {
			case <-g.release:
			case <-r.Context().Done():
				return
			}
		}
		sim.ServeHTTP(w, r)
	}))
	t.Cleanup(g.Srv.Close)
	t.Cleanup(g.open)
	return g
}

func (g *gate) open() { g.once.Do(func() { close(g.release) }) }

// accessLogs returns the gateway's access log lines decoded.
func accessLogs(t *testing.T, gw *gateway) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(gw.Logs.String(), "\n") {
		if !strings.Contains(line, `"msg":"request"`) {
			continue
		}
		m := map[string]any{}
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// TestWaiterSurvivesReloadEndToEnd reproduces the lost wake-up: pool with
// max_inflight 1, request A in flight, a reload that changes only retries,
// request B queued. When A finishes B must get the slot; before the
// endpoint registry it waited out the whole queue timeout and got 503.
func TestWaiterSurvivesReloadEndToEnd(t *testing.T) {
	up := startGate(t, "m")
	gw := oneReplicaGateway(t, up.Srv.URL, ", max_inflight: 1, queue_timeout: 1m, retries: 2", "")
	url := gw.API.URL + "/v1/chat/completions"
	a := make(chan int, 1)
	go func() { resp, _ := post(t, url, chatBody("A", ""), nil); a <- resp.StatusCode }()
	polltest.Eventually(t, 5*time.Second, "A to reach the replica", func() bool { return up.hits.Load() == 1 })
	if _, err := gw.G.Apply(oneReplicaConfig(t, up.Srv.URL, ", max_inflight: 1, queue_timeout: 1m, retries: 1", "")); err != nil {
		t.Fatal(err)
	}
	b := make(chan int, 1)
	go func() { resp, _ := post(t, url, chatBody("B", ""), nil); b <- resp.StatusCode }()
	polltest.Eventually(t, 5*time.Second, "B to queue", func() bool { return adminReplicaView(t, gw, "p", "r").Waiting == 1 })
	up.open() // A finishes
	for name, ch := range map[string]chan int{"A": a, "B": b} {
		select {
		case code := <-ch:
			if code != 200 {
				t.Errorf("%s: status %d", name, code)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%s did not finish (a lost wake-up waits out the 1m queue timeout)", name)
		}
	}
}

// gatedOneSlot is a gateway on one gated replica of one slot, whose
// waiting requests give up after queueTimeout.
func gatedOneSlot(t *testing.T, queueTimeout string) (*gate, *gateway) {
	up := startGate(t, "m")
	return up, oneReplicaGateway(t, up.Srv.URL, ", max_inflight: 1, queue_timeout: "+queueTimeout, "")
}

// TestAccessLineTimes: the access line says where a request's time went:
// queue_ms, the time it waited for a replica slot (max_inflight), and
// classify_ms, the classifier's part. A request queued behind another
// logs at least the time it was seen waiting; both are within
// duration_ms. Before, a slow request's line could not tell a queue wait
// from a slow replica (issue 31's tail under attack).
func TestAccessLineTimes(t *testing.T) {
	up, gw := gatedOneSlot(t, "1m")
	url := gw.API.URL + "/v1/chat/completions"
	ids := make(chan string, 2)
	go func() { resp, _ := post(t, url, chatBody("A", ""), nil); ids <- resp.Header.Get("X-Request-Id") }()
	polltest.Eventually(t, 5*time.Second, "A to reach the replica", func() bool { return up.hits.Load() == 1 })
	go func() { resp, _ := post(t, url, chatBody("B", ""), nil); ids <- "B" + resp.Header.Get("X-Request-Id") }()
	polltest.Eventually(t, 5*time.Second, "B to queue", func() bool { return adminReplicaView(t, gw, "p", "r").Waiting == 1 })
	seen := time.Now()
	time.Sleep(30 * time.Millisecond) // B waits at least this long, however slow the machine
	waited := time.Since(seen)
	up.open()
	var a, b string
	for range 2 {
		id := <-ids
		if strings.HasPrefix(id, "B") {
			b = id[1:]
		} else {
			a = id
		}
	}
	polltest.Eventually(t, 5*time.Second, "both access lines", func() bool { return len(accessLogs(t, gw)) == 2 })
	for _, line := range accessLogs(t, gw) {
		q, ok := line["queue_ms"].(float64)
		d, _ := line["duration_ms"].(float64)
		if !ok || q < 0 || q > d {
			t.Errorf("access line %v: queue_ms %v, want 0 to duration_ms", line, line["queue_ms"])
		}
		if _, ok := line["classify_ms"]; ok {
			t.Errorf("access line %v: classify_ms without a classifier", line)
		}
		if line["request_id"] == b && q < float64(waited.Microseconds())/1000 {
			t.Errorf("B's queue_ms %v, but it was seen waiting for %v", q, waited)
		}
		if line["request_id"] != a && line["request_id"] != b {
			t.Errorf("access line %v is neither A's (%s) nor B's (%s)", line, a, b)
		}
	}

	// The classifier's call.
	cgw, _, _ := setupClassifier(t)
	resp, body := post(t, cgw.API.URL+"/v1/chat/completions", chatBody("What is the capital of Spain?", ""), nil)
	if resp.StatusCode != 200 {
		t.Fatalf("classified request: %d %s", resp.StatusCode, body)
	}
	polltest.Eventually(t, 5*time.Second, "the access line", func() bool { return len(accessLogs(t, cgw)) == 1 })
	line := accessLogs(t, cgw)[0]
	c, ok := line["classify_ms"].(float64)
	if d, _ := line["duration_ms"].(float64); !ok || c <= 0 || c > d {
		t.Errorf("classified request's access line %v: classify_ms %v, want in (0, duration_ms]", line, line["classify_ms"])
	}
}

// TestHonestRetryCount: with two replicas answering 500, the one real
// retry is counted once, in the metric and the access line. (A lone
// replica asked once and no retry counted: upstream's TestExecuteRetryRule,
// "5xx never on the same replica".)
func TestHonestRetryCount(t *testing.T) {
	var reps []*replica
	urls := map[string]string{}
	for _, name := range []string{"r0", "r1"} {
		r := startReplica(t, fast("m"))
		r.Sim.SetFaults(vllmsim.Faults{FailPercent: 100, FailStatus: 500})
		reps = append(reps, r)
		urls[name] = r.Srv.URL
	}
	gw := startGateway(t, loadConfig(t, `
version: 1
pools:
  p: {model: m, retries: 2, health: {disabled: true}, replicas: [{name: r0, url: "{{r0}}"}, {name: r1, url: "{{r1}}"}]}
routes:
  - name: default
    to: p
`, urls, nil))
	resp, body := post(t, gw.API.URL+"/v1/chat/completions", chatBody("hi", ""), nil)
	if resp.StatusCode != 502 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if sent := reps[0].Count() + reps[1].Count(); sent != 2 {
		t.Errorf("%d upstream attempts, want 2 (one per replica)", sent)
	}
	if got := gw.MetricValue(t, "switchyard_upstream_retries_total", map[string]string{"pool": "p", "reason": "status_5xx"}); got != 1 {
		t.Errorf("retries metric %v, want 1", got)
	}
	// The access line is written once the handler returns, which may be
	// just after the client has its answer.
	polltest.Eventually(t, 5*time.Second, "the access line", func() bool { return len(accessLogs(t, gw)) == 1 })
	if logs := accessLogs(t, gw); logs[0]["retries"] != 1.0 {
		t.Errorf("access log retries: %v, want 1", logs)
	}
}

// TestMisconfiguredReplica: a replica that does not serve the pool's model
// answers 404; it is marked misconfigured (not a success), the request is
// answered by another replica, and the probe's model check keeps it out
// until /v1/models lists the model.
func TestMisconfiguredReplica(t *testing.T) {
	good := startReplica(t, fast("m"))
	wrong := startReplica(t, fast("other-model"))
	gw := startGateway(t, loadConfig(t, `
version: 1
pools:
  p:
    model: m
    balance: round_robin
    health: {interval: 20ms, timeout: 2s, unhealthy_after: 1, healthy_after: 1}
    replicas: [{name: good, url: "{{good}}"}, {name: wrong, url: "{{wrong}}"}]
routes:
  - name: default
    to: p
`, map[string]string{"good": good.Srv.URL, "wrong": wrong.Srv.URL}, nil))
	for range 6 {
		if resp, body := post(t, gw.API.URL+"/v1/chat/completions", chatBody("hi", ""), nil); resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
	}
	v := adminReplicaView(t, gw, "p", "wrong")
	if !v.Misconfigured || v.Healthy || !strings.Contains(v.Why, "404") {
		t.Fatalf("wrong replica: %+v", v)
	}
	if wrong.Count() != 1 {
		t.Errorf("the misconfigured replica got %d requests, want 1 (then out of rotation)", wrong.Count())
	}
	// Probes keep checking /v1/models: once one has (its error names the
	// missing model), it stays out.
	polltest.Eventually(t, 5*time.Second, "a probe to check the models", func() bool {
		return strings.Contains(adminReplicaView(t, gw, "p", "wrong").LastError, `does not list the model "m"`)
	})
	if v := adminReplicaView(t, gw, "p", "wrong"); !v.Misconfigured || v.Healthy {
		t.Errorf("after probes: %+v", v)
	}
	if got := gw.MetricValue(t, "switchyard_upstream_retries_total", map[string]string{"pool": "p", "reason": "misconfigured"}); got != 1 {
		t.Errorf("misconfigured retries %v, want 1", got)
	}
}

// TestCheckModelsProbe: with health.check_models, probes alone find a
// replica serving another model, before any request reaches it; a reload
// pointing the pool at the replica's model brings it back.
func TestCheckModelsProbe(t *testing.T) {
	wrong := startReplica(t, fast("other-model"))
	const tmpl = `
version: 1
pools:
  p:
    model: %s
    health: {interval: 20ms, timeout: 2s, unhealthy_after: 1, healthy_after: 1, check_models: true}
    replicas: [{name: r, url: "{{r}}"}]
routes:
  - name: default
    to: p
`
	gw := startGateway(t, loadConfig(t, fmt.Sprintf(tmpl, "m"), map[string]string{"r": wrong.Srv.URL}, nil))
	polltest.Eventually(t, 5*time.Second, "the probe to mark the replica misconfigured", func() bool {
		return adminReplicaView(t, gw, "p", "r").Misconfigured
	})
	if resp, _ := post(t, gw.API.URL+"/v1/chat/completions", chatBody("hi", ""), nil); resp.StatusCode != 503 || wrong.Count() != 0 {
		t.Errorf("status %d, %d requests reached the replica", resp.StatusCode, wrong.Count())
	}
	if _, err := gw.G.Apply(loadConfig(t, fmt.Sprintf(tmpl, "other-model"), map[string]string{"r": wrong.Srv.URL}, nil)); err != nil {
		t.Fatal(err)
	}
	polltest.Eventually(t, 5*time.Second, "the replica to come back", func() bool {
		v := adminReplicaView(t, gw, "p", "r")
		return !v.Misconfigured && v.Healthy
	})
}

// TestTimeoutIsTerminal: a header timeout on the first pool answers 504; it
// is not replayed on the fallback pool (nor on another replica).
func TestTimeoutIsTerminal(t *testing.T) {
	slow := startReplica(t, fast("m"))
	slow.Sim.SetFaults(vllmsim.Faults{Stall: 3 * time.Second})
	slow2 := startReplica(t, fast("m"))
	slow2.Sim.SetFaults(vllmsim.Faults{Stall: 3 * time.Second})
	backup := startReplica(t, fast("b"))
	gw := startGateway(t, loadConfig(t, `
version: 1
pools:
  first: {model: m, response_header_timeout: 100ms, health: {disabled: true}, replicas: [{name: s, url: "{{s}}"}, {name: s2, url: "{{s2}}"}]}
  backup: {model: b, health: {disabled: true}, replicas: [{name: b, url: "{{b}}"}]}
routes:
  - name: default
    to: first
    fallback: [backup]
`, map[string]string{"s": slow.Srv.URL, "s2": slow2.Srv.URL, "b": backup.Srv.URL}, nil))
	resp, body := post(t, gw.API.URL+"/v1/chat/completions", chatBody("hi", ""), nil)
	if resp.StatusCode != 504 || !strings.Contains(string(body), "upstream_timeout") {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if backup.Count() != 0 || slow.Count()+slow2.Count() != 1 {
		t.Errorf("a timed-out request was replayed: first pool %d, backup %d attempts", slow.Count()+slow2.Count(), backup.Count())
	}
	if resp.Header.Get("X-Switchyard-Pool") != "first" {
		t.Errorf("pool header %q", resp.Header.Get("X-Switchyard-Pool"))
	}
}

// openFDs counts this process's open file descriptors (Linux).
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	return len(ents)
}

// TestReloadStormUnderSaturation: clients keep two max_inflight-capped
// pools saturated (streams and plain requests) while the config is reloaded
// over and over, rebuilding every pool and adding and removing a replica.
// No request fails, and afterwards the removed endpoints' connections and
// loops are gone: open fds return to where they were.
func TestReloadStormUnderSaturation(t *testing.T) {
	reps := []*replica{startReplica(t, fast("m")), startReplica(t, fast("m"))}
	for _, r := range reps {
		r.Sim.SetFaults(vllmsim.Faults{SlowStart: 5 * time.Millisecond})
	}
	// Replica c, added and removed by the storm, counts its open
	// connections: once it is removed they must all close.
	var cOpen atomic.Int64
	cSim := vllmsim.New(fast("m"))
	cSim.SetFaults(vllmsim.Faults{SlowStart: 5 * time.Millisecond})
	c := httptest.NewUnstartedServer(cSim)
	c.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			cOpen.Add(1)
		case http.StateClosed, http.StateHijacked:
			cOpen.Add(-1)
		}
	}
	c.Start()
	t.Cleanup(c.Close)
	urls := map[string]string{"a": reps[0].Srv.URL, "b": reps[1].Srv.URL, "c": c.URL}
	cfgs := []string{`
version: 1
pools:
  p:
    model: m
    max_inflight: 2
    queue_timeout: 30s
    retries: %d
    balance: %s
    health: {interval: 50ms}
    replicas: [{name: a, url: "{{a}}"}, {name: b, url: "{{b}}"}%s]
routes:
  - name: default
    to: p
`}
	render := func(i int) string {
		extra := ""
		if i%3 == 0 {
			extra = `, {name: c, url: "{{c}}"}`
		}
		bal := []string{"least_outstanding", "round_robin", "p2c"}[i%3]
		return fmt.Sprintf(cfgs[0], i%4, bal, extra)
	}
	gw := startGateway(t, loadConfig(t, render(1), urls, nil))
	// Warm up on the final config's replicas, so that the baseline holds
	// the keep-alive connections a steady load keeps open.
	warm := startLoad(t, gw.API.URL, 8, true)
	time.Sleep(300 * time.Millisecond)
	warm.end()
	time.Sleep(100 * time.Millisecond)
	fdsBefore := openFDs(t)

	l := startLoad(t, gw.API.URL, 8, true)
	for i := range 60 {
		if _, err := gw.G.Apply(loadConfig(t, render(i), urls, nil)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// End on the warm-up config: same replicas, balancer and loops.
	if _, err := gw.G.Apply(loadConfig(t, render(1), urls, nil)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	l.check(t)
	if l.ok.Load() < 20 {
		t.Errorf("only %d requests completed; the storm proves little", l.ok.Load())
	}
	// The final config has no replica c: its connections close.
	polltest.Eventually(t, 10*time.Second, "the removed replica's connections to close", func() bool { return cOpen.Load() == 0 })
	// The rest may keep a few more idle keep-alive connections than at the
	// baseline (scrape loops of the storm's p2c configs used some), but
	// nothing grows with the number of reloads.
	polltest.Eventually(t, 10*time.Second, fmt.Sprintf("open fds to return near the baseline of %d", fdsBefore), func() bool { return openFDs(t) <= fdsBefore+12 })
	for _, name := range []string{"a", "b"} {
		if v := adminReplicaView(t, gw, "p", name); v.Inflight != 0 || v.Waiting != 0 {
			t.Errorf("replica %s left with %d in flight, %d waiting", name, v.Inflight, v.Waiting)
		}
	}
}

// TestAccessLineQueueOf503: a request that waits out queue_timeout and
// gets a 503 logs the time it queued, not 0 (issue 42).
func TestAccessLineQueueOf503(t *testing.T) {
	up, gw := gatedOneSlot(t, "200ms")
	url := gw.API.URL + "/v1/chat/completions"
	done := make(chan struct{})
	go func() { post(t, url, chatBody("A", ""), nil); close(done) }()
	polltest.Eventually(t, 5*time.Second, "A to reach the replica", func() bool { return up.hits.Load() == 1 })
	resp, _ := post(t, url, chatBody("B", ""), nil)
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("B: %d, want 503 after queue_timeout", resp.StatusCode)
	}
	id := resp.Header.Get("X-Request-Id")
	up.open()
	<-done
	polltest.Eventually(t, 5*time.Second, "both access lines", func() bool { return len(accessLogs(t, gw)) == 2 })
	for _, line := range accessLogs(t, gw) {
		if line["request_id"] != id {
			continue
		}
		// It waited queue_timeout (200 ms) by construction.
		if q, _ := line["queue_ms"].(float64); q < 200 {
			t.Errorf("the 503's access line %v: queue_ms %v, want at least the 200 ms queue_timeout", line, line["queue_ms"])
		}
	}
}
