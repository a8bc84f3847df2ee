package classifier_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard/switchyard/classifier"
)

// byTenant is a transport whose calls block on their tenant's gate.
type byTenant map[string]*gate

func (b byTenant) ChatCompletion(ctx context.Context, body []byte) ([]byte, error) {
	name, _ := classifier.TenantOf(ctx)
	return b[name].ChatCompletion(ctx, body)
}

// TestOneTenantCannotTakeEverySlot: with no knob set, one tenant's burst
// of classifications holds at most three quarters of the classifier's
// slots, and another tenant's call is sent at once (issue 42, N3: one key
// sending 64 concurrent requests turned another tenant's classifications
// to on_error 19 times of 20; the classifier's slots were one FIFO
// semaphore the burst filled).
func TestOneTenantCannotTakeEverySlot(t *testing.T) {
	tr := byTenant{"attacker": newGate("simple"), "victim": newGate("complex")}
	c := newModel(t, tr, func(o *classifier.Options) { o.Concurrency = 8; o.CacheSize = 0 })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var burst []<-chan classifier.Result
	actx := classifier.WithTenant(ctx, "attacker", 1)
	for i := range 20 {
		burst = append(burst, classifyAsync(actx, c, classifier.Input{LastUser: fmt.Sprint("long prompt ", i)}))
	}
	eventually(t, "the burst to fill its slots", func() bool { return tr["attacker"].inflight.Load() == 6 })
	v := classifyAsync(classifier.WithTenant(ctx, "victim", 1), c, classifier.Input{LastUser: "victim's question"})
	tr["victim"].next(t)
	tr["victim"].open()
	if r := receive(t, v); r.Label != "complex" || r.Outcome != classifier.OutcomeOK {
		t.Errorf("the victim's classification: %+v", r)
	}
	if n := tr["attacker"].maxRun.Load(); n != 6 {
		t.Errorf("the burst held %d slots at once, want 6 of 8", n)
	}
	tr["attacker"].open()
	for _, ch := range burst {
		receive(t, ch)
	}
}

// TestFreedClassifierSlotGoesToTheTenantBehind: a freed slot goes to the
// waiting tenant holding the fewest slots, not to the next call in line.
func TestFreedClassifierSlotGoesToTheTenantBehind(t *testing.T) {
	tr := byTenant{"a": newGate("simple"), "b": newGate("simple"), "c": newGate("simple")}
	c := newModel(t, tr, func(o *classifier.Options) { o.Concurrency = 4; o.CacheSize = 0 })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var all []<-chan classifier.Result
	call := func(tenant string, i int) {
		all = append(all, classifyAsync(classifier.WithTenant(ctx, tenant, 1), c, classifier.Input{LastUser: fmt.Sprint(tenant, i)}))
	}
	for i := range 3 {
		call("a", i)
		tr["a"].next(t)
	}
	call("b", 0)
	tr["b"].next(t)
	call("b", 1) // waits: every slot is taken
	call("c", 0) // waits behind it
	time.Sleep(10 * time.Millisecond)
	if n := tr["b"].calls.Load() + tr["c"].calls.Load(); n != 1 {
		t.Fatalf("%d calls of b and c sent with every slot taken, want 1", n)
	}
	tr["a"].release <- struct{}{} // one of a's calls ends
	tr["c"].next(t)               // c holds none: the slot is c's, not b's second
	if n := tr["b"].calls.Load(); n != 1 {
		t.Errorf("b's second call was sent before c's")
	}
	for _, g := range tr {
		g.open()
	}
	for _, ch := range all {
		receive(t, ch)
	}
}

// TestBreakerIgnoresOneTenantsFailures: calls of one tenant that fail
// while another tenant's succeed do not open the circuit (issue 42, N3:
// one key's 64 long prompts timed out 184 times and opened the breaker
// three times in 30 s, so every tenant's requests got on_error). It opens
// when the failures in a row are of two tenants, or of the only tenant
// calling lately.
func TestBreakerIgnoresOneTenantsFailures(t *testing.T) {
	var victimFails atomic.Bool
	tr := transportFunc(func(ctx context.Context, _ []byte) ([]byte, error) {
		if name, _ := classifier.TenantOf(ctx); name == "victim" && !victimFails.Load() {
			return answer("simple"), nil
		}
		return nil, errors.New("timeout")
	})
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	c := newModel(t, tr, func(o *classifier.Options) {
		o.CacheSize = 0
		o.BreakerFailures, o.BreakerCooldown, o.Now = 3, 10*time.Second, clock
	})
	victim := classifier.WithTenant(context.Background(), "victim", 1)
	attacker := classifier.WithTenant(context.Background(), "attacker", 1)
	i := 0
	classify := func(ctx context.Context) classifier.Result {
		i++
		return c.Classify(ctx, classifier.Input{LastUser: fmt.Sprint("question ", i)})
	}
	if r := classify(victim); r.Outcome != classifier.OutcomeOK {
		t.Fatalf("victim: %+v", r)
	}
	for range 20 {
		advance(100 * time.Millisecond)
		if r := classify(attacker); r.Outcome == classifier.OutcomeCircuitOpen {
			t.Fatal("one tenant's failures opened the circuit while another tenant was calling")
		}
	}
	if r := classify(victim); r.Outcome != classifier.OutcomeOK {
		t.Fatalf("victim after the attacker's failures: %+v", r)
	}
	// The pool fails for both: a failure of the second tenant opens it.
	victimFails.Store(true)
	classify(attacker)
	classify(attacker)
	classify(victim)
	if r := classify(victim); r.Outcome != classifier.OutcomeCircuitOpen {
		t.Errorf("failures of two tenants in a row: %+v, want circuit_open", r)
	}
	// Closed again; later only the attacker calls: its failures open it.
	advance(10 * time.Second)
	victimFails.Store(false)
	classify(victim) // the probe closes it
	advance(11 * time.Second)
	for range 3 {
		classify(attacker)
	}
	if r := classify(attacker); r.Outcome != classifier.OutcomeCircuitOpen {
		t.Errorf("failures of the only tenant calling: %+v, want circuit_open", r)
	}
}
