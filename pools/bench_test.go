package pools_test

import (
	"context"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard/switchyard/pools"
)

// BenchmarkSelect is the cost of placing one request: Acquire (filter →
// score → pick → admit) and Release, with no HTTP. Replicas carry fresh
// scraped loads so kv_aware and p2c score real numbers; affinity cycles
// through 1024 keys.
func BenchmarkSelect(b *testing.B) {
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "s:" + strconv.Itoa(i)
	}
	for _, bal := range pools.Balancers() {
		for _, n := range []int{3, 64} {
			b.Run(bal+"/"+strconv.Itoa(n), func(b *testing.B) {
				p := newPool(b, pools.Options{Balance: bal, Replicas: specs(n), MaxInflight: 1 << 20,
					Scrape: pools.ScrapeOptions{Enabled: true}, Staleness: time.Hour})
				now := time.Now()
				for i, r := range p.Replicas() {
					r.SetLoad(&pools.Load{At: now, HasQueue: true, HasKV: true,
						Waiting: float64(i % 3), Running: float64(i % 5), KVUsage: float64(i%10) / 10})
				}
				ctx := context.Background()
				req := &pools.Request{}
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					if bal == "affinity" {
						req.Key = keys[i&1023]
						i++
					}
					r, err := p.Acquire(ctx, req, nil)
					if err != nil {
						b.Fatal(err)
					}
					p.Release(r)
				}
			})
		}
	}
}

// BenchmarkAcquireContended is one Acquire+Release cycle while 64
// goroutines compete for the slots of a saturated pool (2 replicas with
// max_inflight 2, so about 60 requests are always waiting). It measures the
// cost of admission under saturation: a release that wakes every waiter
// makes each cycle O(waiters).
func BenchmarkAcquireContended(b *testing.B) {
	const workers = 64
	p := newPool(b, pools.Options{Balance: "least_outstanding", Replicas: specs(2), MaxInflight: 2, QueueTimeout: time.Hour})
	ctx := context.Background()
	b.ReportAllocs()
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := &pools.Request{}
			for next.Add(1) <= int64(b.N) {
				r, err := p.Acquire(ctx, req, nil)
				if err != nil {
					b.Error(err)
					return
				}
				runtime.Gosched() // hold the slot while others queue
				p.Release(r)
			}
		}()
	}
	wg.Wait()
}

// BenchmarkFairAcquire is one fair Acquire+ReleaseFor cycle (a client
// request's, with its tenant) on a pool of 3 replicas with max_inflight
// 1024, with tenants in play (fairPool): each of them has held a slot for
// share_reserve, and one holds half of every replica's slots. over is
// the admission check of that one tenant, at its share, asking for one
// more slot: the check that reads the others' reserves. reserve=0s is
// the work-conserving admission, for comparison.
func BenchmarkFairAcquire(b *testing.B) {
	for _, reserve := range []time.Duration{0, 10 * time.Second} {
		for _, tenants := range []int{2, 16, 256, 1024} {
			p, names, cycle := fairPool(b, tenants, reserve)
			name := "reserve=" + reserve.String() + "/tenants=" + strconv.Itoa(tenants)
			b.Run(name+"/cycle", func(b *testing.B) {
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					cycle(names[1+i%(tenants-1)])
					i++
				}
			})
			b.Run(name+"/over", func(b *testing.B) {
				r, req := p.Replicas()[0], &pools.Request{Tenant: "t0", Fair: true}
				b.ReportAllocs()
				for b.Loop() {
					p.OverShare(r, req)
				}
			})
		}
	}
}
