package pools_test

import (
	"context"
	"math"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard/switchyard/internal/polltest"
	"github.com/switchyard/switchyard/pools"
	"github.com/switchyard/switchyard/vllmsim"
)

const chatBody = `{"model":"m","messages":[{"role":"user","content":"hi"}]}`

// longBody keeps a slow simulator busy until the test cancels it.
const longBody = `{"model":"m","max_tokens":100000,"messages":[{"role":"user","content":"tell a long story"}]}`

// closedLoop runs n requests through p with w workers, each of which sends
// its next request as soon as the last one ends (Acquire, serve, Release),
// and returns how many each replica served. Time is virtual: a request to
// replica r takes service[r.Name], and the worker whose request ends first
// (the lowest-numbered on a tie) releases it and acquires its next one. The
// balancers see exactly the in-flight counts a real closed loop of that
// speed would give them, and the counts depend on neither the machine's
// speed nor its load (a real loop on a starved CPU measures the
// scheduler's delays, not the replicas' speeds).
func closedLoop(t *testing.T, p *pools.Pool, service map[string]time.Duration, w, n int) map[string]int {
	t.Helper()
	type busy struct {
		r    *pools.Replica
		ends time.Duration
	}
	counts := map[string]int{}
	workers := make([]busy, w)
	sent := 0
	acquire := func(i int, now time.Duration) {
		r, err := p.Acquire(context.Background(), &pools.Request{}, nil)
		if err != nil {
			t.Fatalf("acquire: %v", err)
		}
		d, ok := service[r.Name]
		if !ok {
			t.Fatalf("replica %s has no service time", r.Name)
		}
		workers[i] = busy{r, now + d}
		sent++
	}
	for i := range workers {
		acquire(i, 0)
	}
	for done := 0; done < n; done++ {
		i := 0
		for j := range workers {
			if workers[j].r != nil && (workers[i].r == nil || workers[j].ends < workers[i].ends) {
				i = j
			}
		}
		now := workers[i].ends
		p.Release(workers[i].r)
		counts[workers[i].r.Name]++
		workers[i].r = nil
		if sent < n {
			acquire(i, now)
		}
	}
	return counts
}

// TestBalancersUnderHeterogeneousSpeed: of three replicas, r2 serves a
// request in 50 ms, the others in 10 ms. Round robin gives it a third of
// the requests regardless; least_outstanding and p2c see its requests pile
// up in flight and send it clearly less.
func TestBalancersUnderHeterogeneousSpeed(t *testing.T) {
	const (
		workers  = 6
		requests = 180
	)
	service := map[string]time.Duration{"r0": 10 * time.Millisecond, "r1": 10 * time.Millisecond, "r2": 50 * time.Millisecond}
	share := map[string]float64{}
	for _, bal := range []string{"round_robin", "least_outstanding", "p2c"} {
		p := newPool(t, pools.Options{Balance: bal, Replicas: specs(3), Rand: seeded(1)})
		counts := closedLoop(t, p, service, workers, requests)
		share[bal] = float64(counts["r2"]) / requests
		t.Logf("%-17s %v (slow share %.3f)", bal, counts, share[bal])
		for _, r := range p.Replicas() {
			if r.Inflight() != 0 {
				t.Errorf("%s: replica %s has %d in flight after the run", bal, r.Name, r.Inflight())
			}
		}
	}
	if rr := share["round_robin"]; math.Abs(rr-1.0/3) > 0.02 {
		t.Errorf("round_robin sent %.3f of requests to the slow replica, want 1/3", rr)
	}
	// In a closed loop a least-loaded balancer evens out in-flight counts, so
	// the slow replica's share tends to 1/11; p2c, choosing among two, sits
	// between that and 1/3. Both must be well below round robin's third.
	for _, bal := range []string{"least_outstanding", "p2c"} {
		if s := share[bal]; s > 0.6*share["round_robin"] {
			t.Errorf("%s sent %.3f of requests to the slow replica, want < %.3f (0.6 × round_robin's)", bal, s, 0.6*share["round_robin"])
		}
	}
}

// pickCounts places n requests (Acquire then Release at once) and counts
// the replicas chosen.
func pickCounts(t *testing.T, p *pools.Pool, n int, key string) map[string]int {
	t.Helper()
	counts := map[string]int{}
	for range n {
		r, err := p.Acquire(context.Background(), &pools.Request{Key: key}, nil)
		if err != nil {
			t.Fatal(err)
		}
		counts[r.Name]++
		p.Release(r)
	}
	return counts
}

// TestQueueAwareBalancersAvoidDeepQueue: r2 runs one request at a time and
// has three more waiting, sent to it directly (so the gateway's in-flight
// counts are all zero). Once scraped, kv_aware and p2c never choose it;
// when the scrape goes stale it is treated like the others again.
func TestQueueAwareBalancersAvoidDeepQueue(t *testing.T) {
	fast := vllmsim.Profile{Model: "m", DefaultMaxTokens: 8}
	slow := vllmsim.Profile{Model: "m", DecodeTPS: 10, MaxBatch: 1}
	sims := []*sim{startSim(t, fast), startSim(t, fast), startSim(t, slow)}
	hold(t, sims[2], 4, longBody)
	polltest.Eventually(t, waitFor, "r2 to run 1 and queue 3", func() bool { return sims[2].Sim.Running() == 1 && sims[2].Sim.Waiting() == 3 })

	for _, bal := range []string{"kv_aware", "p2c"} {
		t.Run(bal, func(t *testing.T) {
			clk := newClock()
			const staleness = 500 * time.Millisecond
			p := newPool(t, pools.Options{Balance: bal, Replicas: simSpecs(sims...), Rand: seeded(7),
				Scrape: pools.ScrapeOptions{Enabled: true}, Staleness: staleness}, pools.EndpointsOptions{Now: clk.Now})

			if got := pickCounts(t, p, 60, ""); got["r2"] == 0 {
				t.Fatalf("before any scrape r2 was never chosen (%v); the test proves nothing", got)
			}
			for _, r := range p.Replicas() {
				if l := p.ScrapeOnce(context.Background(), r); l.Err != "" {
					t.Fatalf("scrape %s: %s", r.Name, l.Err)
				}
			}
			l := p.Replica("r2").CurrentLoad()
			if !l.HasQueue || l.Waiting != 3 || l.Running != 1 {
				t.Fatalf("r2 scraped load %+v, want waiting 3 running 1", *l)
			}
			if got := pickCounts(t, p, 100, ""); got["r2"] != 0 {
				t.Errorf("with a fresh scrape showing a queue of 3, r2 was chosen %d/100 times (%v)", got["r2"], got)
			}

			clk.Advance(staleness + time.Millisecond)
			if got := pickCounts(t, p, 60, ""); got["r2"] == 0 {
				t.Errorf("a stale scrape still steers away from r2 (%v)", got)
			}
		})
	}
}

// TestKVAwareLegacyMetrics: a vLLM older than v0.10 reports KV-cache usage
// as vllm:gpu_cache_usage_perc. Both replicas run one request; the legacy
// one's cache is full, so kv_aware must prefer the other.
func TestKVAwareLegacyMetrics(t *testing.T) {
	legacy := startSim(t, vllmsim.Profile{Model: "m", DecodeTPS: 10, LegacyMetrics: true, KVCacheTokens: 1})
	current := startSim(t, vllmsim.Profile{Model: "m", DecodeTPS: 10, KVCacheTokens: 1 << 30})
	hold(t, legacy, 1, longBody)
	hold(t, current, 1, longBody)
	polltest.Eventually(t, waitFor, "both replicas to run a request", func() bool { return legacy.Sim.Running() == 1 && current.Sim.Running() == 1 })

	clk := newClock()
	p := newPool(t, pools.Options{Balance: "kv_aware", Replicas: simSpecs(legacy, current), Rand: seeded(3),
		Scrape: pools.ScrapeOptions{Enabled: true}}, pools.EndpointsOptions{Now: clk.Now})
	for _, r := range p.Replicas() {
		p.ScrapeOnce(context.Background(), r)
	}
	type view struct {
		HasKV, Legacy bool
		KVUsage       float64
		Running       float64
		Missing       []string
	}
	got := map[string]view{}
	for _, r := range p.Replicas() {
		l := r.CurrentLoad()
		if l.Err != "" {
			t.Fatalf("scrape %s: %s", r.Name, l.Err)
		}
		got[r.Name] = view{HasKV: l.HasKV, Legacy: l.Legacy, KVUsage: math.Round(l.KVUsage*1000) / 1000, Running: l.Running, Missing: l.Missing()}
	}
	want := map[string]view{
		"r0": {HasKV: true, Legacy: true, KVUsage: 1, Running: 1},
		"r1": {HasKV: true, KVUsage: 0, Running: 1},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("scraped loads (-want +got):\n%s", d)
	}
	if got := pickCounts(t, p, 50, ""); got["r0"] != 0 {
		t.Errorf("the replica with a full KV cache (legacy metric) was chosen: %v", got)
	}
}

// TestKVAwareMissingSignals: a replica whose /metrics has none of vLLM's
// load series is balanced on the gateway's in-flight count alone, and the
// scrape says which names were missing (once, through OnMissing).
func TestKVAwareMissingSignals(t *testing.T) {
	full := startSim(t, vllmsim.Profile{Model: "m"})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write([]byte("# TYPE process_open_fds gauge\nprocess_open_fds 7\n"))
	})
	bare := serve(t, nil, mux)

	var (
		mu      sync.Mutex
		missing = map[string][][]string{}
	)
	clk := newClock()
	p := newPool(t, pools.Options{Balance: "kv_aware", Replicas: simSpecs(bare, full), Rand: seeded(5),
		Scrape: pools.ScrapeOptions{Enabled: true, Interval: 5 * time.Millisecond}, Staleness: time.Hour, Health: pools.HealthOptions{Disabled: true}},
		pools.EndpointsOptions{Now: clk.Now, OnMissing: func(r *pools.Replica, names []string) {
			mu.Lock()
			missing[r.Name] = append(missing[r.Name], names)
			mu.Unlock()
		}})
	ctx, cancel := context.WithCancel(context.Background())
	p.Endpoints().Start(ctx)
	// Let several rounds run, so that a repeated warning would show.
	for range 4 {
		last := p.Replica("r0").CurrentLoad()
		polltest.Eventually(t, waitFor, "another scrape of r0", func() bool { return p.Replica("r0").CurrentLoad() != last })
	}
	polltest.Eventually(t, waitFor, "a scrape of r1", func() bool { return p.Replica("r1").CurrentLoad() != nil })
	cancel()
	p.Endpoints().Close()

	want := []string{"vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc"}
	if l := p.Replica("r0").CurrentLoad(); l.Err != "" || l.HasQueue || l.HasKV {
		t.Fatalf("bare replica's load %+v", *l)
	} else if d := cmp.Diff(want, l.Missing()); d != "" {
		t.Errorf("Missing() (-want +got):\n%s", d)
	}
	mu.Lock()
	if d := cmp.Diff(map[string][][]string{"r0": {want}}, missing); d != "" {
		t.Errorf("OnMissing calls (-want +got):\n%s", d)
	}
	mu.Unlock()

	// In-flight alone decides between them: whichever has a request open
	// through the gateway loses.
	for _, tc := range []struct{ busy, want string }{{"r0", "r1"}, {"r1", "r0"}} {
		held, err := p.Acquire(context.Background(), &pools.Request{}, func(r *pools.Replica) bool { return r.Name != tc.busy })
		if err != nil {
			t.Fatal(err)
		}
		if got := pickCounts(t, p, 20, ""); got[tc.want] != 20 {
			t.Errorf("with %s busy: chosen %v, want always %s", tc.busy, got, tc.want)
		}
		p.Release(held)
	}
}

// TestAffinityKeepsKey: requests that share a key land on one replica.
func TestAffinityKeepsKey(t *testing.T) {
	p := newPool(t, pools.Options{Balance: "affinity", Replicas: specs(4), Rand: seeded(1)})
	for i := range 50 {
		key := "session-" + strconv.Itoa(i)
		if got := pickCounts(t, p, 20, key); len(got) != 1 {
			t.Errorf("key %q went to several replicas: %v", key, got)
		}
	}
}

// TestAffinityRemovingReplicaMovesOnlyItsKeys: rendezvous hashing moves
// about 1/N of the keys when one of N replicas goes, and only the keys that
// lived on it.
func TestAffinityRemovingReplicaMovesOnlyItsKeys(t *testing.T) {
	const n, keys = 5, 10000
	all := newPool(t, pools.Options{Balance: "affinity", Replicas: specs(n), Rand: seeded(1)})
	fewer := newPool(t, pools.Options{Balance: "affinity", Replicas: specs(n)[:n-1], Rand: seeded(2)})
	gone := specs(n)[n-1].Name

	perReplica := map[string]int{}
	moved, wrong := 0, 0
	for i := range keys {
		req := &pools.Request{Key: "k" + strconv.Itoa(i)}
		before, after := all.Pick(req).Name, fewer.Pick(req).Name
		perReplica[before]++
		if before != after {
			moved++
			if before != gone {
				wrong++
			}
		}
	}
	if wrong > 0 {
		t.Errorf("%d keys moved although their replica stayed", wrong)
	}
	if moved != perReplica[gone] {
		t.Errorf("%d keys moved, want exactly the %d that lived on %s", moved, perReplica[gone], gone)
	}
	if share := float64(moved) / keys; share < 0.17 || share > 0.23 {
		t.Errorf("%.3f of keys moved, want about 1/%d", share, n)
	}
	for name, c := range perReplica {
		if share := float64(c) / keys; share < 0.17 || share > 0.23 {
			t.Errorf("replica %s holds %.3f of keys, want about 1/%d (%v)", name, share, n, perReplica)
		}
	}
}

// TestAffinityAgreesAcrossPools: two pools built from the same options (two
// gateway processes) rank the same way with no shared state; the order in
// which replicas are listed does not matter either.
func TestAffinityAgreesAcrossPools(t *testing.T) {
	rs := specs(6)
	reversed := make([]pools.ReplicaSpec, len(rs))
	for i, r := range rs {
		reversed[len(rs)-1-i] = r
	}
	a := newPool(t, pools.Options{Balance: "affinity", Replicas: rs, Rand: seeded(1)})
	b := newPool(t, pools.Options{Balance: "affinity", Replicas: rs, Rand: seeded(99)})
	c := newPool(t, pools.Options{Balance: "affinity", Replicas: reversed, Rand: seeded(42)})
	for i := range 1000 {
		req := &pools.Request{Key: "p:" + strconv.Itoa(i*7919)}
		ra, rb, rc := a.Pick(req).Name, b.Pick(req).Name, c.Pick(req).Name
		if ra != rb || ra != rc {
			t.Fatalf("key %q: pools disagree: %s, %s, %s (reversed order)", req.Key, ra, rb, rc)
		}
	}
}

// TestAffinityBoundedLoad: a hot key stays on its replica only while that
// replica is within LoadFactor × its fair share of in-flight requests.
func TestAffinityBoundedLoad(t *testing.T) {
	const loadFactor = 1.25
	p := newPool(t, pools.Options{Balance: "affinity", Replicas: specs(3), Rand: seeded(1), LoadFactor: loadFactor})
	hot := &pools.Request{Key: "hot"}
	home := p.Pick(hot)
	ctx := context.Background()

	t.Run("passes on when home is over its share", func(t *testing.T) {
		// Three requests open on home, none elsewhere: placing one more
		// would put 4 on home against a limit of ceil(1.25 × 4/3) = 2.
		var held []*pools.Replica
		for range 3 {
			r, err := p.Acquire(ctx, &pools.Request{}, func(r *pools.Replica) bool { return r != home })
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, r)
		}
		got, err := p.Acquire(ctx, hot, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got == home {
			t.Errorf("hot key stayed on %s with %d in flight there and none elsewhere", home.Name, home.Inflight()-1)
		}
		p.Release(got)
		for _, r := range held {
			p.Release(r)
		}
		if again := p.Pick(hot); again != home {
			t.Errorf("with the load gone the key went to %s, want its home %s", again.Name, home.Name)
		}
	})

	t.Run("hot key spreads within the bound", func(t *testing.T) {
		const n = 30
		var held []*pools.Replica
		for range n {
			r, err := p.Acquire(ctx, hot, nil)
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, r)
		}
		bound := int64(math.Ceil(loadFactor * n / 3))
		got := map[string]int64{}
		for _, r := range p.Replicas() {
			got[r.Name] = r.Inflight()
			if r.Inflight() > bound {
				t.Errorf("replica %s has %d in flight, over ceil(%.2f × fair share) = %d", r.Name, r.Inflight(), loadFactor, bound)
			}
		}
		if got[home.Name] != bound {
			t.Errorf("home %s has %d, want it filled to the bound %d first (%v)", home.Name, got[home.Name], bound, got)
		}
		for _, r := range held {
			p.Release(r)
		}
	})
}

// TestReadsMetrics: the balancers that weigh scraped vLLM metrics are
// named as such (the router turns scraping on for them), and only known
// balancers are.
func TestReadsMetrics(t *testing.T) {
	var got []string
	for _, b := range pools.Balancers() {
		if pools.ReadsMetrics(b) {
			got = append(got, b)
		}
	}
	if want := []string{"kv_aware", "p2c"}; !slices.Equal(got, want) {
		t.Errorf("balancers reading metrics %q, want %q", got, want)
	}
	if pools.ReadsMetrics("fastest") {
		t.Error("an unknown balancer reads metrics")
	}
}
