package router_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/openai/openai-go/v3"

	"github.com/switchyard/switchyard/internal/polltest"
	"github.com/switchyard/switchyard/vllmsim"
)

// failoverWait bounds every poll in these tests; a passing run needs far less.
const failoverWait = 10 * time.Second

// restartReplica drops every connection of r's server, closes it, and
// serves the same handler again on the same host:port (a replica process
// that restarted).
func restartReplica(t *testing.T, r *replica) {
	t.Helper()
	addr := r.Srv.Listener.Addr().String()
	h := r.Srv.Config.Handler
	r.Srv.CloseClientConnections()
	r.Srv.Close()
	reviveReplica(t, r, addr, h)
}

// reviveReplica serves h on addr again (the port was closed by Close).
func reviveReplica(t *testing.T, r *replica, addr string, h http.Handler) {
	t.Helper()
	var ln net.Listener
	polltest.Eventually(t, failoverWait, "listening again on "+addr, func() bool {
		var err error
		ln, err = net.Listen("tcp", addr)
		return err == nil
	})
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: h}}
	srv.Start()
	t.Cleanup(srv.Close)
	r.Srv = srv
}

// counterSeries returns every series of the counter name as "k=v,k=v" → value.
func counterSeries(t *testing.T, gw *gateway, name string) map[string]float64 {
	t.Helper()
	fams, err := gw.Reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			sort.Strings(ls)
			out[strings.Join(ls, ",")] = m.GetCounter().GetValue()
		}
	}
	return out
}

// TestReplicaKilledUnderLoad: a closed loop of concurrent requests runs
// while one of three replicas dies. No client sees a failure: requests in
// flight on it and those that pick it next are retried on the others. It is
// ejected or marked down by probes (whichever sees it first), and once a server listens on its address
// again, probes readmit it and it serves again.
func TestReplicaKilledUnderLoad(t *testing.T) {
	const model = "openbmb/MiniCPM5-2B"
	p := vllmsim.Profile{Model: model, DecodeTPS: 400, DefaultMaxTokens: 4} // ~10ms a request
	reps := map[string]*replica{"a": startReplica(t, p), "b": startReplica(t, p), "c": startReplica(t, p)}
	cfg := loadConfig(t, `
version: 1
pools:
  main:
    model: openbmb/MiniCPM5-2B
    balance: round_robin
    health: {interval: 20ms, timeout: 1s, unhealthy_after: 2, healthy_after: 1}
    outlier: {base_ejection: 1m}
    replicas:
      - {name: a, url: "{{a}}"}
      - {name: b, url: "{{b}}"}
      - {name: c, url: "{{c}}"}
routes:
  - name: default
    to: main
`, map[string]string{"a": reps["a"].Srv.URL, "b": reps["b"].Srv.URL, "c": reps["c"].Srv.URL}, nil)
	gw := startGateway(t, cfg)
	dead := gw.G.Snapshot().Pool("main").Replica("c")

	l := startLoad(t, gw.API.URL, 8, false)

	polltest.Eventually(t, failoverWait, "every replica to serve", func() bool {
		return reps["a"].Count() > 20 && reps["b"].Count() > 20 && reps["c"].Count() > 20
	})

	// Kill c mid-run: in-flight requests lose their connections, new ones
	// are refused.
	addr := reps["c"].Srv.Listener.Addr().String()
	handler := reps["c"].Srv.Config.Handler
	reps["c"].Srv.CloseClientConnections()
	reps["c"].Srv.Close()
	killedAt := l.ok.Load()

	// Outlier detection (3 failed requests) and the probes (2 failed
	// probes) race to take c out; which wins depends on the scheduler, so
	// either is accepted. TestRetryOnAnotherReplica covers ejection alone.
	polltest.Eventually(t, failoverWait, "/admin/pools to show c out of rotation", func() bool {
		v := adminReplicaView(t, gw, "main", "c")
		return (v.Ejected && v.Ejections >= 1 || !v.Healthy) && v.LastError != ""
	})
	polltest.Eventually(t, failoverWait, "probes to mark c down", func() bool { return !dead.Healthy() })
	polltest.Eventually(t, failoverWait, "traffic to flow on a and b", func() bool { return l.ok.Load() > killedAt+50 })

	served := reps["c"].Count()
	reviveReplica(t, reps["c"], addr, handler)
	polltest.Eventually(t, failoverWait, "probes to readmit c", func() bool {
		return dead.Healthy() && !dead.Ejected(time.Now())
	})
	polltest.Eventually(t, failoverWait, "c to serve again", func() bool { return reps["c"].Count() > served+20 })
	l.check(t)
	if v := adminReplicaView(t, gw, "main", "c"); !v.Healthy || v.Ejected {
		t.Errorf("after readmission /admin/pools shows %+v", v)
	}
	if r := gw.MetricValue(t, "switchyard_upstream_retries_total", map[string]string{"pool": "main"}); r == 0 {
		t.Error("no retries were counted, yet requests on the dead replica succeeded")
	}
	t.Logf("%d requests, all 200; c served %d before the kill and %d after its restart", l.ok.Load(), served, reps["c"].Count()-served)
}

// TestStreamCutByReplica: a replica that drops the connection mid-stream
// must surface as an error in the official SDK, never as a short success,
// and the client's bytes must not contain [DONE].
func TestStreamCutByReplica(t *testing.T) {
	rep := startReplica(t, vllmsim.Profile{Model: "m", DefaultMaxTokens: 32})
	rep.Sim.SetFaults(vllmsim.Faults{CutAfterChunks: 3})
	gw := oneReplicaGateway(t, rep.Srv.URL, "", "")

	t.Run("openai sdk", func(t *testing.T) {
		client := sdk(gw)
		stream := client.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
			Model:    "auto",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Describe the harbor.")},
		})
		var acc openai.ChatCompletionAccumulator
		chunks := 0
		for stream.Next() {
			acc.AddChunk(stream.Current())
			chunks++
		}
		err := stream.Err()
		stream.Close()
		if err == nil {
			content := ""
			if len(acc.Choices) > 0 {
				content = acc.Choices[0].Message.Content
			}
			t.Fatalf("the SDK saw a successful stream of %d chunks (%q) although the replica cut it", chunks, content)
		}
		t.Logf("SDK error after %d chunks: %v", chunks, err)
	})

	t.Run("raw bytes", func(t *testing.T) {
		resp, err := http.Post(gw.API.URL+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"auto","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, readErr := io.ReadAll(resp.Body)
		if strings.Contains(string(body), "[DONE]") {
			t.Errorf("a cut stream ended with [DONE]:\n%s", body)
		}
		if readErr == nil && !strings.Contains(string(body), `"error"`) {
			t.Errorf("the stream ended cleanly with neither an error event nor a broken connection:\n%s", body)
		}
		if resp.Header.Get("X-Switchyard-Replica") != "r" {
			t.Errorf("replica header %q", resp.Header.Get("X-Switchyard-Replica"))
		}
	})

	polltest.Eventually(t, failoverWait, "both cut streams to be counted as 502", func() bool {
		return gw.MetricValue(t, "switchyard_requests_total", map[string]string{"pool": "p", "code": "502"}) == 2
	})
	if n := gw.MetricValue(t, "switchyard_requests_total", map[string]string{"pool": "p", "code": "200"}); n != 0 {
		t.Errorf("%v cut streams counted as 200", n)
	}
}

// TestRetryOnAnotherReplica: a replica answering 503 or 429 before any byte
// reached the client is retried on the other one; the client sees 200 and
// the retry is counted with its reason.
func TestRetryOnAnotherReplica(t *testing.T) {
	for _, tc := range []struct {
		status  int
		reason  string
		ejected bool
	}{
		{http.StatusServiceUnavailable, "status_5xx", true},
		{http.StatusTooManyRequests, "status_429", false},
	} {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			bad := startReplica(t, fast("openbmb/MiniCPM5-2B"))
			bad.Sim.SetFaults(vllmsim.Faults{FailPercent: 100, FailStatus: tc.status})
			good := startReplica(t, fast("openbmb/MiniCPM5-2B"))
			cfg := loadConfig(t, `
version: 1
pools:
  p:
    model: openbmb/MiniCPM5-2B
    balance: round_robin
    health: {disabled: true}
    replicas: [{name: bad, url: "{{bad}}"}, {name: good, url: "{{good}}"}]
routes:
  - name: default
    to: p
`, map[string]string{"bad": bad.Srv.URL, "good": good.Srv.URL}, nil)
			gw := startGateway(t, cfg)
			for i := range 6 {
				resp, body := post(t, gw.API.URL+"/v1/chat/completions", `{"model":"auto","messages":[{"role":"user","content":"hi"}]}`, nil)
				if resp.StatusCode != 200 || resp.Header.Get("X-Switchyard-Replica") != "good" {
					t.Fatalf("request %d: status %d replica %q: %s", i, resp.StatusCode, resp.Header.Get("X-Switchyard-Replica"), body)
				}
			}
			if bad.Count() == 0 {
				t.Fatal("the failing replica was never tried; the test proves nothing")
			}
			want := map[string]float64{"pool=p,reason=" + tc.reason: float64(bad.Count())}
			if d := cmp.Diff(want, counterSeries(t, gw, "switchyard_upstream_retries_total")); d != "" {
				t.Errorf("switchyard_upstream_retries_total (-want +got):\n%s", d)
			}
			rep := gw.G.Snapshot().Pool("p").Replica("bad")
			if got := rep.Ejections() > 0; got != tc.ejected {
				t.Errorf("bad replica ejected %t, want %t (a 429 says nothing about health)", got, tc.ejected)
			}
		})
	}
}

// TestFallbackPool: the route's pool has only a replica that refuses
// connections, so the request goes to the route's fallback pool.
func TestFallbackPool(t *testing.T) {
	backup := startReplica(t, fast("Qwen/Qwen3.8-Flash-Next"))
	cfg := loadConfig(t, `
version: 1
pools:
  dead:
    model: openbmb/MiniCPM5-2B
    health: {disabled: true}
    replicas: [{name: dead-a, url: "{{dead}}"}]
  backup:
    model: Qwen/Qwen3.8-Flash-Next
    health: {disabled: true}
    replicas: [{name: backup-a, url: "{{backup}}"}]
routes:
  - name: default
    to: dead
    fallback: [backup]
`, map[string]string{"dead": refusedURL(t), "backup": backup.Srv.URL}, nil)
	gw := startGateway(t, cfg)
	resp, body := post(t, gw.API.URL+"/v1/chat/completions", `{"model":"auto","messages":[{"role":"user","content":"hi"}]}`, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if got := [2]string{resp.Header.Get("X-Switchyard-Route"), resp.Header.Get("X-Switchyard-Pool")}; got != [2]string{"default", "backup"} {
		t.Errorf("route, pool headers %q, want default, backup", got)
	}
	if !strings.Contains(string(body), `"model":"Qwen/Qwen3.8-Flash-Next"`) {
		t.Errorf("answer not from the fallback pool's model: %s", body)
	}
	want := map[string]float64{"from=dead,reason=upstream_error,to=backup": 1}
	if d := cmp.Diff(want, counterSeries(t, gw, "switchyard_fallbacks_total")); d != "" {
		t.Errorf("switchyard_fallbacks_total (-want +got):\n%s", d)
	}
}

// TestSpillover: the route's pool has its one slot (max_inflight 1) taken,
// so with when_queue_over 0 the next request spills to the other pool.
func TestSpillover(t *testing.T) {
	busy := startReplica(t, vllmsim.Profile{Model: "openbmb/MiniCPM5-2B", DecodeTPS: 10, DefaultMaxTokens: 1000})
	other := startReplica(t, fast("Qwen/Qwen3.8-Flash-Next"))
	cfg := loadConfig(t, `
version: 1
pools:
  busy:
    model: openbmb/MiniCPM5-2B
    max_inflight: 1
    health: {disabled: true}
    replicas: [{name: busy-a, url: "{{busy}}"}]
  other:
    model: Qwen/Qwen3.8-Flash-Next
    health: {disabled: true}
    replicas: [{name: other-a, url: "{{other}}"}]
routes:
  - name: default
    to: busy
    spill: {to: other, when_queue_over: 0}
`, map[string]string{"busy": busy.Srv.URL, "other": other.Srv.URL}, nil)
	gw := startGateway(t, cfg)
	url := gw.API.URL + "/v1/chat/completions"

	hold(t, url, `{"model":"auto","messages":[{"role":"user","content":"a long one"}]}`, nil)
	slot := gw.G.Snapshot().Pool("busy").Replica("busy-a")
	polltest.Eventually(t, failoverWait, "the held request to take busy's only slot", func() bool {
		return slot.Inflight() == 1 && busy.Sim.Running() == 1
	})

	resp, body := post(t, url, `{"model":"auto","messages":[{"role":"user","content":"hi"}]}`, nil)
	if resp.StatusCode != 200 || resp.Header.Get("X-Switchyard-Pool") != "other" {
		t.Fatalf("status %d pool %q, want 200 from other: %s", resp.StatusCode, resp.Header.Get("X-Switchyard-Pool"), body)
	}
	want := map[string]float64{"from=busy,reason=spill,to=other": 1}
	if d := cmp.Diff(want, counterSeries(t, gw, "switchyard_fallbacks_total")); d != "" {
		t.Errorf("switchyard_fallbacks_total (-want +got):\n%s", d)
	}
	if busy.Count() != 1 {
		t.Errorf("busy replica received %d requests, want only the held one", busy.Count())
	}
}

// TestKeepAliveClosedByRestartedReplica: the gateway's pooled connection
// to a replica dies when the replica restarts; the next request must not
// fail because of it, even with a single replica.
func TestKeepAliveClosedByRestartedReplica(t *testing.T) {
	rep := startReplica(t, fast("m"))
	gw := oneReplicaGateway(t, rep.Srv.URL, "", "")
	body := `{"model":"auto","messages":[{"role":"user","content":"hi"}]}`
	for i := range 4 {
		if resp, b := post(t, gw.API.URL+"/v1/chat/completions", body, nil); resp.StatusCode != 200 {
			t.Fatalf("round %d, before restart: status %d %s", i, resp.StatusCode, b)
		}
		restartReplica(t, rep)
		if resp, b := post(t, gw.API.URL+"/v1/chat/completions", body, nil); resp.StatusCode != 200 {
			t.Fatalf("round %d, first request after the restart: status %d %s", i, resp.StatusCode, b)
		}
	}
	if r := gw.G.Snapshot().Pool("p").Replica("r"); r.Ejections() != 0 {
		t.Errorf("the only replica was ejected %d times", r.Ejections())
	}
}

// TestPerKeyRateLimit: a key with rate {rps: 1, burst: 2} gets two
// immediate requests and a 429 for the third, whose Retry-After says how
// long until its bucket has a token; another key is not affected.
func TestPerKeyRateLimit(t *testing.T) {
	rep := startReplica(t, fast("m"))
	gw := oneReplicaGateway(t, rep.Srv.URL, "", `{api_keys: [{name: limited, key_env: KEY_LIMITED, rate: {rps: 1, burst: 2}},
  {name: other, key_env: KEY_OTHER, rate: {rps: 1, burst: 2}}]}`, map[string]string{"KEY_LIMITED": "sk-limited", "KEY_OTHER": "sk-other"})
	url := gw.API.URL + "/v1/chat/completions"
	body := `{"model":"auto","messages":[{"role":"user","content":"hi"}]}`
	limited := map[string]string{"Authorization": "Bearer sk-limited"}
	var got []int
	var last *http.Response
	var lastBody []byte
	for range 3 {
		last, lastBody = post(t, url, body, limited)
		got = append(got, last.StatusCode)
	}
	if d := cmp.Diff([]int{200, 200, 429}, got); d != "" {
		t.Fatalf("statuses (-want +got):\n%s", d)
	}
	if ra := last.Header.Get("Retry-After"); ra != "1" {
		t.Errorf("429 with Retry-After %q, want 1 (one token a second)", ra)
	}
	var e struct {
		Error struct{ Type, Code string } `json:"error"`
	}
	if err := json.Unmarshal(lastBody, &e); err != nil || e.Error.Type != "rate_limit_error" {
		t.Errorf("429 body %s", lastBody)
	}
	if resp, b := post(t, url, body, map[string]string{"Authorization": "Bearer sk-other"}); resp.StatusCode != 200 {
		t.Errorf("another key was limited too: %d %s", resp.StatusCode, b)
	}
	if rep.Count() != 3 {
		t.Errorf("replica saw %d requests, want 3 (the limited one never reaches it)", rep.Count())
	}
}
