package pools_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard/switchyard/internal/polltest"
	"github.com/switchyard/switchyard/pools"
)

// slots drives one pool's fair requests on an injected clock: hold takes
// a slot at once (failing the test if it has to wait), queue starts an
// acquire that waits, and served hands the waiters' slots over in the
// order they were given.
type slots struct {
	t      *testing.T
	p      *pools.Pool
	clk    *clock
	timers *stepTimers
	got    chan slot
}

type slot struct {
	r   *pools.Replica
	req *pools.Request
}

func newSlots(t *testing.T, maxInflight int, reserve time.Duration) *slots {
	clk, timers := newClock(), &stepTimers{}
	p := newPool(t, pools.Options{Balance: "least_outstanding", Replicas: specs(1), MaxInflight: maxInflight, QueueTimeout: time.Hour, ShareReserve: reserve},
		pools.EndpointsOptions{Now: clk.Now, After: timers.After})
	return &slots{t: t, p: p, clk: clk, timers: timers, got: make(chan slot, 64)}
}

func (s *slots) hold(tenant string) slot {
	s.t.Helper()
	h, ok := s.tryHold(tenant)
	if !ok {
		s.t.Fatalf("%s had to wait for a slot", tenant)
	}
	return h
}

// tryHold reports whether tenant gets a slot without waiting (and keeps
// it); a request that queues instead is withdrawn.
func (s *slots) tryHold(tenant string) (slot, bool) {
	s.t.Helper()
	n := s.p.Waiters()
	req := &pools.Request{Tenant: tenant, Fair: true}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		r   *pools.Replica
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := s.p.Acquire(ctx, req, nil)
		done <- result{r, err}
	}()
	var res result
	polltest.Eventually(s.t, waitFor, tenant+"'s request to be served or queue", func() bool {
		select {
		case res = <-done:
			return true
		default:
			return s.p.Waiters() > n
		}
	})
	if res.r == nil && res.err == nil {
		cancel()
		if res = <-done; res.err != nil {
			return slot{}, false
		}
	}
	if res.err != nil {
		s.t.Fatalf("%s: %v", tenant, res.err)
	}
	return slot{res.r, req}, true
}

func (s *slots) queue(tenant string) {
	s.t.Helper()
	n := s.p.Waiters()
	req := &pools.Request{Tenant: tenant, Fair: true}
	go func() {
		r, err := s.p.Acquire(context.Background(), req, nil)
		if err != nil {
			s.t.Error(err)
			return
		}
		s.got <- slot{r, req}
	}()
	polltest.Eventually(s.t, waitFor, tenant+"'s request to queue", func() bool { return s.p.Waiters() == n+1 })
}

func (s *slots) release(h slot) { s.p.ReleaseFor(h.r, h.req) }

// next is the next waiter served.
func (s *slots) next() slot {
	s.t.Helper()
	select {
	case h := <-s.got:
		return h
	case <-time.After(waitFor):
		s.t.Fatal("no waiter was served")
		return slot{}
	}
}

// none checks that no waiter has been served.
func (s *slots) none(why string) {
	s.t.Helper()
	select {
	case h := <-s.got:
		s.t.Fatalf("%s: %s got a slot", why, h.req.Tenant)
	default:
	}
}

// TestFreedSlotGoesToTheTenantBehind: one slot, three tenants. A's first
// request holds the slot for a second; A's second, B's and C's queue in
// that order. Each freed slot goes to the tenant that has used the least
// slot time, not to the next in line: B, C, then A (issue 42, fair order:
// before, A's second request was served first, so B waited for both of
// A's, and with 40 s requests B got a 503 after 15 s).
func TestFreedSlotGoesToTheTenantBehind(t *testing.T) {
	s := newSlots(t, 1, 10*time.Second)
	cur := s.hold("A")
	for _, tenant := range []string{"A", "B", "C"} {
		s.queue(tenant)
	}
	var order []string
	for range 3 {
		s.clk.Advance(time.Second)
		s.release(cur)
		cur = s.next()
		order = append(order, cur.req.Tenant)
	}
	s.release(cur)
	if d := cmp.Diff([]string{"B", "C", "A"}, order); d != "" {
		t.Errorf("service order (-want +got):\n%s", d)
	}
}

// TestManyTenantsCannotStarveAnother: eight slots, five tenants, no cap
// on anyone. Four tenants hold two long streams each (every slot) and
// keep three more queued each; a fifth asks for three slots. Each of the
// next three freed slots goes to the fifth, the tenant furthest below its
// share in slot time, and a slot it frees with nothing more to ask goes
// to a hog again (issue 42, N5: four tenants looping long streams left a
// fifth's steady load 27 of 400 answered; a freed slot went to whichever
// waiter the queue's order put first, the hogs' waiters were queued
// first, and shares rounded up let four tenants at their share hold
// every slot).
func TestManyTenantsCannotStarveAnother(t *testing.T) {
	s := newSlots(t, 8, 10*time.Second)
	hogs := map[string][]slot{}
	for i := range 4 {
		name := "hog" + strconv.Itoa(i)
		hogs[name] = []slot{s.hold(name), s.hold(name)}
	}
	s.clk.Advance(5 * time.Second)
	for i := range 4 {
		for range 3 {
			s.queue("hog" + strconv.Itoa(i))
		}
	}
	for range 3 {
		s.queue("victim")
	}
	var order []string
	var victim []slot
	for i := range 3 {
		name := "hog" + strconv.Itoa(i)
		s.clk.Advance(time.Second)
		s.release(hogs[name][0])
		hogs[name] = hogs[name][1:]
		h := s.next()
		order = append(order, h.req.Tenant)
		if h.req.Tenant == "victim" {
			victim = append(victim, h)
		} else {
			hogs[h.req.Tenant] = append(hogs[h.req.Tenant], h)
		}
	}
	if d := cmp.Diff([]string{"victim", "victim", "victim"}, order); d != "" {
		t.Errorf("freed slots went to (-want +got):\n%s", d)
	}
	// The victim asks for nothing more: the slot it frees goes to a hog.
	s.release(victim[0])
	victim = victim[1:]
	if h := s.next(); h.req.Tenant == "victim" {
		t.Errorf("a slot went to the victim, which asked for none")
	} else {
		hogs[h.req.Tenant] = append(hogs[h.req.Tenant], h)
	}
	// Drain: every hog request left ends, and so do the victim's.
	for _, h := range victim {
		s.release(h)
	}
	for _, hs := range hogs {
		for _, h := range hs {
			s.release(h)
		}
	}
	for s.p.Waiters() > 0 || len(s.got) > 0 {
		s.release(s.next())
	}
}

// TestTrickleReservesNothing: a tenant that sends one short request now
// and then earns no reserve, so a heavy tenant gets every slot of an
// eight-slot replica at once; so it does with seven such tenants (issue
// 42, N2: one request every 9 s kept a share reserved for ever; a heavy
// tenant lost 32% of its throughput to one key's trickle and 75-78% to
// seven keyless addresses, while about 6 of 8 slots sat idle).
func TestTrickleReservesNothing(t *testing.T) {
	for _, tricklers := range []int{1, 7} {
		t.Run(strconv.Itoa(tricklers), func(t *testing.T) {
			s := newSlots(t, 8, 10*time.Second)
			for range 5 { // 45 s of trickle: a 20 ms request every 9 s each
				for i := range tricklers {
					h := s.hold("trickle" + strconv.Itoa(i))
					s.clk.Advance(20 * time.Millisecond)
					s.release(h)
				}
				s.clk.Advance(9 * time.Second)
			}
			var heavy []slot
			for range 8 {
				heavy = append(heavy, s.hold("heavy"))
			}
			for _, h := range heavy {
				s.release(h)
			}
		})
	}
}

// TestReserveIsEarnedBySlotTime: a tenant that held two of four slots
// for ten seconds finds them free when it comes back a second later,
// although another tenant asked for every slot meanwhile; as it stays
// away its reserve shrinks and the other gets the slots (issue 31's slot
// hog; issue 42 N2: the reserve is earned by slot time and lapses when
// not used).
func TestReserveIsEarnedBySlotTime(t *testing.T) {
	s := newSlots(t, 4, 10*time.Second)
	v := []slot{s.hold("victim"), s.hold("victim")}
	s.clk.Advance(10 * time.Second)
	for _, h := range v {
		s.release(h)
	}
	s.clk.Advance(time.Second)
	hog := []slot{s.hold("hog"), s.hold("hog")}
	s.queue("hog")
	s.queue("hog")
	v = []slot{s.hold("victim"), s.hold("victim")}
	for _, h := range v {
		s.release(h)
	}
	s.timers.fire()
	s.none("within the victim's reserve")
	// Away for long enough, the victim's reserve lapses: 20 s of slot
	// time decays below a fifth of a slot over the window in about 22 s.
	s.clk.Advance(23 * time.Second)
	s.timers.fire()
	hog = append(hog, s.next(), s.next())
	for _, h := range hog {
		s.release(h)
	}
}

// TestReservesLeaveHalfTheSlots: however many tenants have earned
// reserves, a tenant asking for slots gets at least half of a replica's
// at once: four tenants that each held two of eight slots steadily and
// left reserve eight between them, and a fifth still gets four
// (issue 42, N2: the reserved total never leaves most of a replica idle
// while anyone waits).
func TestReservesLeaveHalfTheSlots(t *testing.T) {
	s := newSlots(t, 8, 10*time.Second)
	var held []slot
	for i := range 4 {
		name := "steady" + strconv.Itoa(i)
		held = append(held, s.hold(name), s.hold(name))
	}
	s.clk.Advance(20 * time.Second)
	for _, h := range held {
		s.release(h)
	}
	var got []slot
	for {
		h, ok := s.tryHold("new")
		if !ok {
			break
		}
		got = append(got, h)
	}
	if len(got) != 4 {
		t.Errorf("the new tenant got %d slots at once, want 4 (half; the rest reserved)", len(got))
	}
	for _, h := range got {
		s.release(h)
	}
}

// TestPriorityTenantKeepsSlotsForOthers: the classifier's calls for one
// tenant's requests hold at most three of a replica's four slots, with
// no knob set, so another tenant's classification gets the fourth at
// once; the first tenant's next call waits for one of its own (issue 42,
// N3: one key's 64 concurrent requests took every slot of the classifier
// pool, and another tenant's classifications timed out 19 times of 20).
func TestPriorityTenantKeepsSlotsForOthers(t *testing.T) {
	p := newPool(t, pools.Options{Balance: "least_outstanding", Replicas: specs(1), MaxInflight: 4, QueueTimeout: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	acquire := func(tenant string) (*pools.Replica, *pools.Request) {
		t.Helper()
		req := &pools.Request{Tenant: tenant, Priority: true}
		r, err := p.Acquire(ctx, req, nil)
		if err != nil {
			t.Fatal(err)
		}
		return r, req
	}
	var held [][2]any
	for range 3 {
		r, req := acquire("attacker")
		held = append(held, [2]any{r, req})
	}
	got := make(chan *pools.Request, 1)
	go func() {
		req := &pools.Request{Tenant: "attacker", Priority: true}
		if _, err := p.Acquire(ctx, req, nil); err == nil {
			got <- req
		}
	}()
	polltest.Eventually(t, waitFor, "the attacker's fourth call to wait", func() bool { return p.Waiters() == 1 })
	vr, vreq := acquire("victim") // at once: the fourth slot was kept
	p.ReleaseFor(vr, vreq)        // dispatches before it returns
	if p.Waiters() != 1 {
		t.Fatal("the victim's freed slot went to the attacker's fourth call")
	}
	r, req := held[0][0].(*pools.Replica), held[0][1].(*pools.Request)
	p.ReleaseFor(r, req)
	select {
	case <-got:
	case <-time.After(waitFor):
		t.Fatal("the attacker's call did not get the slot its own call freed")
	}
}

// TestHandedSlotCountsAtOnce: a slot handed to a waiting request counts
// for its tenant from the hand-over, not from when the request's
// goroutine runs again. Under the combined attack of issue 42 the
// attacker's served waiters, not yet running on two busy CPUs, were
// counted as nothing held, so that its next waiter took the slot kept
// for the victim's reserve (before: the second waiter was served too).
func TestHandedSlotCountsAtOnce(t *testing.T) {
	s := newSlots(t, 2, 10*time.Second)
	v := s.hold("victim")
	s.clk.Advance(5 * time.Second) // a steady victim earns a reserve
	s.release(v)
	r := s.p.Replicas()[0]
	first := s.p.QueueAsleep(r, "attacker")
	second := s.p.QueueAsleep(r, "attacker")
	if !first() {
		t.Fatal("the attacker's first request was not served: one slot is its share")
	}
	if second() {
		t.Fatal("the attacker's second request took the slot kept for the victim's reserve")
	}
	s.release(s.hold("victim"))
}

// TestArrivalsAtOnceKeepTheReserve: requests of one tenant arriving at
// once on a replica with free slots take its share and no more while
// another tenant's reserve is owed: the check of its share, the slot and
// its count are one step. Before, each arrival checked the share, then
// took a slot, then counted it, so that several could check before any
// counted and take the slot kept for the reserve (8 arrivals on 2 slots
// under the race detector: both slots taken in 13 of 500 rounds).
func TestArrivalsAtOnceKeepTheReserve(t *testing.T) {
	for round := range 50 {
		s := newSlots(t, 2, 10*time.Second)
		v := s.hold("victim")
		s.clk.Advance(5 * time.Second)
		s.release(v)
		ctx, cancel := context.WithCancel(context.Background())
		start := make(chan struct{})
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				<-start
				req := &pools.Request{Tenant: "attacker", Fair: true}
				if r, err := s.p.Acquire(ctx, req, nil); err == nil {
					<-ctx.Done()
					s.p.ReleaseFor(r, req)
				}
			})
		}
		close(start)
		polltest.Eventually(t, waitFor, "every arrival served or queued", func() bool {
			return s.p.Replicas()[0].Inflight()+s.p.Waiters() == 8
		})
		if n := s.p.Replicas()[0].Inflight(); n != 1 {
			t.Errorf("round %d: 8 arrivals at once hold %d of 2 slots, want 1 (the other is the victim's reserve)", round, n)
		}
		cancel()
		wg.Wait()
	}
}
