package vllmsim_test

import (
	"bufio"
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard/switchyard/vllmsim"
)

// fakeClock is a simulated clock for vllmsim.WithClock: time moves only
// when a test advances it, and each wait the Server asks for is recorded.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []fakeWaiter
	added   chan struct{} // a token each time a waiter is added
}

type fakeWaiter struct {
	at time.Time
	c  chan time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Unix(1_800_000_000, 0), added: make(chan struct{}, 1)}
}

func (c *fakeClock) option() vllmsim.Option { return vllmsim.WithClock(c.Now, c.After) }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, fakeWaiter{at: c.now.Add(d), c: ch})
	select {
	case c.added <- struct{}{}:
	default:
	}
	return ch
}

// advance moves the clock on by d and wakes the waiters that are due.
func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	c.waiters = slices.DeleteFunc(c.waiters, func(w fakeWaiter) bool {
		if w.at.After(c.now) {
			return false
		}
		w.c <- c.now
		return true
	})
}

// next waits until the Server waits on the clock and returns how long its
// earliest wait is; ok is false when done closes first. The real-time
// bound only ends a test whose Server never waits again (a broken one).
func (c *fakeClock) next(t *testing.T, done <-chan struct{}) (d time.Duration, ok bool) {
	t.Helper()
	bound := time.After(10 * time.Second)
	for {
		c.mu.Lock()
		if len(c.waiters) > 0 {
			earliest := c.waiters[0].at
			for _, w := range c.waiters {
				if w.at.Before(earliest) {
					earliest = w.at
				}
			}
			c.mu.Unlock()
			return earliest.Sub(c.Now()), true
		}
		c.mu.Unlock()
		select {
		case <-c.added:
		case <-done:
			return 0, false
		case <-bound:
			t.Fatal("the simulator never waited on the clock")
		}
	}
}

// timedStream is a stream run on a fake clock.
type timedStream struct {
	// waits are the durations the Server waited for, in order.
	waits []time.Duration
	// lines are the stream's non-empty lines.
	lines []string
}

// runTimed posts a stream request to a Server on clock and steps the clock
// through every wait the Server makes, each by exactly its duration. The
// response headers and the first early lines of the body must arrive while
// the clock still stands before the first wait (prefill) ends: they are
// sent before the request is scheduled.
func runTimed(t *testing.T, clock *fakeClock, ts *httptest.Server, path, body string, early int) timedStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		resp *http.Response
		err  error
	}
	respc := make(chan result, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+path, strings.NewReader(body))
		resp, err := ts.Client().Do(req)
		respc <- result{resp, err}
	}()
	never := make(chan struct{})
	first, _ := clock.next(t, never)
	start := clock.Now()
	var r result
	select {
	case r = <-respc:
	case <-time.After(10 * time.Second):
		t.Fatal("no response headers while the simulator waits for prefill")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.resp.Body.Close()

	lines := make(chan string, 4096)
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(r.resp.Body)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			if sc.Text() != "" {
				lines <- sc.Text()
			}
		}
	}()
	var s timedStream
	for range early {
		select {
		case l := <-lines:
			s.lines = append(s.lines, l)
		case <-time.After(10 * time.Second):
			t.Fatalf("only %d lines before prefill, want %d: %q", len(s.lines), early, s.lines)
		}
	}
	if !clock.Now().Equal(start) {
		t.Fatal("the clock moved before prefill ended")
	}
	for d, ok := first, true; ok; d, ok = clock.next(t, done) {
		s.waits = append(s.waits, d)
		clock.advance(d)
	}
	<-done
	close(lines)
	for l := range lines {
		s.lines = append(s.lines, l)
	}
	return s
}

// checkSchedule checks the waits of a stream of 20 tokens whose 400-token
// prompt prefills at 2,000 tok/s and decodes at 200 tok/s, twice as fast:
// 100 ms of prefill, then 19 decode steps of 2.5 ms; and that the Server's
// latency metrics saw the same simulated times: the first token at 100 ms,
// the end at 147.5 ms.
func checkSchedule(t *testing.T, ts *httptest.Server, s timedStream) {
	t.Helper()
	near := func(got, want time.Duration) bool { return (got - want).Abs() <= time.Microsecond }
	if len(s.waits) != 20 || !near(s.waits[0], 100*time.Millisecond) {
		t.Fatalf("waits %v: want the 100ms prefill, then 19 decode steps", s.waits)
	}
	for i, d := range s.waits[1:] {
		if !near(d, 2500*time.Microsecond) {
			t.Errorf("decode step %d waited %v, want 2.5ms", i+1, d)
		}
	}
	_, m := get(t, ts, "/metrics")
	const l = `{model_name="sim/test-model"}`
	for series, want := range map[string]float64{
		"vllm:time_to_first_token_seconds_sum" + l: 0.1,
		"vllm:e2e_request_latency_seconds_sum" + l: 0.1475,
	} {
		if got := sample(t, m, series); math.Abs(got-want) > 1e-6 {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
}

// countPrefix counts the lines that start with prefix.
func countPrefix(lines []string, prefix string) int {
	n := 0
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}
