package pools_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard/switchyard/internal/polltest"
	"github.com/switchyard/switchyard/pools"
	"github.com/switchyard/switchyard/vllmsim"
)

// TestFIFOAdmission: with N requests queued for a full replica, released
// slots go to them in arrival order, and a newcomer does not overtake.
func TestFIFOAdmission(t *testing.T) {
	const n = 8
	p := newPool(t, pools.Options{Balance: "least_outstanding", Replicas: specs(1), MaxInflight: 1, QueueTimeout: time.Minute})
	ctx := context.Background()
	held, err := p.Acquire(ctx, &pools.Request{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	order := make(chan int, n+1)
	var wg sync.WaitGroup
	start := func(i int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := p.Acquire(ctx, &pools.Request{}, nil)
			if err != nil {
				t.Error(err)
				return
			}
			order <- i
			p.Release(r)
		}()
	}
	for i := range n {
		start(i)
		polltest.Eventually(t, waitFor, "waiter to queue", func() bool { return p.Waiters() == int64(i+1) })
	}
	p.Release(held)
	wg.Wait()
	close(order)
	var got []int
	for i := range order {
		got = append(got, i)
	}
	want := []int{0, 1, 2, 3, 4, 5, 6, 7}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("service order (-want +got):\n%s", d)
	}
	if p.Waiters() != 0 || p.Replicas()[0].Inflight() != 0 {
		t.Errorf("waiters %d in flight %d after all ended", p.Waiters(), p.Replicas()[0].Inflight())
	}
}

// TestNoOvertaking: an Acquire arriving while others wait queues behind
// them even when it lands right after a release.
func TestNoOvertaking(t *testing.T) {
	p := newPool(t, pools.Options{Balance: "round_robin", Replicas: specs(1), MaxInflight: 1, QueueTimeout: time.Minute})
	ctx := context.Background()
	held, _ := p.Acquire(ctx, &pools.Request{}, nil)
	first := acquireAsync(ctx, p, nil)
	polltest.Eventually(t, waitFor, "the first waiter", func() bool { return p.Waiters() == 1 })
	p.Release(held)
	a := receive(t, first)
	if a.err != nil {
		t.Fatal(a.err)
	}
	// The slot was handed over, never free: a newcomer now must wait.
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if r, err := p.Acquire(cctx, &pools.Request{}, nil); err == nil {
		p.Release(r)
		t.Fatal("a newcomer got a slot while the replica was full")
	}
	p.Release(a.r)
}

// TestSharedEndpoint: one server listed in two pools is one endpoint with
// one in-flight count, so a cap holds across both.
// sharedServerPools builds, on one registry, one pool per cap with a single
// replica, all on the same server.
func sharedServerPools(t *testing.T, caps ...int) (*pools.Endpoints, []*pools.Pool) {
	t.Helper()
	reg := pools.NewEndpoints(pools.EndpointsOptions{})
	t.Cleanup(reg.Close)
	u := &url.URL{Scheme: "http", Host: "127.0.0.1:9"}
	var opts []pools.Options
	for i, c := range caps {
		opts = append(opts, withDefaults(pools.Options{Name: fmt.Sprint("p", i), Balance: "round_robin", MaxInflight: c,
			QueueTimeout: time.Minute, Replicas: []pools.ReplicaSpec{{Name: fmt.Sprint("r", i), URL: u}}}))
	}
	ps, err := reg.Apply(opts)
	if err != nil {
		t.Fatal(err)
	}
	return reg, ps
}

func TestSharedEndpoint(t *testing.T) {
	reg, ps := sharedServerPools(t, 2, 2)
	if ps[0].Replicas()[0].Endpoint != ps[1].Replicas()[0].Endpoint || len(reg.Endpoints()) != 1 {
		t.Fatal("the same URL in two pools made two endpoints")
	}
	ctx := context.Background()
	a, _ := ps[0].Acquire(ctx, &pools.Request{}, nil)
	b, _ := ps[1].Acquire(ctx, &pools.Request{}, nil)
	if n := a.Inflight(); n != 2 {
		t.Fatalf("in flight %d, want 2 over both pools", n)
	}
	ch := acquireAsync(ctx, ps[1], nil)
	polltest.Eventually(t, waitFor, "the classifier request to wait", func() bool { return ps[1].Waiters() == 1 })
	ps[0].Release(a)
	got := receive(t, ch)
	if got.err != nil || got.r.Name != "r1" {
		t.Fatalf("got %v, %v", got.r, got.err)
	}
	ps[1].Release(got.r)
	ps[1].Release(b)
}

// TestWaiterSurvivesReload reproduces the lost wake-up: a request queued on
// a pool built by one generation must get the slot that a request of the
// same replica releases after a reload rebuilt the pool. Before the
// registry, it waited out the whole queue timeout (503 after 5 s).
func TestWaiterSurvivesReload(t *testing.T) {
	reg := pools.NewEndpoints(pools.EndpointsOptions{})
	t.Cleanup(reg.Close)
	o := withDefaults(pools.Options{Name: "qwen", Balance: "least_outstanding", MaxInflight: 1, QueueTimeout: time.Minute,
		Replicas: []pools.ReplicaSpec{{Name: "q0", URL: &url.URL{Scheme: "http", Host: "127.0.0.1:9"}}}})
	gen1, err := reg.Apply([]pools.Options{o})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a, _ := gen1[0].Acquire(ctx, &pools.Request{}, nil)
	o.QueueTimeout = 2 * time.Minute // a reload that changes only a pool setting
	gen2, err := reg.Apply([]pools.Options{o})
	if err != nil {
		t.Fatal(err)
	}
	ch := acquireAsync(ctx, gen2[0], nil)
	polltest.Eventually(t, waitFor, "B to queue", func() bool { return gen2[0].Waiters() == 1 })
	start := time.Now()
	gen1[0].Release(a) // A finishes on the old generation's pool
	b := receive(t, ch)
	if b.err != nil {
		t.Fatalf("B: %v", b.err)
	}
	if el := time.Since(start); el > 30*time.Second {
		t.Errorf("B waited %s after A ended", el)
	}
	gen2[0].Release(b.r)
}

// TestRemovedEndpointClosesConnections: after a reload removes a replica,
// its requests in flight finish, then its idle connections are closed and
// its loops stop.
func TestRemovedEndpointClosesConnections(t *testing.T) {
	var open, requests atomic.Int64
	sim := vllmsim.New(vllmsim.Profile{Model: "m"})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		sim.ServeHTTP(w, r)
	}))
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			open.Add(1)
		case http.StateClosed, http.StateHijacked:
			open.Add(-1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	u := mustURL(t, srv.URL)
	other := &url.URL{Scheme: "http", Host: "127.0.0.1:9"}

	reg := pools.NewEndpoints(pools.EndpointsOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	t.Cleanup(reg.Close)
	o := withDefaults(pools.Options{Name: "p", Balance: "round_robin", Replicas: []pools.ReplicaSpec{{Name: "a", URL: u}},
		Health: pools.HealthOptions{Interval: 10 * time.Millisecond}})
	ps, err := reg.Apply([]pools.Options{o})
	if err != nil {
		t.Fatal(err)
	}
	reg.Start(ctx)
	p := ps[0]
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := p.Acquire(ctx, &pools.Request{}, nil)
			if err != nil {
				t.Error(err)
				return
			}
			defer p.Release(r)
			if err := complete(ctx, p, r, chatBody); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	polltest.Eventually(t, waitFor, "connections to be open", func() bool { return open.Load() > 0 })
	ep := p.Replicas()[0].Endpoint

	o.Replicas = []pools.ReplicaSpec{{Name: "b", URL: other}}
	o.Health.Disabled = true
	now, err := reg.Apply([]pools.Options{o})
	if err != nil {
		t.Fatal(err)
	}
	if !ep.Retired() || ep.Available(time.Now()) {
		t.Error("the removed endpoint still takes requests")
	}
	polltest.Eventually(t, waitFor, "the removed endpoint's connections to close", func() bool { return open.Load() == 0 })
	// No probe reaches it any more: its loops have ended, and the new
	// pool's probes go to its new replica only.
	waitLoops(t, ep, "the removed endpoint's loops")
	before := requests.Load()
	now[0].ProbeOnce(ctx)
	if after := requests.Load(); after != before {
		t.Errorf("%d requests reached the removed endpoint after removal", after-before)
	}
}

// TestSharedEndpointEjection: a server listed in two pools is ejected only
// when every pool listing it can spare it.
func TestSharedEndpointEjection(t *testing.T) {
	reg := pools.NewEndpoints(pools.EndpointsOptions{})
	t.Cleanup(reg.Close)
	e := &url.URL{Scheme: "http", Host: "127.0.0.1:9"}
	f := &url.URL{Scheme: "http", Host: "127.0.0.1:10"}
	od := pools.OutlierOptions{Consecutive5xx: 1, MaxEjectionPercent: 100}
	a := withDefaults(pools.Options{Name: "a", Balance: "round_robin", Outlier: od, Health: pools.HealthOptions{Disabled: true},
		Replicas: []pools.ReplicaSpec{{Name: "e", URL: e}, {Name: "f", URL: f}}})
	b := withDefaults(pools.Options{Name: "b", Balance: "round_robin", Outlier: od, Health: pools.HealthOptions{Disabled: true},
		Replicas: []pools.ReplicaSpec{{Name: "e", URL: e}}})
	ps, err := reg.Apply([]pools.Options{a, b})
	if err != nil {
		t.Fatal(err)
	}
	r := ps[0].Replica("e")
	ps[0].Observe(r, pools.Status5xx, "status 500")
	if !r.Available(time.Now()) {
		t.Fatal("ejected the only replica of pool b")
	}
	if lastErr, _ := r.LastError(); !strings.Contains(lastErr, `last available replica of pool "b"`) {
		t.Errorf("last error %q", lastErr)
	}
}

// TestMixedCapsDoNotBlock: a waiter of a pool with a low max_inflight at the
// head of a shared server's queue does not hold back a waiter of a pool
// whose higher cap the server can still take.
func TestMixedCapsDoNotBlock(t *testing.T) {
	_, ps := sharedServerPools(t, 1, 4) // a classifier pool, a traffic pool
	ctx := context.Background()
	held, err := ps[1].Acquire(ctx, &pools.Request{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	head := acquireAsync(ctx, ps[0], nil)
	polltest.Eventually(t, waitFor, "the classifier request to queue", func() bool { return ps[0].Waiters() == 1 })
	got := receive(t, acquireAsync(ctx, ps[1], nil))
	if got.err != nil {
		t.Fatalf("traffic request: %v", got.err)
	}
	ps[1].Release(got.r)
	ps[1].Release(held)
	if a := receive(t, head); a.err != nil {
		t.Fatalf("classifier request: %v", a.err)
	} else {
		ps[0].Release(a.r)
	}
}

// TestControlConnectionsApart: health probes and scrapes reach a server
// over connections of their own, never over one that carries requests.
// (Before, they shared the requests' pool, and a probe cancelled by a
// reload as its body-less answer arrived could close a connection the
// transport had just handed to a request, which failed with "context
// canceled": seen once in a reload storm.)
func TestControlConnectionsApart(t *testing.T) {
	s := vllmsim.New(vllmsim.Profile{Model: "m"})
	var mu sync.Mutex
	control, data := map[string]bool{}, map[string]bool{}
	srv := serve(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		if strings.HasPrefix(r.URL.Path, "/v1/") {
			data[r.RemoteAddr] = true
		} else {
			control[r.RemoteAddr] = true
		}
		mu.Unlock()
		s.ServeHTTP(w, r)
	}))
	reg := pools.NewEndpoints(pools.EndpointsOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	t.Cleanup(reg.Close)
	o := withDefaults(pools.Options{Name: "p", Balance: "round_robin", Replicas: []pools.ReplicaSpec{{Name: "a", URL: srv.URL}},
		Health: pools.HealthOptions{Interval: 2 * time.Millisecond},
		Scrape: pools.ScrapeOptions{Enabled: true, Path: "/metrics", Interval: 2 * time.Millisecond, Timeout: time.Second}})
	ps, err := reg.Apply([]pools.Options{o})
	if err != nil {
		t.Fatal(err)
	}
	reg.Start(ctx)
	p := ps[0]
	probes := func() int { mu.Lock(); defer mu.Unlock(); return len(control) }
	for i := 0; i < 50 || probes() == 0; i++ {
		r, err := p.Acquire(ctx, &pools.Request{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = complete(ctx, p, r, chatBody)
		p.Release(r)
		if err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for addr := range control {
		if data[addr] {
			t.Errorf("connection %s carried both probes or scrapes and requests", addr)
		}
	}
}
