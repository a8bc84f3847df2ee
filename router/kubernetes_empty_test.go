package router_test

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/kubetest"
	"github.com/switchyard/switchyard/internal/polltest"
)

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

// TestKubernetesServiceEmptied, on the fake API server (which needs no
// binary) and on a real one (skipped without; see internal/kubetest):
// when the API server lists no ready or serving endpoint for the Service
// (every slice deleted, or its pod not ready), the pool is empty and a
// request gets 503 no_replica_available naming the Service, as
// /admin/pools and the log say; a pod ready again takes traffic again; the
// API server gone keeps the set, and the watch comes back with it.
func TestKubernetesServiceEmptied(t *testing.T) {
	for _, api := range []string{"fake", "real"} {
		t.Run(api, func(t *testing.T) {
			port, _ := loopbackSims(t, 1) // 127.0.0.2, listed as 192.0.2.2
			var es *endpointSlices
			var kubeconfig string
			var down, up func()
			if api == "fake" {
				fs := kubetest.StartSlices(t, "inference")
				es, kubeconfig, down, up = &endpointSlices{t: t, fake: fs, port: int32(port)}, fs.Kubeconfig, fs.Break, fs.Mend
			} else {
				var srv *kubetest.Server
				srv, es = apiSlices(t, port)
				kubeconfig, down, up = srv.Kubeconfig, srv.StopAPIServer, srv.StartAPIServer
			}
			es.put("vllm-a", map[int]podState{2: ready})
			gw, _ := fileGateway(t, kubeConfig(kubeconfig, "http"), viaTestNet)
			replica := "192.0.2.2:" + strconv.Itoa(port)
			healthy := func(what string) {
				t.Helper()
				polltest.Eventually(t, 60*time.Second, what, func() bool { return slices.Equal(healthyReplicas(t, gw), []string{replica}) })
				if code, _, msg := askEmptied(t, gw); code != 200 {
					t.Fatalf("%s: %d %s", what, code, msg)
				}
			}
			const why = `service "inference/vllm" (port "http"): no ready or serving endpoint on the port in its EndpointSlices`
			empty := func(what string) {
				t.Helper()
				polltest.Eventually(t, 60*time.Second, what, func() bool { return len(getPools(t, gw).Pools[0].Replicas) == 0 })
				if code, errCode, msg := askEmptied(t, gw); code != 503 || errCode != "no_replica_available" || !strings.Contains(msg, why) {
					t.Errorf("%s: %d %s %q, want 503 no_replica_available naming the Service", what, code, errCode, msg)
				}
				if d := getPools(t, gw).Pools[0].Discovery; d == nil || d.Result != "empty" || len(d.Addresses) != 0 || d.Error != why {
					t.Errorf("%s: /admin/pools discovery %+v", what, d)
				}
			}
			healthy("the pod listed")
			es.delete("vllm-a")
			empty("every slice deleted")
			if logs := gw.Logs.String(); !strings.Contains(logs, "discovery: the Service lists no ready or serving endpoint; the pool has no replica") {
				t.Errorf("the emptied pool is not logged:\n%s", logs)
			}
			es.put("vllm-a", map[int]podState{2: notReady})
			empty("the pod listed, not ready")
			es.put("vllm-a", map[int]podState{2: ready})
			healthy("the pod ready again")

			down()
			polltest.Eventually(t, 60*time.Second, "the lost watch in /admin/pools", func() bool {
				d := getPools(t, gw).Pools[0].Discovery
				return d.Result == "error" && d.Error != ""
			})
			healthy("the set kept while the API server is down")
			up()
			polltest.Eventually(t, 60*time.Second, "the watch back", func() bool { return getPools(t, gw).Pools[0].Discovery.Result == "ok" })
		})
	}
}
