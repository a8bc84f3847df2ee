package discoveries

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/switchyard/switchyard/classifier"
	"github.com/switchyard/switchyard/discovery"
	"github.com/switchyard/switchyard/discovery/dnstest"
	"github.com/switchyard/switchyard/policy"
	"github.com/switchyard/switchyard/pools"
	"github.com/switchyard/switchyard/router/internal/upstream"
)

// config loads a config whose pool p has the discovery section disc
// (static replicas when disc is "").
func config(t *testing.T, disc string) *policy.Config {
	t.Helper()
	src := "replicas: [{name: a, url: 'http://127.0.0.9:8000'}]"
	if disc != "" {
		src = "discovery: " + disc
	}
	cfg, err := policy.Load("t.yaml", []byte(`
version: 1
pools:
  p:
    model: m
    `+src+`
routes:
  - {name: default, to: p}
`), policy.LoadOptions{Balancers: pools.Balancers(), Classifiers: classifier.Kinds()})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// running is a Running whose log and refused addresses are recorded.
func running(t *testing.T) (*Running, *bytes.Buffer, *prometheus.Registry) {
	var logs bytes.Buffer
	reg := prometheus.NewRegistry()
	return New(Options{Log: slog.New(slog.NewTextHandler(&logs, nil)), Metrics: discovery.NewMetrics(reg),
		Refuse: func(string, *policy.Server) func(string) bool {
			return func(a string) bool { return strings.HasPrefix(a, "127.0.0.9:") }
		},
		Changed: func(string, *Pool) {}}), &logs, reg
}

// TestNextResolvesSRV: a pool's SRV section is resolved once by Next,
// each target with its own port, refused addresses dropped; its source and
// admin view say so.
func TestNextResolvesSRV(t *testing.T) {
	dns := dnstest.New(t)
	dns.Zone(
		"_http._tcp.vllm.test. 30 IN SRV 0 50 8001 a.vllm.test.",
		"_http._tcp.vllm.test. 30 IN SRV 0 50 8002 b.vllm.test.",
		"_http._tcp.vllm.test. 30 IN SRV 0 50 8003 self.vllm.test.",
		"a.vllm.test. 30 IN A 127.0.0.2",
		"b.vllm.test. 30 IN A 127.0.0.3",
		"self.vllm.test. 30 IN A 127.0.0.9",
	)
	cfg := config(t, "{srv: _http._tcp.vllm.test, interval: 1h, resolver: "+dns.Addr+"}")
	r, _, _ := running(t)
	s := r.Next(context.Background(), cfg)
	specs, ok := s.Replicas("p")
	var got []string
	for _, sp := range specs {
		got = append(got, sp.Name)
	}
	slices.Sort(got)
	if !ok || !slices.Equal(got, []string{"127.0.0.2:8001", "127.0.0.3:8002"}) {
		t.Errorf("replicas %v (discovered %t), want the two SRV targets", got, ok)
	}
	if src := Source(cfg.Pools[0]); src != "srv" {
		t.Errorf("source %q, want srv", src)
	}
	if v := s.View("p"); v == nil || v.Kind != "srv" || v.Result != "ok" || len(v.Addresses) != 2 || v.LastResolve == "" {
		t.Errorf("view %+v", v)
	}
	if src := Source(config(t, "").Pools[0]); src != "config" {
		t.Errorf("a listed pool's source %q, want config", src)
	}
	if _, ok := s.Replicas("other"); ok || s.View("other") != nil {
		t.Error("a pool without discovery reads as discovered")
	}
}

// TestNextKeepsUnchangedSections: a reload that keeps a pool's section
// keeps its running discovery (resolving nothing); one that changes it
// starts a new one; one that drops it ends it and its series.
func TestNextKeepsUnchangedSections(t *testing.T) {
	dns := dnstest.New(t)
	dns.Zone("vllm.test. 30 IN A 127.0.0.2", "other.test. 30 IN A 127.0.0.3")
	section := func(name string) string {
		return "{dns: " + name + ", port: 8000, interval: 1h, resolver: " + dns.Addr + "}"
	}
	r, _, reg := running(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := r.Next(ctx, config(t, section("vllm.test")))
	r.Commit(ctx, first)
	asked := dns.Queries()
	kept := r.Next(ctx, config(t, section("vllm.test")))
	if kept["p"] != first["p"] || dns.Queries() != asked {
		t.Errorf("an unchanged section: same discovery %t, %d queries", kept["p"] == first["p"], dns.Queries()-asked)
	}
	r.Commit(ctx, kept)
	if !r.Runs("p", first["p"]) {
		t.Error("the kept discovery is not running")
	}
	changed := r.Next(ctx, config(t, section("other.test")))
	if specs, _ := changed.Replicas("p"); changed["p"] == first["p"] || len(specs) != 1 || specs[0].Name != "127.0.0.3:8000" {
		t.Errorf("a changed section: new discovery %t, replicas %v", changed["p"] != first["p"], specs)
	}
	r.Commit(ctx, changed)
	if r.Runs("p", first["p"]) {
		t.Error("the replaced discovery still runs")
	}
	r.Commit(ctx, r.Next(ctx, config(t, "")))
	fams, _ := reg.Gather()
	for _, f := range fams {
		if len(f.GetMetric()) > 0 {
			t.Errorf("%s still has series after the discovery ended", f.GetName())
		}
	}
}

// TestEmptyBeforeAnyAnswer: a discovered pool whose name never resolved
// has no replica, and says why (ErrNoReplica naming the failure); the
// failure is logged.
func TestEmptyBeforeAnyAnswer(t *testing.T) {
	dns := dnstest.New(t)
	dns.SetMode(dnstest.ServFail)
	cfg := config(t, "{dns: vllm.test, port: 8000, interval: 1h, resolver: "+dns.Addr+"}")
	r, logs, _ := running(t)
	s := r.Next(context.Background(), cfg)
	p, err := pools.New(pools.Options{Name: "p", Model: "m", Balance: "least_outstanding", LoadFactor: 1.25, ConnectTimeout: time.Second, Staleness: time.Second,
		Health:  pools.HealthOptions{Path: "/health", Interval: time.Hour, Timeout: time.Second, UnhealthyAfter: 3, HealthyAfter: 1},
		Scrape:  pools.ScrapeOptions{Path: "/metrics", Interval: time.Hour, Timeout: time.Second},
		Outlier: pools.OutlierOptions{Consecutive5xx: 1, ConsecutiveConnectFailures: 3, MaxEjectionPercent: 100, BaseEjection: time.Hour, MaxEjection: time.Hour}}, pools.EndpointsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	if err := s.Empty(p); !errors.Is(err, upstream.ErrNoReplica) || !strings.Contains(err.Error(), `pool "p" has no replica`) {
		t.Errorf("Empty = %v, want ErrNoReplica naming the pool", err)
	}
	if v := s.View("p"); v.Result != "error" || v.LastResolve != "" || len(v.Addresses) != 0 {
		t.Errorf("view %+v", v)
	}
	if !strings.Contains(logs.String(), "discovery: resolution failed; keeping the last good set") {
		t.Errorf("log: %s", logs.String())
	}
}

// TestLogEvent: each change a discovery tells is logged with what it
// means for the pool.
func TestLogEvent(t *testing.T) {
	ev := discovery.Event{Pool: "p", Kind: "dns", Name: "vllm.test", Addrs: []string{"10.0.0.1:8000"}}
	for _, tc := range []struct {
		name   string
		result string
		err    error
		added  []string
		level  string
		want   string
	}{
		{"changed", discovery.ResultOK, nil, []string{"10.0.0.1:8000"}, "INFO", "discovery: replica set changed"},
		{"back", discovery.ResultOK, nil, nil, "INFO", "discovery: the name resolves again"},
		{"no address", discovery.ResultEmpty, discovery.ErrNoRecords, nil, "WARN", "discovery: the name has no address; keeping the last good set"},
		{"no endpoint", discovery.ResultEmpty, discovery.ErrNoReadyEndpoints, nil, "WARN", "discovery: the Service lists no ready or serving endpoint; the pool has no replica"},
		{"failed", discovery.ResultError, errors.New("SERVFAIL"), nil, "ERROR", "discovery: resolution failed; keeping the last good set"},
	} {
		r, logs, _ := running(t)
		e := ev
		e.Result, e.Err, e.Added = tc.result, tc.err, tc.added
		r.logEvent(e)
		if l := logs.String(); !strings.Contains(l, "level="+tc.level) || !strings.Contains(l, `msg="`+tc.want+`"`) || !strings.Contains(l, "pool=p") {
			t.Errorf("%s: logged %q, want %s %q", tc.name, l, tc.level, tc.want)
		}
	}
}

// TestRefuseSelf: a discovered address naming one of the gateway's own
// listeners (server.listen or server.admin_listen) is refused, logged and
// counted for its pool; other addresses pass.
func TestRefuseSelf(t *testing.T) {
	var logs bytes.Buffer
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "refused"}, []string{"pool"})
	refuse := RefuseSelf(slog.New(slog.NewTextHandler(&logs, nil)), refused, nil)("p", &policy.Server{Listen: "0.0.0.0:8080", AdminListen: "127.0.0.1:9090"})
	if !refuse("127.0.0.1:8080") {
		t.Error("the gateway's own listener was not refused")
	}
	if !refuse("127.0.0.1:9090") {
		t.Error("the gateway's admin listener was not refused")
	}
	if refuse("10.0.0.1:8000") {
		t.Error("a replica was refused")
	}
	if v := testutil.ToFloat64(refused.WithLabelValues("p")); v != 2 {
		t.Errorf("refused %v, want 2", v)
	}
	if !strings.Contains(logs.String(), "names this gateway's own listener") || !strings.Contains(logs.String(), "addr=127.0.0.1:8080") {
		t.Errorf("log: %s", logs.String())
	}
}
