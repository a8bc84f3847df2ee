package router_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/polltest"
	"github.com/switchyard/switchyard/vllmsim"
)

// TestSaturatedPoolErrorNamesThePool: a 503 for a pool at max_inflight
// carries X-Switchyard-Pool and is counted under that pool.
func TestSaturatedPoolErrorNamesThePool(t *testing.T) {
	held := startReplica(t, vllmsim.Profile{Model: "m", DecodeTPS: 5, DefaultMaxTokens: 50})
	gw := oneReplicaGateway(t, held.Srv.URL, ", max_inflight: 1, queue_timeout: 20ms", "")
	hold(t, gw.API.URL+"/v1/chat/completions", `{"model":"auto","messages":[{"role":"user","content":"x"}]}`, nil)
	polltest.Eventually(t, 2*time.Second, "the slot to be taken", func() bool { return held.Sim.Running() == 1 })
	resp, _ := post(t, gw.API.URL+"/v1/chat/completions", `{"model":"auto","messages":[{"role":"user","content":"y"}]}`, nil)
	if resp.StatusCode != 503 || resp.Header.Get("X-Switchyard-Pool") != "p" || resp.Header.Get("X-Switchyard-Route") != "default" {
		t.Errorf("status %d pool %q route %q", resp.StatusCode, resp.Header.Get("X-Switchyard-Pool"), resp.Header.Get("X-Switchyard-Route"))
	}
	if v := gw.MetricValue(t, "switchyard_requests_total", map[string]string{"pool": "p", "code": "503"}); v != 1 {
		t.Errorf("503s counted under pool p: %v", v)
	}
}

// TestSessionIsScopedPerKey: one API key's session id cannot carry its
// decision to another key.
func TestSessionIsScopedPerKey(t *testing.T) {
	big := startReplica(t, fast("big"))
	small := startReplica(t, fast("small"))
	cfg := loadConfig(t, `
version: 1
server:
  api_keys: [{name: premium, key_env: K1}, {name: basic, key_env: K2}]
pools:
  big: {model: big, health: {disabled: true}, replicas: [{name: b, url: "{{big}}"}]}
  small: {model: small, health: {disabled: true}, replicas: [{name: s, url: "{{small}}"}]}
session: {header: X-Session-Id}
routes:
  - name: premium
    when: {key: premium}
    to: big
  - name: default
    to: small
`, map[string]string{"big": big.Srv.URL, "small": small.Srv.URL}, map[string]string{"K1": "sk-1", "K2": "sk-2"})
	gw := startGateway(t, cfg)
	body := `{"model":"auto","messages":[{"role":"user","content":"hi"}]}`
	resp, _ := post(t, gw.API.URL+"/v1/chat/completions", body, map[string]string{"Authorization": "Bearer sk-1", "X-Session-Id": "shared"})
	if resp.Header.Get("X-Switchyard-Pool") != "big" {
		t.Fatalf("premium pool %q", resp.Header.Get("X-Switchyard-Pool"))
	}
	resp, _ = post(t, gw.API.URL+"/v1/chat/completions", body, map[string]string{"Authorization": "Bearer sk-2", "X-Session-Id": "shared"})
	if resp.Header.Get("X-Switchyard-Pool") != "small" {
		t.Errorf("basic key with the premium session's id went to %q, want small", resp.Header.Get("X-Switchyard-Pool"))
	}
}

// TestReloadRebuildsPoolsWhoseBuildInputsChanged: adding a spill out of a
// pool turns its scraping on, and a changed vLLM key rebuilds the pool.
func TestReloadRebuildsPoolsWhoseBuildInputsChanged(t *testing.T) {
	a := startReplica(t, fast("m"))
	b := startReplica(t, fast("n"))
	render := func(spill, keyEnv string) string {
		return strings.NewReplacer("{{a}}", a.Srv.URL, "{{b}}", b.Srv.URL, "SPILL", spill, "KEYENV", keyEnv).Replace(`
version: 1
pools:
  a: {model: m, api_key_env: KEYENV, health: {disabled: true}, replicas: [{name: a1, url: "{{a}}"}]}
  b: {model: n, health: {disabled: true}, replicas: [{name: b1, url: "{{b}}"}]}
routes:
  - name: default
    to: a
    SPILL
`)
	}
	t.Setenv("VLLM_KEY_1", "one")
	t.Setenv("VLLM_KEY_2", "two")
	gw, path := fileGateway(t, render("", "VLLM_KEY_1"))
	before := gw.G.Snapshot().Pool("a")
	if before.Options().Scrape.Enabled {
		t.Fatal("pool a scrapes before any spill")
	}
	reloadFile(t, gw, path, render("spill: {to: b, when_queue_over: 2}", "VLLM_KEY_1"))
	afterSpill := gw.G.Snapshot().Pool("a")
	if !afterSpill.Options().Scrape.Enabled {
		t.Error("adding a spill out of pool a did not turn its scraping on")
	}
	reloadFile(t, gw, path, render("spill: {to: b, when_queue_over: 2}", "VLLM_KEY_2"))
	if p := gw.G.Snapshot().Pool("a"); p == afterSpill || p.Options().APIKey != "two" {
		t.Error("changing pool a's vLLM key did not rebuild it with the new key")
	}
	if before == afterSpill {
		t.Error("adding the spill did not rebuild pool a")
	}
}

// TestReloadCarriesReplicaState: a reload that rebuilds a pool (here, a
// changed retries count) keeps what it knew of each unchanged replica: a
// dead replica stays out of rotation.
func TestReloadCarriesReplicaState(t *testing.T) {
	live := startReplica(t, fast("m"))
	text := fmt.Sprintf(`
version: 1
pools:
  p:
    model: m
    retries: 2
    health: {interval: 20ms, timeout: 2s, unhealthy_after: 1, healthy_after: 1000}
    replicas: [{name: live, url: "%s"}, {name: dead, url: "%s"}]
routes:
  - name: default
    to: p
`, live.Srv.URL, refusedURL(t))
	gw, path := fileGateway(t, text)
	polltest.Eventually(t, 5*time.Second, "the dead replica to be marked unhealthy", func() bool {
		return !gw.G.Snapshot().Pool("p").Replica("dead").Healthy()
	})
	before := gw.G.Snapshot().Pool("p")
	reloadFile(t, gw, path, strings.Replace(text, "retries: 2", "retries: 1", 1))
	after := gw.G.Snapshot().Pool("p")
	if after == before {
		t.Fatal("the pool was not rebuilt")
	}
	if after.Replica("dead").Healthy() {
		t.Error("the rebuilt pool forgot that replica dead is down")
	}
	if !after.Replica("live").Healthy() {
		t.Error("replica live is not healthy after the reload")
	}
}
