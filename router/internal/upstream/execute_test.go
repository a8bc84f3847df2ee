package upstream

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/switchyard/switchyard/pools"
)

// testPool is a pool of n replicas at addresses nothing listens on (the
// executor's attempts are the script's, never HTTP), where one counted
// 5xx or three connection failures eject a replica, whatever the share of
// the pool already ejected.
func testPool(t *testing.T, n int) *pools.Pool {
	t.Helper()
	specs := make([]pools.ReplicaSpec, n)
	for i := range specs {
		specs[i] = pools.ReplicaSpec{Name: "r" + strconv.Itoa(i), URL: &url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(1+i)}}
	}
	p, err := pools.New(pools.Options{Name: "p", Model: "m", Balance: "least_outstanding", Replicas: specs,
		ConnectTimeout: time.Second, Staleness: time.Second, LoadFactor: 1.25,
		Health:  pools.HealthOptions{Path: "/health", Interval: time.Hour, Timeout: time.Second, UnhealthyAfter: 3, HealthyAfter: 1},
		Scrape:  pools.ScrapeOptions{Path: "/metrics", Interval: time.Hour, Timeout: time.Second},
		Outlier: pools.OutlierOptions{Consecutive5xx: 1, ConsecutiveConnectFailures: 3, MaxEjectionPercent: 100, BaseEjection: time.Hour, MaxEjection: time.Hour},
	}, pools.EndpointsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func testExecutor() *Executor {
	return &Executor{
		QueueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "q"}, []string{"pool"}),
		Retries:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: "r"}, []string{"pool", "reason"}),
		Poison:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "p"}, []string{"pool"}),
		Rand:      func() uint64 { return 0 },
	}
}

// script is an Attempt whose answers are given in the order asked (the
// last one repeats); it records the replicas asked.
type script struct {
	mu      sync.Mutex
	answers []Result
	asked   []string
	// send, when set, runs before each answer (to cancel, say).
	send func()
}

func (s *script) Acquired(*pools.Replica) {}

func (s *script) Send(_ context.Context, rep *pools.Replica) Result {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.send != nil {
		s.send()
	}
	s.asked = append(s.asked, rep.Name)
	return s.answers[min(len(s.asked), len(s.answers))-1]
}

var (
	ok      = Answered(pools.Success, "")
	status5 = func(code int) Result {
		return Retryable(pools.Status5xx, "status_5xx", "5xx", &Failure{Status: code, Msg: "boom"})
	}
	refused  = Retryable(pools.ConnectFailure, "connect", "refused", &Error{Pool: "p", Replica: "r", Err: errors.New("connection refused")})
	timedOut = Failed(pools.Timeout, "timeout", &Error{Pool: "p", Replica: "r", Err: errors.New("timeout")})
)

func tooMany(after time.Duration) Result {
	return Retryable(pools.Neutral, "status_429", "429", &Failure{Status: http.StatusTooManyRequests, Msg: "slow down", RetryAfter: after})
}

// total sums a counter vector's series (0 with none yet).
func total(c prometheus.Collector) float64 {
	ch := make(chan prometheus.Metric, 16)
	go func() {
		c.Collect(ch)
		close(ch)
	}()
	var sum float64
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err == nil && d.Counter != nil {
			sum += d.Counter.GetValue()
		}
	}
	return sum
}

// blamed names the replicas passive health was told failed (their last
// error is set; one 5xx ejects a replica unless it is the last one left).
func blamed(p *pools.Pool) []string {
	var out []string
	for _, r := range p.Replicas() {
		if last, _ := r.LastError(); last != "" {
			out = append(out, r.Name)
		}
	}
	return out
}

func distinct(names []string) bool {
	seen := map[string]bool{}
	for _, n := range names {
		if seen[n] {
			return false
		}
		seen[n] = true
	}
	return true
}

// TestExecuteRetryRule: a retryable failure is retried on a replica not
// yet tried, within the attempts; an answer passed on, a failure that is
// not retryable (a timeout) and a client gone end the execution; a
// request that got no answer at all may be asked again of the same
// replica when no other can take it, a 5xx never.
func TestExecuteRetryRule(t *testing.T) {
	for _, tc := range []struct {
		name      string
		replicas  int
		attempts  int
		answers   []Result
		wantAsked int
		wantSame  bool // the same replica asked twice
		wantErr   bool
		retries   float64
	}{
		{name: "answer at once", replicas: 3, attempts: 3, answers: []Result{ok}, wantAsked: 1},
		{name: "5xx then answer", replicas: 3, attempts: 3, answers: []Result{status5(502), ok}, wantAsked: 2, retries: 1},
		{name: "bounded by attempts", replicas: 3, attempts: 2, answers: []Result{status5(502)}, wantAsked: 2, wantErr: true, retries: 1},
		{name: "bounded by replicas", replicas: 2, attempts: 5, answers: []Result{status5(502)}, wantAsked: 2, wantErr: true, retries: 1},
		{name: "timeout not retried", replicas: 3, attempts: 3, answers: []Result{timedOut}, wantAsked: 1, wantErr: true},
		{name: "refused retried on the same replica", replicas: 1, attempts: 3, answers: []Result{refused, ok}, wantAsked: 2, wantSame: true, retries: 1},
		{name: "5xx never on the same replica", replicas: 1, attempts: 3, answers: []Result{status5(502)}, wantAsked: 1, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, e := testPool(t, tc.replicas), testExecutor()
			s := &script{answers: tc.answers}
			ex := &Execution{Pool: p, Req: &pools.Request{}, Attempts: tc.attempts, Call: s}
			res := e.Execute(context.Background(), ex)
			if len(s.asked) != tc.wantAsked || distinct(s.asked) == tc.wantSame {
				t.Errorf("asked %v; want %d attempts, the same replica twice: %v", s.asked, tc.wantAsked, tc.wantSame)
			}
			if (res.Err() != nil) != tc.wantErr {
				t.Errorf("result error %v, want one: %v", res.Err(), tc.wantErr)
			}
			if got := total(e.Retries); got != tc.retries || ex.Retries != int(tc.retries) {
				t.Errorf("retries counted %v (execution %d), want %v", got, ex.Retries, tc.retries)
			}
			for _, r := range p.Replicas() {
				if r.Inflight() != 0 {
					t.Errorf("%s still has %d in flight", r.Name, r.Inflight())
				}
			}
		})
	}
}

// TestExecuteClientGone: a client that goes away ends the execution at
// once: the failed attempt is not retried.
func TestExecuteClientGone(t *testing.T) {
	p, e := testPool(t, 3), testExecutor()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := &script{answers: []Result{status5(502)}, send: cancel}
	e.Execute(ctx, &Execution{Pool: p, Req: &pools.Request{}, Attempts: 3, Call: s})
	if len(s.asked) != 1 {
		t.Errorf("asked %v after the client left; want one attempt", s.asked)
	}
}

// TestExecuteRetryAfter: the client is told the longest wait any replica
// asked for.
func TestExecuteRetryAfter(t *testing.T) {
	p, e := testPool(t, 3), testExecutor()
	s := &script{answers: []Result{tooMany(5 * time.Second), tooMany(2 * time.Second)}}
	res := e.Execute(context.Background(), &Execution{Pool: p, Req: &pools.Request{}, Attempts: 2, Call: s})
	var f *Failure
	if !errors.As(res.Err(), &f) || f.Status != 429 || f.RetryAfter != 5*time.Second {
		t.Errorf("result %v; want the 429 with Retry-After 5s", res.Err())
	}
	if got := blamed(p); len(got) != 0 {
		t.Errorf("429s blamed %v; a replica asking to slow down is not failing", got)
	}
}

// TestExecutePoisonRule: the same 500 from two replicas with no untried
// replica left is the request's fault: not retried further, counted as
// poison, and no replica is blamed; while an untried replica is left it
// is asked, and a 500 followed by a different answer blames its replica.
func TestExecutePoisonRule(t *testing.T) {
	for _, tc := range []struct {
		name       string
		replicas   int
		attempts   int
		answers    []Result
		wantAsked  int
		wantPoison bool
		wantBlamed int
	}{
		{name: "two 500s, attempts spent", replicas: 3, attempts: 2, answers: []Result{status5(500)}, wantAsked: 2, wantPoison: true},
		{name: "two 500s, replicas spent", replicas: 2, attempts: 3, answers: []Result{status5(500)}, wantAsked: 2, wantPoison: true},
		{name: "an untried replica is asked", replicas: 3, attempts: 3, answers: []Result{status5(500)}, wantAsked: 3, wantPoison: true},
		{name: "two 503s", replicas: 2, attempts: 2, answers: []Result{status5(503)}, wantAsked: 2, wantPoison: true},
		{name: "500 then an answer", replicas: 3, attempts: 3, answers: []Result{status5(500), ok}, wantAsked: 2, wantBlamed: 1},
		{name: "two 500s, then the untried replica answers", replicas: 3, attempts: 3, answers: []Result{status5(500), status5(500), ok}, wantAsked: 3, wantBlamed: 2},
		{name: "two 503s, then the untried replica answers", replicas: 3, attempts: 3, answers: []Result{status5(503), status5(503), ok}, wantAsked: 3, wantBlamed: 2},
		{name: "500 then 503", replicas: 3, attempts: 2, answers: []Result{status5(500), status5(503)}, wantAsked: 2, wantBlamed: 2},
		{name: "502s are never poison", replicas: 2, attempts: 2, answers: []Result{status5(502)}, wantAsked: 2, wantBlamed: 2},
		{name: "a lone 500", replicas: 1, attempts: 3, answers: []Result{status5(500)}, wantAsked: 1, wantBlamed: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, e := testPool(t, tc.replicas), testExecutor()
			s := &script{answers: tc.answers}
			res := e.Execute(context.Background(), &Execution{Pool: p, Req: &pools.Request{}, Attempts: tc.attempts, Call: s})
			if len(s.asked) != tc.wantAsked || !distinct(s.asked) {
				t.Errorf("asked %v, want %d distinct replicas", s.asked, tc.wantAsked)
			}
			if res.Poison() != tc.wantPoison || total(e.Poison) != map[bool]float64{true: 1}[tc.wantPoison] {
				t.Errorf("poison %v (counted %v), want %v", res.Poison(), total(e.Poison), tc.wantPoison)
			}
			if got := blamed(p); len(got) != tc.wantBlamed {
				t.Errorf("blamed %v, want %d replicas", got, tc.wantBlamed)
			}
		})
	}
}

// TestExecuteOnlyAndAvoid: Only restricts the execution to one replica;
// Avoid keeps one from ever being asked.
func TestExecuteOnlyAndAvoid(t *testing.T) {
	p, e := testPool(t, 3), testExecutor()
	only := p.Replicas()[1]
	s := &script{answers: []Result{refused}}
	e.Execute(context.Background(), &Execution{Pool: p, Req: &pools.Request{}, Attempts: 3, Call: s, Only: only})
	if diff := cmp.Diff([]string{"r1", "r1", "r1"}, s.asked); diff != "" {
		t.Errorf("with Only r1 (-want +got):\n%s", diff)
	}

	p, e = testPool(t, 3), testExecutor()
	s = &script{answers: []Result{status5(502)}}
	ex := &Execution{Pool: p, Req: &pools.Request{}, Attempts: 3, Call: s}
	ex.Avoid[0] = p.Replicas()[0]
	e.Execute(context.Background(), ex)
	if len(s.asked) != 2 || slicesContain(s.asked, "r0") {
		t.Errorf("with r0 avoided, asked %v", s.asked)
	}
}

func slicesContain(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestJudge: what an answer's status and a failure to get one say of the
// replica, and whether another may be asked.
func TestJudge(t *testing.T) {
	for _, tc := range []struct {
		status  int
		outcome pools.Outcome
		retry   bool
	}{
		{200, pools.Success, false}, {400, pools.Success, false}, {429, pools.Neutral, true},
		{500, pools.Status5xx, true}, {503, pools.Status5xx, true}, {401, pools.Misconfigured, true},
		{403, pools.Misconfigured, true}, {404, pools.Misconfigured, true},
	} {
		if o, retry, _ := JudgeStatus(tc.status); o != tc.outcome || retry != tc.retry {
			t.Errorf("status %d: %v retry %v, want %v retry %v", tc.status, o, retry, tc.outcome, tc.retry)
		}
	}
	rep := testPool(t, 1).Replicas()[0]
	dial := &net.OpError{Op: "dial", Err: errors.New("i/o timeout")}
	if r := JudgeError(context.Background(), "p", rep, dial, "sending"); !r.retry {
		t.Errorf("a connect timeout is not retried: %+v", r)
	}
	if r := JudgeError(context.Background(), "p", rep, &PhaseTimeout{Msg: "header timeout"}, ""); r.retry || r.outcome != pools.Timeout {
		t.Errorf("a header timeout: %+v; want not retried, a timeout", r)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if r := JudgeError(ctx, "p", rep, errors.New("x"), ""); !r.Done() || r.outcome != pools.Neutral {
		t.Errorf("a client gone: %+v; want done and the replica not blamed", r)
	}
}

// TestParseRetryAfter: delay seconds or an HTTP date, capped at a day;
// anything else is no wait.
func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		v    string
		want time.Duration
	}{
		{"", 0}, {"7", 7 * time.Second}, {" 7 ", 7 * time.Second}, {"999999999", 24 * time.Hour},
		{"99999999999999999999", 24 * time.Hour}, {"-3", 0}, {"soon", 0},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0},
		{now.Add(72 * time.Hour).Format(http.TimeFormat), 24 * time.Hour},
	} {
		if got := ParseRetryAfter(tc.v, now); got != tc.want {
			t.Errorf("ParseRetryAfter(%q) = %v, want %v", tc.v, got, tc.want)
		}
	}
}
