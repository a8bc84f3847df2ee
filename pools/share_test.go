package pools_test

import (
	"context"
	"testing"
	"time"

	"github.com/switchyard/switchyard/pools"
)

// TestShareBoundsAHog: a tenant that took every slot of a replica while no
// one waited, and keeps requests queued, is given no freed slot while
// another tenant waits below its share (half, at equal weights): the freed
// slots go to the other tenant until both hold two of four (issue 31,
// item 4). Before the fix the queue's fair order alone gave the hog every
// other freed slot, so it kept three of four. A slot nobody under its
// share can use still goes to the hog: none stays idle.
func TestShareBoundsAHog(t *testing.T) {
	p := newPool(t, pools.Options{Balance: "least_outstanding", Replicas: specs(1), MaxInflight: 4, QueueTimeout: time.Minute})
	ctx := context.Background()
	type held struct {
		r   *pools.Replica
		req *pools.Request
	}
	var hog []held
	for range 4 {
		req := &pools.Request{Tenant: "hog", Fair: true}
		r, err := p.Acquire(ctx, req, nil)
		if err != nil {
			t.Fatal(err)
		}
		hog = append(hog, held{r, req})
	}
	got := make(chan held, 16)
	queue := func(tenant string) {
		req := &pools.Request{Tenant: tenant, Fair: true}
		n := p.Waiters()
		go func() {
			r, err := p.Acquire(ctx, req, nil)
			if err != nil {
				t.Error(err)
				return
			}
			got <- held{r, req}
		}()
		eventually(t, "the request to queue", func() bool { return p.Waiters() == n+1 })
	}
	for range 3 {
		queue("hog")
	}
	queue("victim")
	queue("victim")
	var order []string
	var victims []held
	for i := range 2 {
		p.ReleaseFor(hog[i].r, hog[i].req)
		h := <-got
		order = append(order, h.req.Tenant)
		if h.req.Tenant == "victim" {
			victims = append(victims, h)
		} else {
			hog = append(hog, h)
		}
	}
	if order[0] != "victim" || order[1] != "victim" {
		t.Fatalf("freed slots went to %v, want [victim victim] (the hog held its share)", order)
	}
	// The victim has no one left waiting: its freed slot goes to the hog.
	p.ReleaseFor(victims[0].r, victims[0].req)
	if h := <-got; h.req.Tenant != "hog" {
		t.Fatalf("a slot no one under its share could use went to %s", h.req.Tenant)
	} else {
		hog = append(hog, h)
	}
	p.ReleaseFor(victims[1].r, victims[1].req)
	for _, h := range hog[2:] {
		p.ReleaseFor(h.r, h.req)
	}
	for range 2 { // the hog's last waiters
		h := <-got
		p.ReleaseFor(h.r, h.req)
	}
	if w := p.Waiters(); w != 0 {
		t.Errorf("%d still waiting", w)
	}
}
