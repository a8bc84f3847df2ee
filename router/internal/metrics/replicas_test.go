package metrics

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/switchyard/switchyard/pools"
)

// clock is an injected clock that moves only when told.
type clock struct{ ns atomic.Int64 }

func (c *clock) Now() time.Time { return time.Unix(0, c.ns.Load()) }

func TestReplicaCollector(t *testing.T) {
	vllm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("vllm:num_requests_waiting 4\nvllm:num_requests_running 2\n"))
	}))
	defer vllm.Close()
	u, err := url.Parse(vllm.URL)
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{}
	clk.ns.Store(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	// Every option the config loader would fill (pools applies no default);
	// r1 and r2 are never reached.
	p, err := pools.New(pools.Options{Name: "qwen", Model: "m", Balance: "round_robin", ConnectTimeout: time.Second,
		Replicas: []pools.ReplicaSpec{{Name: "r0", URL: u}, {Name: "r1", URL: &url.URL{Scheme: "http", Host: "127.0.0.1:2"}},
			{Name: "r2", URL: &url.URL{Scheme: "http", Host: "127.0.0.1:3"}}},
		Health:    pools.HealthOptions{Disabled: true},
		Scrape:    pools.ScrapeOptions{Enabled: true, Path: "/metrics", Interval: time.Second, Timeout: time.Second},
		Staleness: time.Second, LoadFactor: 1.25,
		Outlier: pools.OutlierOptions{Consecutive5xx: 1, MaxEjectionPercent: 50, BaseEjection: 5 * time.Second, MaxEjection: 2 * time.Minute},
	}, pools.EndpointsOptions{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	rs := p.Replicas()
	ctx := context.Background()
	for range 2 {
		if _, err := p.Acquire(ctx, &pools.Request{}, func(r *pools.Replica) bool { return r != rs[0] }); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.Acquire(ctx, &pools.Request{}, func(r *pools.Replica) bool { return r != rs[1] }); err != nil {
		t.Fatal(err)
	}
	p.Observe(rs[2], pools.Status5xx, "down")
	if l := p.ScrapeOnce(ctx, rs[0]); l.Err != "" {
		t.Fatalf("scrape: %s", l.Err)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(NewReplicaCollector(func() []*pools.Pool { return []*pools.Pool{p} }))
	const head = `
# HELP switchyard_replica_ejections_total Passive ejections of the replica since it was configured.
# TYPE switchyard_replica_ejections_total counter
switchyard_replica_ejections_total{pool="qwen",replica="r0"} 0
switchyard_replica_ejections_total{pool="qwen",replica="r1"} 0
switchyard_replica_ejections_total{pool="qwen",replica="r2"} 1
# HELP switchyard_replica_healthy 1 when the replica is healthy and not ejected, else 0.
# TYPE switchyard_replica_healthy gauge
`
	const tail = `
# HELP switchyard_replica_scrape_up 1 when the last vLLM /metrics scrape of the replica succeeded (only for pools that scrape).
# TYPE switchyard_replica_scrape_up gauge
switchyard_replica_scrape_up{pool="qwen",replica="r0"} 1
switchyard_replica_scrape_up{pool="qwen",replica="r1"} 0
switchyard_replica_scrape_up{pool="qwen",replica="r2"} 0
`
	want := head + `switchyard_replica_healthy{pool="qwen",replica="r0"} 1
switchyard_replica_healthy{pool="qwen",replica="r1"} 1
switchyard_replica_healthy{pool="qwen",replica="r2"} 0
# HELP switchyard_replica_inflight Requests Switchyard has open on the replica.
# TYPE switchyard_replica_inflight gauge
switchyard_replica_inflight{pool="qwen",replica="r0"} 2
switchyard_replica_inflight{pool="qwen",replica="r1"} 1
switchyard_replica_inflight{pool="qwen",replica="r2"} 0
# HELP switchyard_replica_queue Requests waiting in the replica's vLLM queue at the last fresh scrape.
# TYPE switchyard_replica_queue gauge
switchyard_replica_queue{pool="qwen",replica="r0"} 4
switchyard_replica_queue{pool="qwen",replica="r1"} 0
switchyard_replica_queue{pool="qwen",replica="r2"} 0` + tail
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}

	// Once the ejection is over and the requests ended, the gauges follow;
	// the scrape is stale by then.
	clk.ns.Add(int64(time.Minute))
	for _, r := range rs {
		for r.Inflight() > 0 {
			p.Release(r)
		}
	}
	want = head + `switchyard_replica_healthy{pool="qwen",replica="r0"} 1
switchyard_replica_healthy{pool="qwen",replica="r1"} 1
switchyard_replica_healthy{pool="qwen",replica="r2"} 1
# HELP switchyard_replica_inflight Requests Switchyard has open on the replica.
# TYPE switchyard_replica_inflight gauge
switchyard_replica_inflight{pool="qwen",replica="r0"} 0
switchyard_replica_inflight{pool="qwen",replica="r1"} 0
switchyard_replica_inflight{pool="qwen",replica="r2"} 0
# HELP switchyard_replica_queue Requests waiting in the replica's vLLM queue at the last fresh scrape.
# TYPE switchyard_replica_queue gauge
switchyard_replica_queue{pool="qwen",replica="r0"} 0
switchyard_replica_queue{pool="qwen",replica="r1"} 0
switchyard_replica_queue{pool="qwen",replica="r2"} 0` + tail
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
