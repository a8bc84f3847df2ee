package pools_test

import (
	"context"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard/switchyard/internal/polltest"
	"github.com/switchyard/switchyard/pools"
)

// serveQueue holds the one slot of p's replica, queues the requests of
// tenants (in that order, each waiting to be queued before the next), then
// releases the slot and returns the order in which they were served; each
// served request releases at once.
func serveQueue(t *testing.T, p *pools.Pool, reqs []pools.Request) []string {
	t.Helper()
	ctx := context.Background()
	held, err := p.Acquire(ctx, &pools.Request{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	for i := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := p.Acquire(ctx, &reqs[i], nil)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, reqs[i].Tenant)
			mu.Unlock()
			p.Release(r)
		}()
		polltest.Eventually(t, waitFor, "the request to queue", func() bool { return p.Waiters() == int64(i+1) })
	}
	p.Release(held)
	wg.Wait()
	return order
}

// TestFairAdmissionAcrossKeys: a burst from one key queued first does not
// make another key wait behind all of it: waiting keys take turns (in
// proportion to their weights), and each key's own requests keep their
// order. Before the fix admission was one FIFO per replica, and the
// second key's request was served after the whole burst.
func TestFairAdmissionAcrossKeys(t *testing.T) {
	p := newPool(t, pools.Options{Balance: "least_outstanding", Replicas: specs(1), MaxInflight: 1, QueueTimeout: time.Minute})
	var reqs []pools.Request
	for range 6 {
		reqs = append(reqs, pools.Request{Tenant: "flood"})
	}
	reqs = append(reqs, pools.Request{Tenant: "victim"}, pools.Request{Tenant: "victim"})
	got := serveQueue(t, p, reqs)
	want := []string{"flood", "victim", "flood", "victim", "flood", "flood", "flood", "flood"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("service order (-want +got):\n%s", d)
	}

	// Weights: a key of weight 2 gets two turns for one.
	reqs = nil
	for range 4 {
		reqs = append(reqs, pools.Request{Tenant: "one", Weight: 1})
	}
	for range 4 {
		reqs = append(reqs, pools.Request{Tenant: "two", Weight: 2})
	}
	got = serveQueue(t, p, reqs)
	want = []string{"one", "two", "two", "one", "two", "two", "one", "one"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("weighted service order (-want +got):\n%s", d)
	}

	// One key alone is served first come, first served.
	reqs = nil
	for range 5 {
		reqs = append(reqs, pools.Request{})
	}
	if got := serveQueue(t, p, reqs); len(got) != 5 {
		t.Errorf("served %d of 5", len(got))
	}
}

// TestWaitersFollowReload: requests queued for a replica that a reload
// replaces are served by the new replica at once (before the fix, they
// waited out the whole queue_timeout: 5 of 6 got 503 after 20 s while the
// new replica sat idle), and a reload that raises max_inflight dispatches
// the queued requests at once.
func TestWaitersFollowReload(t *testing.T) {
	reg := pools.NewEndpoints(pools.EndpointsOptions{})
	t.Cleanup(reg.Close)
	old := &url.URL{Scheme: "http", Host: "127.0.0.1:9"}
	o := withDefaults(pools.Options{Name: "p", Balance: "least_outstanding", MaxInflight: 1, QueueTimeout: time.Hour,
		Replicas: []pools.ReplicaSpec{{Name: "old", URL: old}}})
	gen1, err := reg.Apply([]pools.Options{o})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	held, _ := gen1[0].Acquire(ctx, &pools.Request{}, nil)
	var chans []<-chan acquired
	for i := range 3 {
		chans = append(chans, acquireAsync(ctx, gen1[0], nil))
		polltest.Eventually(t, waitFor, "waiters to queue", func() bool { return gen1[0].Waiters() == int64(i+1) })
	}
	// The reload replaces the replica and allows 3 at once.
	o.MaxInflight = 3
	o.Replicas = []pools.ReplicaSpec{{Name: "new", URL: &url.URL{Scheme: "http", Host: "127.0.0.1:10"}}}
	if _, err := reg.Apply([]pools.Options{o}); err != nil {
		t.Fatal(err)
	}
	for i, ch := range chans {
		a := receive(t, ch) // within waitFor, far below the hour of queue_timeout
		if a.err != nil || a.r.Name != "new" {
			t.Fatalf("waiter %d: %v %v", i, a.r, a.err)
		}
		gen1[0].Release(a.r)
	}
	gen1[0].Release(held)

	// Raising max_inflight on the same replica releases its queue.
	o.MaxInflight = 1
	gen3, err := reg.Apply([]pools.Options{o})
	if err != nil {
		t.Fatal(err)
	}
	held, _ = gen3[0].Acquire(ctx, &pools.Request{}, nil)
	if held == nil {
		t.Fatal("no slot on the reloaded pool")
	}
	chans = chans[:0]
	for i := range 2 {
		chans = append(chans, acquireAsync(ctx, gen3[0], nil))
		polltest.Eventually(t, waitFor, "waiters to queue", func() bool { return gen3[0].Waiters() == int64(i+1) })
	}
	o.MaxInflight = 3
	if _, err := reg.Apply([]pools.Options{o}); err != nil {
		t.Fatal(err)
	}
	for i, ch := range chans {
		a := receive(t, ch)
		if a.err != nil {
			t.Fatalf("waiter %d after max_inflight was raised: %v", i, a.err)
		}
		defer gen3[0].Release(a.r)
	}
	gen3[0].Release(held)
}
