package pools_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard/switchyard/internal/polltest"
	"github.com/switchyard/switchyard/pools"
)

// TestPriorityWaiterServedFirst: a tenant that holds a full replica and
// keeps requests queued on it does not make a priority request (the
// classifier's call) wait behind them: the next slot freed is its. Before
// the fix the classifier was one tenant among others, served after the
// flood's head and in its turn.
func TestPriorityWaiterServedFirst(t *testing.T) {
	p := newPool(t, pools.Options{Balance: "least_outstanding", Replicas: specs(1), MaxInflight: 1, QueueTimeout: time.Minute})
	reqs := []pools.Request{{Tenant: "flood"}, {Tenant: "flood"}, {Tenant: "flood"},
		{Tenant: "(classifier)", Priority: true}, {Tenant: "flood"}, {Tenant: "(classifier)", Priority: true}}
	got := serveQueue(t, p, reqs)
	want := []string{"(classifier)", "(classifier)", "flood", "flood", "flood", "flood"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("service order (-want +got):\n%s", d)
	}
}

// TestReservedSlots: with Reserved slots, other requests stop at
// MaxInflight - Reserved on each replica while a priority request still
// finds a slot at once.
func TestReservedSlots(t *testing.T) {
	p := newPool(t, pools.Options{Balance: "least_outstanding", Replicas: specs(2), MaxInflight: 2, Reserved: 1, QueueTimeout: 0})
	ctx := context.Background()
	var held []*pools.Replica
	for i := range 2 {
		r, err := p.Acquire(ctx, &pools.Request{Tenant: "hog"}, nil)
		if err != nil {
			t.Fatalf("hog request %d: %v", i, err)
		}
		held = append(held, r)
	}
	if _, err := p.Acquire(ctx, &pools.Request{Tenant: "hog"}, nil); !errors.Is(err, pools.ErrSaturated) {
		t.Fatalf("third hog request: got %v, want ErrSaturated (one slot of each replica is reserved)", err)
	}
	for i := range 2 {
		r, err := p.Acquire(ctx, &pools.Request{Tenant: "(classifier)", Priority: true}, nil)
		if err != nil {
			t.Fatalf("priority request %d: %v", i, err)
		}
		held = append(held, r)
	}
	if _, err := p.Acquire(ctx, &pools.Request{Priority: true}, nil); !errors.Is(err, pools.ErrSaturated) {
		t.Fatalf("priority request beyond max_inflight: got %v, want ErrSaturated", err)
	}
	for _, r := range held {
		p.Release(r)
	}
}

// TestReservedSlotWaiter: a priority request queued behind normal waiters
// at the reduced cap is handed a reserved slot at once, ahead of them.
func TestReservedSlotWaiter(t *testing.T) {
	p := newPool(t, pools.Options{Balance: "least_outstanding", Replicas: specs(1), MaxInflight: 2, Reserved: 1, QueueTimeout: time.Minute})
	ctx := context.Background()
	held, err := p.Acquire(ctx, &pools.Request{Tenant: "hog"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release(held)
	queued := make(chan error, 1)
	qctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		_, err := p.Acquire(qctx, &pools.Request{Tenant: "hog"}, nil)
		queued <- err
	}()
	polltest.Eventually(t, waitFor, "the hog's second request to queue", func() bool { return p.Waiters() == 1 })
	r, err := p.Acquire(ctx, &pools.Request{Tenant: "(classifier)", Priority: true}, nil)
	if err != nil {
		t.Fatalf("priority request: %v", err)
	}
	p.Release(r)
	select {
	case err := <-queued:
		t.Fatalf("the hog's queued request left the queue (%v); it must wait for a normal slot", err)
	default:
	}
	cancel()
	if err := <-queued; !errors.Is(err, context.Canceled) {
		t.Fatalf("hog's queued request: %v", err)
	}
}

// TestPriorityWaitersTakeTurns: priority requests (the classifier's calls,
// each carrying the tenant whose request it classifies) take turns by
// tenant among themselves, as other waiters do: a burst of one tenant's
// classifier calls queued first does not make another tenant's call wait
// behind all of it, and all of them still go before the other waiters.
// Before the fix the classifier's calls were one FIFO, so a tenant that
// sent many requests at once delayed every other tenant's classification
// by its whole burst.
func TestPriorityWaitersTakeTurns(t *testing.T) {
	p := newPool(t, pools.Options{Balance: "least_outstanding", Replicas: specs(1), MaxInflight: 1, QueueTimeout: time.Minute})
	var reqs []pools.Request
	for range 4 {
		reqs = append(reqs, pools.Request{Tenant: "flood", Priority: true})
	}
	reqs = append(reqs, pools.Request{Tenant: "other"}, pools.Request{Tenant: "victim", Priority: true}, pools.Request{Tenant: "victim", Priority: true})
	got := serveQueue(t, p, reqs)
	want := []string{"flood", "victim", "flood", "victim", "flood", "flood", "other"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("service order (-want +got):\n%s", d)
	}
}
