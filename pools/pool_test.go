package pools_test

import (
	"context"
	"errors"
	"os"
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

func TestUnknownBalancer(t *testing.T) {
	_, err := pools.New(pools.Options{Name: "p", Balance: "fastest"}, pools.EndpointsOptions{})
	if err == nil || !strings.Contains(err.Error(), `unknown balancer "fastest"`) || !strings.Contains(err.Error(), "least_outstanding") {
		t.Errorf("error %v, want one naming the balancer and the valid names", err)
	}
}

// acquireAsync starts Acquire on its own goroutine.
func acquireAsync(ctx context.Context, p *pools.Pool, exclude func(*pools.Replica) bool) <-chan acquired {
	ch := make(chan acquired, 1)
	go func() {
		r, err := p.Acquire(ctx, &pools.Request{}, exclude)
		ch <- acquired{r, err}
	}()
	return ch
}

type acquired struct {
	r   *pools.Replica
	err error
}

func receive(t *testing.T, ch <-chan acquired) acquired {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(waitFor):
		t.Fatal("Acquire did not return")
		return acquired{}
	}
}

func TestMaxInflightAdmission(t *testing.T) {
	const maxIn = 2
	ctx := context.Background()

	t.Run("waiter gets the released slot", func(t *testing.T) {
		p := newPool(t, pools.Options{Balance: "round_robin", Replicas: specs(1), MaxInflight: maxIn, QueueTimeout: time.Minute})
		var held []*pools.Replica
		for range maxIn {
			r, err := p.Acquire(ctx, &pools.Request{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, r)
		}
		if n := p.Replicas()[0].Inflight(); n != maxIn {
			t.Fatalf("in flight %d, want %d", n, maxIn)
		}
		ch := acquireAsync(ctx, p, nil)
		polltest.Eventually(t, waitFor, "the third Acquire to wait", func() bool { return p.Waiters() == 1 })
		select {
		case a := <-ch:
			t.Fatalf("third Acquire returned (%v, %v) while the replica was full", a.r, a.err)
		default:
		}
		p.Release(held[0])
		a := receive(t, ch)
		if a.err != nil || a.r != held[1] {
			t.Fatalf("waiter got (%v, %v), want the released slot", a.r, a.err)
		}
		if n := a.r.Inflight(); n != maxIn {
			t.Errorf("in flight %d after hand-over, want %d", n, maxIn)
		}
		p.Release(a.r)
		p.Release(held[1])
		if p.Waiters() != 0 {
			t.Errorf("waiters %d, want 0", p.Waiters())
		}
	})

	t.Run("saturated after the queue timeout", func(t *testing.T) {
		for _, qt := range []time.Duration{0, 40 * time.Millisecond} {
			p := newPool(t, pools.Options{Balance: "least_outstanding", Replicas: specs(2), MaxInflight: 1, QueueTimeout: qt})
			a, _ := p.Acquire(ctx, &pools.Request{}, nil)
			b, _ := p.Acquire(ctx, &pools.Request{}, nil)
			if a == nil || b == nil || a == b {
				t.Fatalf("two slots on two replicas: got %v, %v", a, b)
			}
			start := time.Now()
			_, err := p.Acquire(ctx, &pools.Request{}, nil)
			if !errors.Is(err, pools.ErrSaturated) {
				t.Fatalf("queue timeout %s: error %v, want ErrSaturated", qt, err)
			}
			if el := time.Since(start); el < qt {
				t.Errorf("queue timeout %s: gave up after %s", qt, el)
			}
			if p.Waiters() != 0 {
				t.Errorf("waiters %d after timeout", p.Waiters())
			}
			p.Release(a)
			p.Release(b)
		}
	})

	t.Run("context cancelled while waiting", func(t *testing.T) {
		p := newPool(t, pools.Options{Balance: "p2c", Replicas: specs(1), MaxInflight: 1, QueueTimeout: time.Minute})
		r, _ := p.Acquire(ctx, &pools.Request{}, nil)
		cctx, cancel := context.WithCancel(ctx)
		ch := acquireAsync(cctx, p, nil)
		polltest.Eventually(t, waitFor, "Acquire to wait", func() bool { return p.Waiters() == 1 })
		cancel()
		if a := receive(t, ch); !errors.Is(a.err, context.Canceled) || a.r != nil {
			t.Errorf("got (%v, %v), want context.Canceled", a.r, a.err)
		}
		if p.Waiters() != 0 || r.Inflight() != 1 {
			t.Errorf("waiters %d in flight %d, want 0 and 1", p.Waiters(), r.Inflight())
		}
		p.Release(r)
	})

	t.Run("never more than max in flight", func(t *testing.T) {
		for _, bal := range pools.Balancers() {
			p := newPool(t, pools.Options{Balance: bal, Replicas: specs(3), MaxInflight: 2, QueueTimeout: waitFor, Rand: seeded(1)})
			var (
				wg   sync.WaitGroup
				peak atomic.Int64
				fail atomic.Value
			)
			for i := range 24 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 20 {
						r, err := p.Acquire(ctx, &pools.Request{Key: string(rune('a' + i%3))}, nil)
						if err != nil {
							fail.Store(err)
							return
						}
						n := r.Inflight()
						for {
							old := peak.Load()
							if n <= old || peak.CompareAndSwap(old, n) {
								break
							}
						}
						p.Release(r)
					}
				}()
			}
			wg.Wait()
			if err, _ := fail.Load().(error); err != nil {
				t.Fatalf("%s: %v", bal, err)
			}
			if peak.Load() > 2 {
				t.Errorf("%s: a replica reached %d in flight, max_inflight is 2", bal, peak.Load())
			}
			for _, r := range p.Replicas() {
				if r.Inflight() != 0 {
					t.Errorf("%s: %s left with %d in flight", bal, r.Name, r.Inflight())
				}
			}
		}
	})
}

func TestNoReplicaAndExclude(t *testing.T) {
	ctx := context.Background()
	s := startSim(t, vllmsim.Profile{Model: "m"})
	s.Sim.SetFaults(vllmsim.Faults{Unhealthy: true})
	p := newPool(t, pools.Options{Balance: "round_robin", Replicas: simSpecs(s, s, s), MaxInflight: 1, QueueTimeout: time.Minute,
		Health: pools.HealthOptions{UnhealthyAfter: 1}})

	t.Run("exclude skips replicas", func(t *testing.T) {
		for range 9 {
			r, err := p.Acquire(ctx, &pools.Request{}, func(r *pools.Replica) bool { return r.Name == "r1" })
			if err != nil {
				t.Fatal(err)
			}
			if r.Name == "r1" {
				t.Fatal("Acquire chose an excluded replica")
			}
			p.Release(r)
		}
	})
	t.Run("all excluded", func(t *testing.T) {
		if _, err := p.Acquire(ctx, &pools.Request{}, func(*pools.Replica) bool { return true }); !errors.Is(err, pools.ErrNoReplica) {
			t.Errorf("error %v, want ErrNoReplica", err)
		}
	})
	t.Run("excluded and full is saturated, not waiting forever", func(t *testing.T) {
		r, _ := p.Acquire(ctx, &pools.Request{}, func(r *pools.Replica) bool { return r.Name != "r0" })
		cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		_, err := p.Acquire(cctx, &pools.Request{}, func(r *pools.Replica) bool { return r.Name != "r0" })
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("error %v, want the caller's deadline while r0 is full", err)
		}
		p.Release(r)
	})
	t.Run("all unhealthy", func(t *testing.T) {
		p.ProbeOnce(ctx)
		if n := p.HealthyCount(); n != 0 {
			t.Fatalf("healthy %d after failed probes, want 0", n)
		}
		start := time.Now()
		if _, err := p.Acquire(ctx, &pools.Request{}, nil); !errors.Is(err, pools.ErrNoReplica) {
			t.Errorf("error %v, want ErrNoReplica", err)
		}
		if el := time.Since(start); el > time.Second {
			t.Errorf("ErrNoReplica took %s; it must not wait for the queue timeout", el)
		}
		if p.Pick(&pools.Request{}) != nil {
			t.Error("Pick chose an unhealthy replica")
		}
	})
}

// ejectedFor reports how long r stays ejected from now on, to the
// nanosecond, by bisecting Ejected on the injected clock.
func ejectedFor(r *pools.Replica, now time.Time) time.Duration {
	if !r.Ejected(now) {
		return 0
	}
	lo, hi := time.Duration(0), 24*time.Hour
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if r.Ejected(now.Add(mid)) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi
}

func TestActiveHealth(t *testing.T) {
	s := startSim(t, vllmsim.Profile{Model: "m"})
	other := startSim(t, vllmsim.Profile{Model: "m"})
	type change struct {
		replica string
		healthy bool
	}
	var (
		mu      sync.Mutex
		changes []change
	)
	clk := newClock()
	p := newPool(t, pools.Options{Balance: "round_robin", Replicas: simSpecs(s, other),
		Health:  pools.HealthOptions{UnhealthyAfter: 3, HealthyAfter: 2, Timeout: time.Second},
		Outlier: pools.OutlierOptions{Consecutive5xx: 1, BaseEjection: time.Hour, MaxEjection: time.Hour}},
		pools.EndpointsOptions{Now: clk.Now, OnChange: func(r *pools.Replica, healthy bool, _ string) {
			mu.Lock()
			changes = append(changes, change{r.Name, healthy})
			mu.Unlock()
		}})
	r := p.Replica("r0")
	// A passive ejection that active probes later overrule.
	p.Observe(r, pools.Status5xx, "status 500")

	steps := []struct {
		name      string
		unhealthy bool
		want      bool
	}{
		{"1st failed probe", true, true},
		{"2nd failed probe", true, true},
		{"3rd failed probe", true, false},
		{"4th failed probe", true, false},
		{"1st passed probe", false, false},
		{"a failure resets the count", true, false},
		{"1st passed probe again", false, false},
		{"2nd passed probe", false, true},
	}
	for _, st := range steps {
		s.Sim.SetFaults(vllmsim.Faults{Unhealthy: st.unhealthy})
		p.ProbeOnce(context.Background())
		if r.Healthy() != st.want {
			t.Fatalf("%s: healthy %t, want %t", st.name, r.Healthy(), st.want)
		}
		if !p.Replica("r1").Healthy() {
			t.Fatalf("%s: the healthy replica was marked down", st.name)
		}
	}
	if r.Ejected(clk.Now()) {
		t.Error("readmitted by probes but still passively ejected")
	}
	mu.Lock()
	defer mu.Unlock()
	if d := cmp.Diff([]change{{"r0", false}, {"r0", false}, {"r0", true}}, changes, cmp.AllowUnexported(change{})); d != "" {
		t.Errorf("OnChange calls (-want +got):\n%s", d)
	}
}

// TestRunHealthStops: the probe loop runs until its context ends and
// probes at once on start.
func TestRunHealthStops(t *testing.T) {
	s := startSim(t, vllmsim.Profile{Model: "m"})
	s.Sim.SetFaults(vllmsim.Faults{Unhealthy: true})
	p := newPool(t, pools.Options{Balance: "round_robin", Replicas: simSpecs(s),
		Health: pools.HealthOptions{Interval: 5 * time.Millisecond, UnhealthyAfter: 2, HealthyAfter: 2}})
	ctx, cancel := context.WithCancel(context.Background())
	p.Endpoints().Start(ctx)
	polltest.Eventually(t, waitFor, "the replica to be marked unhealthy", func() bool { return p.HealthyCount() == 0 })
	s.Sim.SetFaults(vllmsim.Faults{})
	polltest.Eventually(t, waitFor, "the replica to be readmitted", func() bool { return p.HealthyCount() == 1 })
	cancel()
	waitLoops(t, p.Replicas()[0].Endpoint, "the health loop after its context ended")
	// With the loop ended, a failing replica stays as it was.
	s.Sim.SetFaults(vllmsim.Faults{Unhealthy: true})
	if p.HealthyCount() != 1 {
		t.Error("the replica changed after its health loop ended")
	}
}

func TestParseLoad(t *testing.T) {
	type view struct {
		Running, Waiting, KVUsage float64
		HasKV, HasQueue, Legacy   bool
		Missing                   []string
	}
	see := func(l *pools.Load) view {
		return view{l.Running, l.Waiting, l.KVUsage, l.HasKV, l.HasQueue, l.Legacy, l.Missing()}
	}
	captured, err := os.ReadFile("../testdata/wire/metrics-after-load.prom") // captured from a vLLM-compatible server
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		text string
		want view
	}{
		{"captured vLLM-compatible metrics", string(captured), view{HasKV: true, HasQueue: true}},
		{"current names", `
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="a"} 3
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="a"} 7
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="a"} 0.42
`, view{Running: 3, Waiting: 7, KVUsage: 0.42, HasKV: true, HasQueue: true}},
		{"legacy KV name", `
vllm:num_requests_running{model_name="a"} 1
vllm:num_requests_waiting{model_name="a"} 0
vllm:gpu_cache_usage_perc{model_name="a"} 0.9
`, view{Running: 1, KVUsage: 0.9, HasKV: true, HasQueue: true, Legacy: true}},
		{"current name wins over legacy", `
vllm:kv_cache_usage_perc{model_name="a"} 0.25
vllm:gpu_cache_usage_perc{model_name="a"} 0.9
`, view{KVUsage: 0.25, HasKV: true, Missing: []string{"vllm:num_requests_waiting", "vllm:num_requests_running"}}},
		{"several models: queues add, KV takes the max", `
vllm:num_requests_running{model_name="a"} 1
vllm:num_requests_running{model_name="b"} 2
vllm:num_requests_waiting{model_name="a"} 4
vllm:num_requests_waiting{model_name="b"} 5
vllm:kv_cache_usage_perc{model_name="a"} 0.5
vllm:kv_cache_usage_perc{model_name="b"} 0.75
`, view{Running: 3, Waiting: 9, KVUsage: 0.75, HasKV: true, HasQueue: true}},
		{"percent instead of a fraction", "vllm:kv_cache_usage_perc 85\n", view{KVUsage: 0.85, HasKV: true,
			Missing: []string{"vllm:num_requests_waiting", "vllm:num_requests_running"}}},
		{"no vLLM series", "process_open_fds 7\n", view{Missing: []string{"vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, err := pools.ParseLoad(strings.NewReader(strings.TrimLeft(tc.text, "\n")))
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, see(l)); d != "" {
				t.Errorf("load (-want +got):\n%s", d)
			}
		})
	}
	t.Run("malformed", func(t *testing.T) {
		if _, err := pools.ParseLoad(strings.NewReader("vllm:num_requests_running{ 3\n")); err == nil {
			t.Error("no error")
		}
	})
}

func TestScrapeFailureIsRecorded(t *testing.T) {
	clk := newClock()
	p := newPool(t, pools.Options{Balance: "kv_aware", Replicas: []pools.ReplicaSpec{{Name: "gone", URL: mustURL(t, refusedURL(t))}},
		Scrape: pools.ScrapeOptions{Enabled: true}}, pools.EndpointsOptions{Now: clk.Now})
	l := p.ScrapeOnce(context.Background(), p.Replicas()[0])
	if l.Err == "" || !l.At.Equal(clk.Now()) || p.Replicas()[0].CurrentLoad() != l {
		t.Errorf("load %+v", *l)
	}
	if q := p.Replicas()[0].Queue(clk.Now(), time.Hour); q != 0 {
		t.Errorf("queue %v from a failed scrape", q)
	}
}

// TestEjectionConcurrentWithProbes: passive ejection on the request path
// and verdicts of the probe loop change the same replica at once; the race
// detector checks that they share its state safely.
func TestEjectionConcurrentWithProbes(t *testing.T) {
	s := startSim(t, vllmsim.Profile{Model: "m"})
	other := startSim(t, vllmsim.Profile{Model: "m"})
	clk := newClock()
	var changes atomic.Int64
	p := newPool(t, pools.Options{Balance: "round_robin", Replicas: simSpecs(s, other),
		Health: pools.HealthOptions{UnhealthyAfter: 1, HealthyAfter: 1}, Outlier: pools.OutlierOptions{Consecutive5xx: 1}},
		pools.EndpointsOptions{Now: clk.Now, OnChange: func(r *pools.Replica, _ bool, why string) {
			if why == "" {
				t.Errorf("OnChange(%s) without a reason", r.Name)
			}
			changes.Add(1)
		}})
	r := p.Replica("r0")
	for i := range 40 {
		s.Sim.SetFaults(vllmsim.Faults{Unhealthy: i%2 == 0})
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); p.ProbeOnce(context.Background()) }()
		go func() { defer wg.Done(); p.Observe(r, pools.Status5xx, "status 500") }()
		wg.Wait()
		clk.Advance(time.Hour)
	}
	if changes.Load() < 40 {
		t.Errorf("%d state changes reported, want at least 40", changes.Load())
	}
}

// TestWaiterWakesWhenEjectionEnds: a request waiting for capacity takes a
// replica whose ejection ends, rather than sitting out the queue timeout.
func TestWaiterWakesWhenEjectionEnds(t *testing.T) {
	p := newPool(t, pools.Options{
		Name: "p", Balance: "least_outstanding", MaxInflight: 1, QueueTimeout: 5 * time.Second,
		Replicas: specs(2), Health: pools.HealthOptions{Disabled: true},
		Outlier: pools.OutlierOptions{Consecutive5xx: 1, BaseEjection: 100 * time.Millisecond, MaxEjection: 100 * time.Millisecond},
	})
	a, err := p.Acquire(context.Background(), &pools.Request{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release(a)
	var b *pools.Replica
	for _, r := range p.Replicas() {
		if r != a {
			b = r
		}
	}
	p.Observe(b, pools.Status5xx, "test")
	if !b.Ejected(time.Now()) {
		t.Fatal("b was not ejected")
	}
	got, err := p.Acquire(context.Background(), &pools.Request{}, nil)
	if err != nil {
		t.Fatalf("waiter did not take the readmitted replica: %v", err)
	}
	if got != b {
		t.Errorf("got %s, want %s", got.Name, b.Name)
	}
	p.Release(got)
}
