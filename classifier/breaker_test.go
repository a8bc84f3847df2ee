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

// TestCircuitBreaker: a failing classifier pool is called at most
// BreakerFailures times, then not at all during the cool-down (every
// request gets on_error with outcome circuit_open), then once per probe;
// a probe that succeeds closes the circuit and classification recovers.
func TestCircuitBreaker(t *testing.T) {
	var calls atomic.Int64
	var healthy atomic.Bool
	tr := transportFunc(func(context.Context, []byte) ([]byte, error) {
		calls.Add(1)
		if healthy.Load() {
			return answer("simple"), nil
		}
		return nil, errors.New("replica answered 500")
	})
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	var events []string
	c := newModel(t, tr, func(o *classifier.Options) {
		o.CacheSize = 0
		o.BreakerFailures, o.BreakerCooldown, o.Now = 3, 10*time.Second, clock
		o.OnBreaker = func(open bool, err error) { events = append(events, fmt.Sprintf("open=%t err=%v", open, err != nil)) }
	})
	in := func(i int) classifier.Input { return classifier.Input{LastUser: fmt.Sprint("question ", i)} }
	ctx := context.Background()

	// An outage: 100 requests call the pool only 3 times.
	for i := range 100 {
		r := c.Classify(ctx, in(i))
		if r.Label != "complex" || !r.Fallback() {
			t.Fatalf("request %d: %+v, want the on_error fallback", i, r)
		}
		if i >= 3 && r.Outcome != classifier.OutcomeCircuitOpen {
			t.Fatalf("request %d: outcome %s, want circuit_open", i, r.Outcome)
		}
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("the failing pool was called %d times during the outage, want 3", n)
	}
	// After the cool-down one probe goes; it fails: open again.
	advance(10 * time.Second)
	c.Classify(ctx, in(200))
	c.Classify(ctx, in(201))
	if n := calls.Load(); n != 4 {
		t.Errorf("after the cool-down: %d calls, want 4 (one probe)", n)
	}
	// The pool heals: the next probe closes the circuit.
	healthy.Store(true)
	advance(10 * time.Second)
	if r := c.Classify(ctx, in(300)); r.Outcome != classifier.OutcomeOK || r.Label != "simple" {
		t.Errorf("probe after healing: %+v", r)
	}
	if r := c.Classify(ctx, in(301)); r.Outcome != classifier.OutcomeOK {
		t.Errorf("after closing: %+v", r)
	}
	if want := []string{"open=true err=true", "open=false err=false"}; fmt.Sprint(events) != fmt.Sprint(want) {
		t.Errorf("breaker events %v, want %v", events, want)
	}
}

// TestCircuitBreakerOff: with BreakerFailures 0 every request calls the
// pool.
func TestCircuitBreakerOff(t *testing.T) {
	var calls atomic.Int64
	tr := transportFunc(func(context.Context, []byte) ([]byte, error) {
		calls.Add(1)
		return nil, errors.New("down")
	})
	c := newModel(t, tr, func(o *classifier.Options) { o.CacheSize = 0 })
	for i := range 10 {
		c.Classify(context.Background(), classifier.Input{LastUser: fmt.Sprint(i)})
	}
	if calls.Load() != 10 {
		t.Errorf("%d calls, want 10", calls.Load())
	}
}

// TestCircuitBreakerIgnoresNoSlot: calls that never reached a replica
// because every slot of the pool was held (ErrNoSlot from the transport)
// do not open the breaker, however many fail in a row; they get on_error
// one by one and the next call goes to the pool.
func TestCircuitBreakerIgnoresNoSlot(t *testing.T) {
	var calls atomic.Int64
	var busy atomic.Bool
	busy.Store(true)
	tr := transportFunc(func(ctx context.Context, _ []byte) ([]byte, error) {
		calls.Add(1)
		if busy.Load() {
			return nil, fmt.Errorf("pool %q: %w (%w)", "classifier", classifier.ErrNoSlot, context.DeadlineExceeded)
		}
		return answer("simple"), nil
	})
	c := newModel(t, tr, func(o *classifier.Options) {
		o.CacheSize = 0
		o.BreakerFailures, o.BreakerCooldown = 3, time.Hour
	})
	ctx := context.Background()
	for i := range 10 {
		r := c.Classify(ctx, classifier.Input{LastUser: fmt.Sprint("question ", i)})
		if r.Outcome == classifier.OutcomeCircuitOpen {
			t.Fatalf("request %d: the breaker opened on calls that found no slot", i)
		}
		if !r.Fallback() {
			t.Fatalf("request %d: %+v, want on_error", i, r)
		}
	}
	if n := calls.Load(); n != 10 {
		t.Errorf("pool called %d times, want 10", n)
	}
	busy.Store(false)
	if r := c.Classify(ctx, classifier.Input{LastUser: "after"}); r.Outcome != classifier.OutcomeOK || r.Label != "simple" {
		t.Errorf("once slots are free: %+v", r)
	}
}
