package pools_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard/switchyard/pools"
)

func TestOutlierDetection(t *testing.T) {
	const base, maxEject = time.Second, 5 * time.Second
	setup := func(t *testing.T, n int, od pools.OutlierOptions) (*pools.Pool, *clock) {
		clk := newClock()
		if od.BaseEjection == 0 {
			od.BaseEjection, od.MaxEjection = base, maxEject
		}
		p := newPool(t, pools.Options{Balance: "round_robin", Replicas: specs(n), Health: pools.HealthOptions{Disabled: true}, Outlier: od},
			pools.EndpointsOptions{Now: clk.Now})
		return p, clk
	}
	defaults := pools.OutlierOptions{Consecutive5xx: 5, ConsecutiveConnectFailures: 3, MaxEjectionPercent: 50}

	t.Run("one 5xx or one timeout does not eject", func(t *testing.T) {
		p, clk := setup(t, 3, defaults)
		r := p.Replicas()[0]
		p.Observe(r, pools.Status5xx, "status 500")
		for range 20 {
			p.Observe(r, pools.Timeout, "no response headers within 1s")
		}
		if !r.Available(clk.Now()) || r.Ejections() != 0 {
			t.Errorf("ejected after one 5xx and timeouts (ejections %d)", r.Ejections())
		}
		if lastErr, _ := r.LastError(); !strings.Contains(lastErr, "no response headers") {
			t.Errorf("last error %q, want the timeout recorded", lastErr)
		}
	})

	t.Run("consecutive 5xx eject, a success in between resets", func(t *testing.T) {
		p, clk := setup(t, 3, defaults)
		r := p.Replicas()[0]
		for range 4 {
			p.Observe(r, pools.Status5xx, "status 500")
		}
		p.Observe(r, pools.Success, "")
		for range 4 {
			p.Observe(r, pools.Status5xx, "status 500")
		}
		if !r.Available(clk.Now()) {
			t.Fatal("ejected although no 5 failures were consecutive")
		}
		p.Observe(r, pools.Status5xx, "status 503")
		if got := ejectedFor(r, clk.Now()); got != base {
			t.Errorf("ejected for %s, want %s", got, base)
		}
		if _, why := r.LastError(); !strings.Contains(why, "5 consecutive 5xx") {
			t.Errorf("why %q", why)
		}
	})

	t.Run("consecutive connect failures eject", func(t *testing.T) {
		p, clk := setup(t, 3, defaults)
		r := p.Replicas()[1]
		for range 2 {
			p.Observe(r, pools.ConnectFailure, "connection refused")
		}
		// Neutral outcomes neither eject nor break the streak.
		p.Observe(r, pools.Neutral, "status 429")
		if !r.Available(clk.Now()) {
			t.Fatal("ejected after 2 connect failures")
		}
		p.Observe(r, pools.ConnectFailure, "connection refused")
		if !r.Ejected(clk.Now()) || r.Ejections() != 1 {
			t.Fatalf("not ejected after 3 connect failures")
		}
		for range 20 {
			if got := p.Pick(&pools.Request{}); got == r {
				t.Fatal("an ejected replica was chosen")
			}
		}
		clk.Advance(base)
		if !r.Available(clk.Now()) {
			t.Error("still ejected after the base ejection time")
		}
	})

	t.Run("timeouts count when asked", func(t *testing.T) {
		od := defaults
		od.CountTimeouts = true
		p, clk := setup(t, 3, od)
		r := p.Replicas()[0]
		for range 5 {
			p.Observe(r, pools.Timeout, "timeout")
		}
		if !r.Ejected(clk.Now()) {
			t.Error("5 timeouts with count_timeouts did not eject")
		}
	})

	t.Run("repeated ejections grow linearly up to the max", func(t *testing.T) {
		p, clk := setup(t, 3, pools.OutlierOptions{Consecutive5xx: 1, MaxEjectionPercent: 50})
		r := p.Replicas()[1]
		var got []time.Duration
		for range 7 {
			p.Observe(r, pools.Status5xx, "status 500")
			d := ejectedFor(r, clk.Now())
			got = append(got, d)
			// A failure while ejected (a request already in flight) does
			// not extend the ejection or count as a new one.
			p.Observe(r, pools.Status5xx, "status 502")
			if again := ejectedFor(r, clk.Now()); again != d {
				t.Errorf("a failure while ejected changed the ejection from %s to %s", d, again)
			}
			clk.Advance(d)
		}
		want := []time.Duration{base, 2 * base, 3 * base, 4 * base, 5 * base, maxEject, maxEject}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("ejection lengths (-want +got):\n%s", d)
		}
		if r.Ejections() != 7 {
			t.Errorf("ejections %d, want 7", r.Ejections())
		}
		// After behaving for longer than max_ejection it starts over.
		clk.Advance(maxEject + time.Second)
		p.Observe(r, pools.Status5xx, "status 500")
		if d := ejectedFor(r, clk.Now()); d != base {
			t.Errorf("after a quiet spell ejected for %s, want %s", d, base)
		}
	})

	t.Run("max_ejection_percent caps ejections", func(t *testing.T) {
		// One bad request retried twice used to eject 2 of 3 replicas.
		p, clk := setup(t, 3, pools.OutlierOptions{Consecutive5xx: 1, MaxEjectionPercent: 50})
		rs := p.Replicas()
		for _, r := range rs {
			p.Observe(r, pools.Status5xx, "status 500")
		}
		if got := p.HealthyCount(); got != 2 {
			t.Errorf("%d of 3 available after every replica failed, want 2 (50%% cap)", got)
		}
		if lastErr, _ := rs[2].LastError(); !strings.Contains(lastErr, "max_ejection_percent") {
			t.Errorf("last error %q does not say why it stayed", lastErr)
		}
		_ = clk
		p10, _ := setup(t, 10, pools.OutlierOptions{Consecutive5xx: 1, MaxEjectionPercent: 30})
		for _, r := range p10.Replicas() {
			p10.Observe(r, pools.Status5xx, "status 500")
		}
		if got := p10.HealthyCount(); got != 7 {
			t.Errorf("%d of 10 available with a 30%% cap, want 7", got)
		}
	})

	t.Run("the last available replica is never ejected", func(t *testing.T) {
		p, clk := setup(t, 2, pools.OutlierOptions{Consecutive5xx: 1, MaxEjectionPercent: 100})
		rs := p.Replicas()
		p.Observe(rs[0], pools.Status5xx, "down")
		for range 5 {
			p.Observe(rs[1], pools.Status5xx, "down")
		}
		if !rs[1].Available(clk.Now()) || rs[1].Ejections() != 0 {
			t.Errorf("the last available replica was ejected")
		}
		single, clk1 := setup(t, 1, pools.OutlierOptions{Consecutive5xx: 1, MaxEjectionPercent: 100})
		for range 3 {
			single.Observe(single.Replicas()[0], pools.Status5xx, "down")
		}
		if !single.Replicas()[0].Available(clk1.Now()) {
			t.Error("a single-replica pool ejected its only replica")
		}
	})

	t.Run("concurrent failures leave one replica", func(t *testing.T) {
		p, clk := setup(t, 2, pools.OutlierOptions{Consecutive5xx: 1, MaxEjectionPercent: 100})
		for i := range 500 {
			start := make(chan struct{})
			var wg sync.WaitGroup
			for _, r := range p.Replicas() {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					p.Observe(r, pools.Status5xx, "network blip")
				}()
			}
			close(start)
			wg.Wait()
			if p.HealthyCount() == 0 {
				t.Fatalf("round %d: both replicas ejected at once", i)
			}
			clk.Advance(time.Hour)
		}
	})

	t.Run("misconfigured replica with probes off is ejected", func(t *testing.T) {
		p, clk := setup(t, 2, defaults)
		r := p.Replicas()[0]
		p.Observe(r, pools.Misconfigured, "status 401: bad key")
		if !r.Ejected(clk.Now()) || r.Misconfigured() {
			t.Errorf("ejected %t misconfigured %t; with no probe to clear the mark it must be an ejection", r.Ejected(clk.Now()), r.Misconfigured())
		}
	})

	t.Run("misconfigured replica leaves rotation", func(t *testing.T) {
		clk := newClock()
		p := newPool(t, pools.Options{Balance: "round_robin", Replicas: specs(2), Outlier: defaults}, pools.EndpointsOptions{Now: clk.Now})
		r := p.Replicas()[0]
		p.Observe(r, pools.Misconfigured, "status 404: the model `m` does not exist")
		if r.Available(clk.Now()) || !r.Misconfigured() {
			t.Fatal("a replica that does not serve the model stays in rotation")
		}
		if _, why := r.LastError(); !strings.Contains(why, "misconfigured") || !strings.Contains(why, "404") {
			t.Errorf("why %q", why)
		}
		got, err := p.Acquire(context.Background(), &pools.Request{}, nil)
		if err != nil || got == r {
			t.Fatalf("Acquire = %v, %v", got, err)
		}
		p.Release(got)
	})
}
