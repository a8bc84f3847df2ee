package router_test

import (
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard/switchyard/vllmsim"
)

const heteroYAML = `
version: 1
pools:
  p:
    model: openbmb/MiniCPM5-2B
    balance: {{balance}}
    health: {disabled: true}
    replicas:
      - {name: fast-a, url: "{{a}}"}
      - {name: fast-b, url: "{{b}}"}
      - {name: slow, url: "{{slow}}"}
routes:
  - name: default
    to: p
`

// BenchmarkBalancersHeterogeneous runs the same simulated workload through
// the gateway once per balancer: three replicas decoding at 1×, 1× and
// 0.3× speed (32 tokens: ~27ms, ~27ms, ~89ms; at most 4 requests running
// at once per replica, more wait in its queue), and a closed loop of 12
// clients sending 300 requests in all. It reports the client-side p50 and
// p99 latency and the share of requests the slow replica served; ns/op is
// the wall time of one whole run.
func BenchmarkBalancersHeterogeneous(b *testing.B) {
	const (
		workers  = 12
		requests = 300
	)
	base := vllmsim.Profile{Model: "openbmb/MiniCPM5-2B", DecodeTPS: 100, SpeedUp: 12, MaxBatch: 4, DefaultMaxTokens: 32}
	slowP := base
	slowP.DecodeTPS = 30
	body := `{"model":"auto","messages":[{"role":"user","content":"Describe the harbor."}]}`

	for _, bal := range []string{"round_robin", "least_outstanding", "p2c", "kv_aware"} {
		b.Run(bal, func(b *testing.B) {
			a, bb, slow := startReplica(b, base), startReplica(b, base), startReplica(b, slowP)
			cfg := loadConfig(b, heteroYAML, map[string]string{"balance": bal, "a": a.Srv.URL, "b": bb.Srv.URL, "slow": slow.Srv.URL}, nil)
			gw := startGateway(b, cfg)
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * workers}}
			b.Cleanup(client.CloseIdleConnections)

			var (
				mu        sync.Mutex
				latencies []time.Duration
				toSlow    int
				failed    atomic.Int64
			)
			for b.Loop() {
				var (
					left atomic.Int64
					wg   sync.WaitGroup
				)
				left.Store(requests)
				for range workers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for left.Add(-1) >= 0 {
							start := time.Now()
							resp, err := client.Post(gw.API.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
							if err != nil {
								failed.Add(1)
								continue
							}
							_, err = io.Copy(io.Discard, resp.Body)
							resp.Body.Close()
							d := time.Since(start)
							if err != nil || resp.StatusCode != http.StatusOK {
								failed.Add(1)
								continue
							}
							mu.Lock()
							latencies = append(latencies, d)
							if resp.Header.Get("X-Switchyard-Replica") == "slow" {
								toSlow++
							}
							mu.Unlock()
						}
					}()
				}
				wg.Wait()
			}
			if n := failed.Load(); n > 0 {
				b.Fatalf("%d requests failed", n)
			}
			slices.Sort(latencies)
			pct := func(q float64) float64 {
				return float64(latencies[int(q*float64(len(latencies)-1))]) / float64(time.Millisecond)
			}
			b.ReportMetric(pct(0.50), "p50-ms")
			b.ReportMetric(pct(0.99), "p99-ms")
			b.ReportMetric(float64(toSlow)/float64(len(latencies)), "slow-share")
		})
	}
}
