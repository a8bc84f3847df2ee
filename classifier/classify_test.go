package classifier_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/switchyard/switchyard/classifier"
	"github.com/switchyard/switchyard/vllmsim"
)

var errNoReplica = errors.New("no replica available")

// blockUntilDone is a replica that never answers: it returns when the call's
// context ends.
var blockUntilDone = transportFunc(func(ctx context.Context, _ []byte) ([]byte, error) {
	<-ctx.Done()
	return nil, ctx.Err()
})

func TestClassifyOutcomes(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name      string
		transport func(t *testing.T) classifier.Transport
		edit      func(*classifier.Options)
		ctx       context.Context
		label     string
		outcome   string
		errIs     error // when set, Result.Err must match it
	}{
		{
			name:      "replica answers",
			transport: func(t *testing.T) classifier.Transport { _, tr := startSim(t); return tr },
			label:     "simple", outcome: classifier.OutcomeOK,
		},
		{
			name:      "garbage reply",
			transport: func(*testing.T) classifier.Transport { return &capture{label: "banana"} },
			label:     "complex", outcome: classifier.OutcomeError,
		},
		{
			name:      "garbage reply, on_error simple",
			transport: func(*testing.T) classifier.Transport { return &capture{label: "banana"} },
			edit:      func(o *classifier.Options) { o.OnError = "simple" },
			label:     "simple", outcome: classifier.OutcomeError,
		},
		{
			name: "replica fails with 500",
			transport: func(t *testing.T) classifier.Transport {
				sim, tr := startSim(t)
				sim.SetFaults(vllmsim.Faults{FailPercent: 100})
				return tr
			},
			label: "complex", outcome: classifier.OutcomeError,
		},
		{
			name: "every replica of the pool is down",
			transport: func(*testing.T) classifier.Transport {
				return transportFunc(func(context.Context, []byte) ([]byte, error) {
					return nil, fmt.Errorf("classifier pool %q: %w", "minicpm", errNoReplica)
				})
			},
			label: "complex", outcome: classifier.OutcomeError, errIs: errNoReplica,
		},
		{
			name: "connection refused",
			transport: func(t *testing.T) classifier.Transport {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				addr := ln.Addr().String()
				ln.Close()
				return simTransport{url: "http://" + addr, client: &http.Client{}}
			},
			label: "complex", outcome: classifier.OutcomeError,
		},
		{
			name:      "timeout",
			transport: func(*testing.T) classifier.Transport { return blockUntilDone },
			edit:      func(o *classifier.Options) { o.Timeout = 50 * time.Millisecond },
			label:     "complex", outcome: classifier.OutcomeTimeout, errIs: context.DeadlineExceeded,
		},
		{
			name: "transport's own error after the deadline is a timeout",
			transport: func(*testing.T) classifier.Transport {
				return transportFunc(func(ctx context.Context, _ []byte) ([]byte, error) {
					<-ctx.Done()
					return nil, errors.New("read tcp: connection reset by peer")
				})
			},
			edit:  func(o *classifier.Options) { o.Timeout = 50 * time.Millisecond },
			label: "complex", outcome: classifier.OutcomeTimeout, errIs: context.DeadlineExceeded,
		},
		{
			name:      "client already gone",
			transport: func(*testing.T) classifier.Transport { return blockUntilDone },
			ctx:       cancelled,
			label:     "complex", outcome: classifier.OutcomeError, errIs: context.Canceled,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newModel(t, tc.transport(t), tc.edit)
			ctx := tc.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			r := c.Classify(ctx, classifier.Input{LastUser: "hello there", Turns: 1})
			if r.Label != tc.label || r.Outcome != tc.outcome {
				t.Errorf("Classify = %q/%q (%v), want %q/%q", r.Label, r.Outcome, r.Err, tc.label, tc.outcome)
			}
			if !slices.Contains(labels, r.Label) {
				t.Errorf("label %q is not one of %v", r.Label, labels)
			}
			if (r.Err == nil) != (tc.outcome == classifier.OutcomeOK) {
				t.Errorf("Err = %v with outcome %q", r.Err, r.Outcome)
			}
			if tc.errIs != nil && !errors.Is(r.Err, tc.errIs) {
				t.Errorf("Err = %v, want one matching %v", r.Err, tc.errIs)
			}
			if tc.outcome != classifier.OutcomeOK && r.Scores[r.Label] != 1 {
				t.Errorf("on_error scores = %v, want %s: 1", r.Scores, r.Label)
			}
		})
	}
}

func TestSharedCallAndCache(t *testing.T) {
	ctx := context.Background()
	g := newGate("simple")
	c := newModel(t, g, nil)
	in := classifier.Input{LastUser: "what is the capital of France?", Turns: 1}

	const n = 50
	results := make([]<-chan classifier.Result, n)
	for i := range results {
		results[i] = classifyAsync(ctx, c, in)
	}
	g.next(t)
	eventually(t, "all callers wait on the shared call", func() bool { return c.Waiters(in) == n })
	g.open()
	for i, ch := range results {
		if r := receive(t, ch); r.Label != "simple" || r.Outcome != classifier.OutcomeOK {
			t.Errorf("caller %d: %q/%q (%v), want simple/ok", i, r.Label, r.Outcome, r.Err)
		}
	}
	if got := g.calls.Load(); got != 1 {
		t.Fatalf("%d identical concurrent requests made %d transport calls, want 1", n, got)
	}

	r := c.Classify(ctx, in)
	if r.Label != "simple" || r.Outcome != classifier.OutcomeCacheHit {
		t.Errorf("repeat: %q/%q, want simple/cache_hit", r.Label, r.Outcome)
	}
	if got := g.calls.Load(); got != 1 {
		t.Errorf("a cache hit made a transport call (%d calls)", got)
	}
}

// TestDistinctInputs checks that inputs differing in any field are separate
// calls and separate cache entries.
func TestDistinctInputs(t *testing.T) {
	inputs := []classifier.Input{
		{System: "s", LastUser: "u", Tools: []string{"a", "b"}, Turns: 2},
		{System: "s", LastUser: "u2", Tools: []string{"a", "b"}, Turns: 2},
		{System: "s2", LastUser: "u", Tools: []string{"a", "b"}, Turns: 2},
		{System: "su", LastUser: "", Tools: []string{"a", "b"}, Turns: 2},
		{System: "s", LastUser: "u", Tools: []string{"ab"}, Turns: 2},
		{System: "s", LastUser: "u", Tools: []string{"b", "a"}, Turns: 2},
		{System: "s", LastUser: "u", Tools: []string{"a", "b"}, Turns: 3},
		{Prompt: "u"},
	}
	ctx := context.Background()
	g := newGate("complex")
	c := newModel(t, g, nil)
	results := make([]<-chan classifier.Result, len(inputs))
	for i, in := range inputs {
		results[i] = classifyAsync(ctx, c, in)
	}
	for range inputs {
		g.next(t)
	}
	g.open()
	for i, ch := range results {
		if r := receive(t, ch); r.Outcome != classifier.OutcomeOK {
			t.Errorf("input %d: outcome %q (%v), want ok", i, r.Outcome, r.Err)
		}
	}
	for i, in := range inputs {
		if r := c.Classify(ctx, in); r.Outcome != classifier.OutcomeCacheHit {
			t.Errorf("input %d again: outcome %q, want cache_hit", i, r.Outcome)
		}
	}
	if got := g.calls.Load(); got != int64(len(inputs)) {
		t.Errorf("%d distinct inputs made %d transport calls", len(inputs), got)
	}
}

func TestCacheTTL(t *testing.T) {
	// The cache reads the injected clock (it read the wall clock before,
	// and this test had to switch its check off on a slow machine).
	const ttl = 100 * time.Millisecond
	ctx := context.Background()
	var mu sync.Mutex
	now := time.Unix(1e9, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	tr := &capture{label: "simple"}
	c := newModel(t, tr, func(o *classifier.Options) { o.CacheTTL = ttl; o.Now = clock })
	in := classifier.Input{LastUser: "hi", Turns: 1}
	if r := c.Classify(ctx, in); r.Outcome != classifier.OutcomeOK {
		t.Fatalf("first call: outcome %q (%v)", r.Outcome, r.Err)
	}
	advance(ttl - time.Nanosecond)
	if r := c.Classify(ctx, in); r.Outcome != classifier.OutcomeCacheHit {
		t.Errorf("within the TTL: outcome %q, want cache_hit", r.Outcome)
	}
	advance(time.Nanosecond)
	if r := c.Classify(ctx, in); r.Outcome != classifier.OutcomeOK {
		t.Errorf("at the TTL: outcome %q, want a new call", r.Outcome)
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(tr.bodies) != 2 {
		t.Errorf("%d transport calls, want 2 (one before, one after expiry)", len(tr.bodies))
	}
}

// TestConcurrencyCap: at most Concurrency calls are out at once, here of
// tenants of one call each (one tenant alone may hold all but a quarter,
// at least one: TestOneTenantCannotTakeEverySlot).
func TestConcurrencyCap(t *testing.T) {
	const limit, n = 2, 7
	g := newGate("simple")
	c := newModel(t, g, func(o *classifier.Options) { o.Concurrency = limit })
	results := make([]<-chan classifier.Result, n)
	for i := range results {
		ctx := classifier.WithTenant(context.Background(), fmt.Sprint("tenant ", i), 1)
		results[i] = classifyAsync(ctx, c, classifier.Input{LastUser: fmt.Sprintf("question %d", i)})
	}
	for range limit {
		g.next(t)
	}
	// Let the calls out one at a time: each frees a slot for the next.
	for range n - limit {
		select {
		case g.release <- struct{}{}:
		case <-time.After(waitFor):
			t.Fatal("no call in flight to release")
		}
		g.next(t)
	}
	g.open()
	for i, ch := range results {
		if r := receive(t, ch); r.Outcome != classifier.OutcomeOK {
			t.Errorf("call %d: outcome %q (%v)", i, r.Outcome, r.Err)
		}
	}
	if got := g.maxRun.Load(); got != limit {
		t.Errorf("at most %d calls were in flight at once, want %d", got, limit)
	}
	if got := g.calls.Load(); got != n {
		t.Errorf("%d transport calls, want %d", got, n)
	}
}

func TestDisconnect(t *testing.T) {
	in := classifier.Input{LastUser: "a long agentic task", Turns: 9}

	t.Run("only caller cancels the call", func(t *testing.T) {
		g := newGate("simple")
		c := newModel(t, g, nil) // Timeout 30s: only the disconnect can end the call soon
		ctx, cancel := context.WithCancel(context.Background())
		ch := classifyAsync(ctx, c, in)
		callCtx := g.next(t)
		cancel()
		r := receive(t, ch)
		if r.Label != "complex" || r.Outcome != classifier.OutcomeError || !errors.Is(r.Err, context.Canceled) {
			t.Errorf("cancelled caller got %q/%q (%v), want complex/error (context canceled)", r.Label, r.Outcome, r.Err)
		}
		select {
		case <-callCtx.Done():
			if !errors.Is(callCtx.Err(), context.Canceled) {
				t.Errorf("transport ctx ended with %v, want context canceled", callCtx.Err())
			}
		case <-time.After(waitFor):
			t.Fatal("the transport's ctx was not cancelled when its only caller went away")
		}
	})

	t.Run("one of two callers cancels", func(t *testing.T) {
		g := newGate("simple")
		c := newModel(t, g, nil)
		ctxA, cancelA := context.WithCancel(context.Background())
		defer cancelA()
		chA := classifyAsync(ctxA, c, in)
		callCtx := g.next(t)
		chB := classifyAsync(context.Background(), c, in)
		eventually(t, "B joins the shared call", func() bool { return c.Waiters(in) == 2 })
		cancelA()
		if r := receive(t, chA); r.Outcome != classifier.OutcomeError || !errors.Is(r.Err, context.Canceled) {
			t.Errorf("A got %q/%q (%v), want error (context canceled)", r.Label, r.Outcome, r.Err)
		}
		eventually(t, "A leaves the shared call", func() bool { return c.Waiters(in) == 1 })
		if err := callCtx.Err(); err != nil {
			t.Fatalf("the shared call was cancelled (%v) while B still waits on it", err)
		}
		g.open()
		if r := receive(t, chB); r.Label != "simple" || r.Outcome != classifier.OutcomeOK {
			t.Errorf("B got %q/%q (%v), want simple/ok", r.Label, r.Outcome, r.Err)
		}
		if got := g.calls.Load(); got != 1 {
			t.Errorf("%d transport calls, want 1", got)
		}
	})

	t.Run("the replica sees the disconnect", func(t *testing.T) {
		arrived, gone := make(chan struct{}, 1), make(chan struct{}, 1)
		_, tr := startSim(t, vllmsim.WithRequestHook(func(r *http.Request, _ []byte) {
			arrived <- struct{}{}
			select {
			case <-r.Context().Done():
				gone <- struct{}{}
			case <-time.After(waitFor):
			}
		}))
		c := newModel(t, tr, nil)
		ctx, cancel := context.WithCancel(context.Background())
		ch := classifyAsync(ctx, c, in)
		select {
		case <-arrived:
		case <-time.After(waitFor):
			t.Fatal("the classifier request did not reach the replica")
		}
		cancel()
		if r := receive(t, ch); r.Outcome != classifier.OutcomeError {
			t.Errorf("outcome %q (%v), want error", r.Outcome, r.Err)
		}
		select {
		case <-gone:
		case <-time.After(waitFor):
			t.Fatal("the replica's request context was not cancelled after the client went away")
		}
	})

	// A client that gave up and retries the same request at once must not
	// join the call its first attempt cancelled, which ends in an error.
	t.Run("a new caller does not join a cancelled call", func(t *testing.T) {
		var calls atomic.Int64
		firstCtx, unblock := make(chan context.Context, 1), make(chan struct{})
		defer close(unblock)
		tr := transportFunc(func(ctx context.Context, _ []byte) ([]byte, error) {
			if calls.Add(1) == 1 {
				firstCtx <- ctx
				<-unblock // a replica slow to notice the cancel
				return nil, ctx.Err()
			}
			return answer("simple"), nil
		})
		c := newModel(t, tr, nil)
		ctx, cancel := context.WithCancel(context.Background())
		chA := classifyAsync(ctx, c, in)
		var callCtx context.Context
		select {
		case callCtx = <-firstCtx:
		case <-time.After(waitFor):
			t.Fatal("no transport call")
		}
		cancel()
		receive(t, chA)
		<-callCtx.Done()
		if r := receive(t, classifyAsync(context.Background(), c, in)); r.Label != "simple" || r.Outcome != classifier.OutcomeOK {
			t.Errorf("retry got %q/%q (%v), want simple/ok", r.Label, r.Outcome, r.Err)
		}
	})
}

func TestTruncation(t *testing.T) {
	runes := []struct{ name, r string }{{"2-byte", "é"}, {"3-byte", "語"}, {"4-byte", "😀"}}
	for _, rc := range runes {
		t.Run(rc.name, func(t *testing.T) {
			for budget := 40; budget <= 80; budget++ {
				tr := &capture{label: "simple"}
				c := newModel(t, tr, func(o *classifier.Options) { o.MaxInputChars = budget })
				system := "SYS:" + strings.Repeat(rc.r, 100)
				user := "HEAD:" + strings.Repeat(rc.r, 200) + ":TAIL"
				c.Classify(context.Background(), classifier.Input{System: system, LastUser: user, Turns: 1})
				sentSys, sentUser := sentParts(t, tr.last(t))

				if !wholeRunes(sentSys) || !wholeRunes(sentUser) {
					t.Errorf("budget %d: invalid UTF-8 sent: %q / %q", budget, sentSys, sentUser)
				}
				if len(sentSys) > budget/4 || !strings.HasPrefix(system, sentSys) {
					t.Errorf("budget %d: system %q is not a prefix within %d bytes", budget, sentSys, budget/4)
				}
				if total := len(sentSys) + len(sentUser); total > budget {
					t.Errorf("budget %d: %d bytes sent (system %d + user %d)", budget, total, len(sentSys), len(sentUser))
				}
				if !strings.HasPrefix(sentUser, "HEAD:") || !strings.HasSuffix(sentUser, ":TAIL") || !strings.Contains(sentUser, "\n…\n") {
					t.Errorf("budget %d: user turn %q does not keep head and tail", budget, sentUser)
				}
				h, tail, _ := strings.Cut(sentUser, "\n…\n")
				if !strings.HasPrefix(user, h) || !strings.HasSuffix(user, tail) {
					t.Errorf("budget %d: %q + %q are not the head and tail of the input", budget, h, tail)
				}
			}
		})
	}

	t.Run("completion prompt", func(t *testing.T) {
		tr := &capture{label: "simple"}
		c := newModel(t, tr, func(o *classifier.Options) { o.MaxInputChars = 61 })
		prompt := "BEGIN" + strings.Repeat("ü語😀", 50) + "END"
		c.Classify(context.Background(), classifier.Input{Prompt: prompt})
		sent, ok := strings.CutPrefix(userTurn(t, tr.last(t)), "Completion prompt:\n")
		if !ok || len(sent) > 61 || !wholeRunes(sent) || !strings.HasPrefix(sent, "BEGIN") || !strings.HasSuffix(sent, "END") {
			t.Errorf("prompt sent as %q (%d bytes), want head and tail within 61 bytes", sent, len(sent))
		}
	})

	t.Run("short input is sent whole", func(t *testing.T) {
		tr := &capture{label: "simple"}
		c := newModel(t, tr, func(o *classifier.Options) { o.MaxInputChars = 100 })
		c.Classify(context.Background(), classifier.Input{System: "Be brief.", LastUser: "¿Qué hora es?", Turns: 1})
		if sys, user := sentParts(t, tr.last(t)); sys != "Be brief." || user != "¿Qué hora es?" {
			t.Errorf("sent %q / %q, want the input unchanged", sys, user)
		}
	})

	t.Run("what is cut away does not split the cache", func(t *testing.T) {
		tr := &capture{label: "simple"}
		c := newModel(t, tr, func(o *classifier.Options) { o.MaxInputChars = 100 })
		pad := strings.Repeat("x", 250)
		a := "HEAD " + pad + "a" + pad + " TAIL"
		b := "HEAD " + pad + "b" + pad + " TAIL"
		c.Classify(context.Background(), classifier.Input{LastUser: a})
		if r := c.Classify(context.Background(), classifier.Input{LastUser: b}); r.Outcome != classifier.OutcomeCacheHit {
			t.Errorf("outcome %q, want cache_hit: the same text is sent for both", r.Outcome)
		}
	})
}

// wholeRunes reports whether s, decoded from a request body, was cut on rune
// boundaries. JSON encoding replaces a broken rune with U+FFFD, which no
// test input contains.
func wholeRunes(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, utf8.RuneError)
}

// userTurn is the content of the user message in a classifier request.
func userTurn(t *testing.T, body []byte) string {
	t.Helper()
	var req struct {
		Messages []struct{ Role, Content string }
	}
	if err := json.Unmarshal(body, &req); err != nil || len(req.Messages) != 2 || req.Messages[1].Role != "user" {
		t.Fatalf("unexpected request (%v): %s", err, body)
	}
	return req.Messages[1].Content
}

// sentParts splits the user turn's summary into the system prompt and
// current instruction it quotes.
func sentParts(t *testing.T, body []byte) (system, user string) {
	t.Helper()
	s := userTurn(t, body)
	_, rest, ok := strings.Cut(s, "Current instruction:\n")
	if !ok {
		t.Fatalf("no current instruction in %q", s)
	}
	user, sys, hasSys := strings.Cut(rest, "\nSystem prompt (start):\n")
	if hasSys {
		system = strings.TrimSuffix(sys, "\n")
	} else {
		user = strings.TrimSuffix(user, "\n")
	}
	return system, user
}

// TestTruncationBoundsEveryPart: whatever a client writes (many long tool
// names, a long system prompt and turn), what the classifier sends fits
// the input bound; names are cut to 64 bytes, at most 32 of them.
func TestTruncationBoundsEveryPart(t *testing.T) {
	var tools []string
	for i := range 100 {
		tools = append(tools, strings.Repeat(string(rune('a'+i%26)), 20<<10))
	}
	for _, limit := range []int{100, 1000, 4000} {
		in := classifier.Truncated(classifier.Input{System: strings.Repeat("s", 50000), LastUser: strings.Repeat("u", 50000), Tools: tools}, limit)
		total := len(in.System) + len(in.LastUser)
		for _, n := range in.Tools {
			if len(n) > 64 {
				t.Errorf("limit %d: a tool name of %d bytes", limit, len(n))
			}
			total += len(n) + 2
		}
		if len(in.Tools) > 32 || total > limit {
			t.Errorf("limit %d: %d tools, %d characters in all", limit, len(in.Tools), total)
		}
		if len(in.LastUser) == 0 {
			t.Errorf("limit %d: the last turn was dropped", limit)
		}
	}
}
