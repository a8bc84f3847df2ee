package classifier

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/prometheus/client_golang/prometheus"
)

// Result is one classification.
type Result struct {
	Label  string
	Scores map[string]float64
	// Outcome is how it was obtained: ok, cache_hit, timeout or error (the
	// last two carry the on_error label).
	Outcome string
	Err     error
}

// Outcomes, as counted in switchyard_classifier_requests_total{result}.
const (
	OutcomeOK       = "ok"
	OutcomeCacheHit = "cache_hit"
	OutcomeSticky   = "sticky"
	OutcomeTimeout  = "timeout"
	OutcomeError    = "error"
	// OutcomeCircuitOpen: the circuit breaker was open, so the classifier
	// pool was not called and the on_error label was used.
	OutcomeCircuitOpen = "circuit_open"
	// OutcomeRefused: the classifier pool refused this request's
	// classification (4xx, typically its length); the on_error label was
	// used and the breaker was not told.
	OutcomeRefused = "refused"
)

// Fallback reports whether r carries the on_error label because the
// classifier could not answer (timeout, error, open circuit, refused).
func (r Result) Fallback() bool {
	return r.Outcome == OutcomeTimeout || r.Outcome == OutcomeError || r.Outcome == OutcomeCircuitOpen || r.Outcome == OutcomeRefused
}

// Options configures a Classifier.
type Options struct {
	Kind   string
	Labels []string
	// Descriptions say what each label means (used in the model prompt).
	Descriptions  map[string]string
	MaxInputChars int
	Timeout       time.Duration
	OnError       string
	CacheSize     int
	CacheTTL      time.Duration
	Concurrency   int
	// Model is the classifier pool's served model name.
	Model        string
	GuidedChoice bool
	// Prompt overrides DefaultPrompt: plain text in which
	// LabelsPlaceholder becomes the list of labels (CheckPrompt).
	Prompt string
	// Transport sends the classifier's chat request (kind model).
	Transport Transport
	// Metrics, when non-nil, receives the classifier's series.
	Metrics *Metrics
	// BreakerFailures consecutive failed calls (errors and timeouts) open
	// the circuit: for BreakerCooldown the backend is not called and
	// every classification is the on_error label; then one probe call
	// at a time is let through, and a success closes the circuit. 0
	// turns the breaker off.
	BreakerFailures int
	BreakerCooldown time.Duration
	// OnBreaker, when set, is told when the circuit opens (with the last
	// error) and closes (err nil).
	OnBreaker func(open bool, err error)
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// Transport sends one chat completion request body to the classifier pool
// and returns the response body. The router implements it with the same
// pools machinery as client requests (balanced, counted, health-aware).
type Transport interface {
	ChatCompletion(ctx context.Context, body []byte) ([]byte, error)
}

// backend is one classifier kind.
type backend interface {
	classify(ctx context.Context, in *Input) (label string, scores map[string]float64, err error)
}

// kinds is the one registry of classifier kinds.
var kinds = map[string]func(o *Options) (backend, error){
	"model":     newModelBackend,
	"heuristic": func(o *Options) (backend, error) { return newHeuristic(o.Labels), nil },
}

// Kinds lists the valid classifier kinds, sorted.
func Kinds() []string {
	out := make([]string, 0, len(kinds))
	for k := range kinds {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Classifier classifies requests with caching, a shared call per key, a
// concurrency cap and a timeout. Safe for concurrent use.
type Classifier struct {
	opts    Options
	backend backend
	cache   *lru.Cache[uint64, cached]
	slots   *slots
	flights flightGroup
	seed    maphash.Seed
	breaker breaker
}

// breaker is the classifier's circuit breaker (see Options).
type breaker struct {
	mu        sync.Mutex
	failures  int       // consecutive
	openUntil time.Time // zero: closed
	probing   bool      // a probe call is out (half-open)
	// streak is the tenant of the first failure since the last success;
	// mixed: another tenant failed since too.
	streak string
	mixed  bool
	// recent are the last two different tenants that called, and when.
	recent [2]recentCall
}

type recentCall struct {
	tenant string
	at     time.Time
}

// called notes a call of tenant at now. b.mu is held.
func (b *breaker) called(tenant string, now time.Time) {
	switch {
	case b.recent[0].tenant == tenant:
		b.recent[0].at = now
	case b.recent[1].tenant == tenant:
		b.recent[1].at = now
	default:
		i := 0
		if b.recent[1].at.Before(b.recent[0].at) {
			i = 1
		}
		b.recent[i] = recentCall{tenant, now}
	}
}

// othersCalled reports whether a tenant other than tenant called within
// window of now. b.mu is held.
func (b *breaker) othersCalled(tenant string, now time.Time, window time.Duration) bool {
	for _, r := range b.recent {
		if r.tenant != "" && r.tenant != tenant && now.Sub(r.at) <= window {
			return true
		}
	}
	return false
}

// allow reports whether tenant's call may be made now, and whether it is
// the probe of a half-open circuit.
func (c *Classifier) allow(tenant string) (ok, probe bool) {
	if c.opts.BreakerFailures <= 0 {
		return true, false
	}
	b := &c.breaker
	b.mu.Lock()
	defer b.mu.Unlock()
	b.called(tenant, c.now())
	switch {
	case b.openUntil.IsZero():
		return true, false
	case c.now().Before(b.openUntil) || b.probing:
		return false, false
	}
	b.probing = true
	return true, true
}

// outcome records the result of tenant's call in the breaker. The pool
// fails, not one tenant's calls, when the failures in a row are of more
// than one tenant, or of the only tenant calling lately: a tenant that
// loads the pool with calls that time out while another's succeed opens
// nothing.
func (c *Classifier) outcome(tenant string, failed, probe bool, err error) {
	if c.opts.BreakerFailures <= 0 {
		return
	}
	b := &c.breaker
	b.mu.Lock()
	var opened, closed bool
	if probe {
		b.probing = false
	}
	switch {
	case !failed && !probe && !b.openUntil.IsZero():
		// A call made before the circuit opened: only the probe decides.
	case !failed:
		closed = !b.openUntil.IsZero()
		b.failures, b.openUntil = 0, time.Time{}
		b.streak, b.mixed = "", false
	case probe || b.openUntil.IsZero():
		if b.failures++; b.failures == 1 {
			b.streak, b.mixed = tenant, false
		} else if tenant != b.streak {
			b.mixed = true
		}
		now := c.now()
		pool := b.mixed || !b.othersCalled(tenant, now, c.opts.BreakerCooldown)
		if probe || (b.failures >= c.opts.BreakerFailures && pool) {
			opened = b.openUntil.IsZero()
			b.openUntil = c.now().Add(c.opts.BreakerCooldown)
		}
	}
	if m := c.opts.Metrics; m != nil && (opened || closed) {
		m.circuit.Set(boolFloat(opened)) // under the lock: in the order of the changes
	}
	b.mu.Unlock()
	if (opened || closed) && c.opts.OnBreaker != nil {
		c.opts.OnBreaker(opened, err)
	}
}

// endProbe ends a probe that says nothing of the backend's health.
func (c *Classifier) endProbe() {
	c.breaker.mu.Lock()
	c.breaker.probing = false
	c.breaker.mu.Unlock()
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func (c *Classifier) now() time.Time {
	if c.opts.Now != nil {
		return c.opts.Now()
	}
	return time.Now()
}

type cached struct {
	label   string
	scores  map[string]float64
	expires time.Time // zero: never
}

// New builds a classifier; an unknown kind is an error listing the kinds.
func New(o Options) (*Classifier, error) {
	mk, ok := kinds[o.Kind]
	if !ok {
		return nil, fmt.Errorf("classifier: unknown kind %q (known: %s)", o.Kind, strings.Join(Kinds(), ", "))
	}
	if len(o.Labels) < 2 {
		return nil, errors.New("classifier: at least two labels are required")
	}
	// The config loader fills in every default; a zero here is the
	// caller's mistake, not a request for a default.
	if !slices.Contains(o.Labels, o.OnError) {
		return nil, fmt.Errorf("classifier: on_error %q is not a label", o.OnError)
	}
	if o.MaxInputChars <= 0 || o.Timeout <= 0 || o.Concurrency <= 0 {
		return nil, errors.New("classifier: max_input_chars, timeout and concurrency must be positive")
	}
	b, err := mk(&o)
	if err != nil {
		return nil, err
	}
	c := &Classifier{opts: o, backend: b, slots: newSlots(o.Concurrency), seed: maphash.MakeSeed()}
	if o.CacheSize > 0 {
		// A plain LRU with an expiry per entry rather than expirable.LRU,
		// whose cleanup goroutine never stops (golang-lru v2.0.7) and would
		// pin the whole cache of every classifier a reload replaces.
		// Expired entries are skipped on Get and overwritten or evicted.
		c.cache, _ = lru.New[uint64, cached](o.CacheSize) // errs only for size <= 0
	}
	c.flights.calls = map[uint64]*flight{}
	return c, nil
}

// Labels returns the configured labels.
func (c *Classifier) Labels() []string { return c.opts.Labels }

// Kind returns the classifier kind.
func (c *Classifier) Kind() string { return c.opts.Kind }

// Classify returns the class of in. It never fails: a timeout or error
// yields the on_error label with Outcome timeout or error. ctx is the
// client's request context: when every request waiting on a shared call has
// gone, the call is cancelled.
func (c *Classifier) Classify(ctx context.Context, in Input) Result {
	start := c.now()
	in.truncate(c.opts.MaxInputChars)
	key := in.hash(c.seed)
	if c.cache != nil {
		if v, ok := c.cache.Get(key); ok && (v.expires.IsZero() || start.Before(v.expires)) {
			return c.record(Result{Label: v.label, Scores: v.scores, Outcome: OutcomeCacheHit}, start)
		}
	}
	res := c.flights.do(ctx, key, func(callCtx context.Context) Result {
		return c.call(callCtx, &in, key)
	})
	if res.Label == "" {
		// This request's client went away while the shared call ran.
		res = c.fail(res.Err)
	}
	return c.record(res, start)
}

// call runs one backend classification under the concurrency cap and the
// timeout, and caches a good answer.
func (c *Classifier) call(ctx context.Context, in *Input, key uint64) Result {
	tenant, weight := TenantOf(ctx)
	ok, probe := c.allow(tenant)
	if !ok {
		r := c.fail(errCircuitOpen)
		r.Outcome = OutcomeCircuitOpen
		return r
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	if err := c.slots.acquire(ctx, tenant, weight); err != nil {
		if probe {
			c.endProbe() // not the backend's fault: let another probe go
		}
		return c.fail(err)
	}
	defer c.slots.release(tenant)
	label, scores, err := c.backend.classify(ctx, in)
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", ctx.Err(), err)
		}
		// Every client that waited on this call left, or the request
		// itself was refused: not the pool's fault.
		// A call that never reached a replica because every slot of the
		// pool was taken (a tenant's long streams) says nothing of the
		// pool's health either.
		requestCaused := parent.Err() != nil || errors.Is(err, ErrRefused) || errors.Is(err, ErrNoSlot)
		if !requestCaused {
			c.outcome(tenant, true, probe, err)
		} else if probe {
			c.endProbe()
		}
		r := c.fail(err)
		if errors.Is(err, ErrRefused) {
			r.Outcome = OutcomeRefused
		}
		return r
	}
	c.outcome(tenant, false, probe, nil)
	if c.cache != nil {
		v := cached{label: label, scores: scores}
		if c.opts.CacheTTL > 0 {
			v.expires = c.now().Add(c.opts.CacheTTL)
		}
		c.cache.Add(key, v)
	}
	return Result{Label: label, Scores: scores, Outcome: OutcomeOK}
}

func (c *Classifier) fail(err error) Result {
	outcome := OutcomeError
	if errors.Is(err, context.DeadlineExceeded) {
		outcome = OutcomeTimeout
	}
	return Result{Label: c.opts.OnError, Scores: map[string]float64{c.opts.OnError: 1}, Outcome: outcome, Err: err}
}

func (c *Classifier) record(r Result, start time.Time) Result {
	if m := c.opts.Metrics; m != nil {
		m.requests.WithLabelValues(r.Label, r.Outcome).Inc()
		if r.Outcome != OutcomeCacheHit {
			m.duration.Observe(c.now().Sub(start).Seconds())
		}
		if p, ok := r.Scores[r.Label]; ok && r.Outcome == OutcomeOK {
			m.confidence.Observe(p)
		}
	}
	return r
}

// CountSticky records a class reused from a sticky session.
func (c *Classifier) CountSticky(label string) {
	if m := c.opts.Metrics; m != nil {
		m.requests.WithLabelValues(label, OutcomeSticky).Inc()
	}
}

// flightGroup shares one backend call among concurrent identical requests.
// Unlike x/sync/singleflight, the shared call's context is cancelled when
// every waiting request has gone, so a client disconnect cancels the
// classifier call without failing others still waiting on it.
type flightGroup struct {
	mu    sync.Mutex
	calls map[uint64]*flight
}

type flight struct {
	done    chan struct{}
	res     Result
	waiters int
	cancel  context.CancelFunc
}

func (g *flightGroup) do(ctx context.Context, key uint64, fn func(context.Context) Result) Result {
	g.mu.Lock()
	f, ok := g.calls[key]
	if !ok {
		callCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		f = &flight{done: make(chan struct{}), cancel: cancel}
		g.calls[key] = f
		go func() {
			f.res = fn(callCtx)
			g.mu.Lock()
			if g.calls[key] == f {
				delete(g.calls, key)
			}
			g.mu.Unlock()
			cancel()
			close(f.done)
		}()
	}
	f.waiters++
	g.mu.Unlock()
	select {
	case <-f.done:
		return f.res
	case <-ctx.Done():
		g.mu.Lock()
		f.waiters--
		if f.waiters == 0 {
			// Nobody waits any more: cancel the call and forget it, so that
			// a new identical request (a client retrying) starts a fresh
			// call instead of joining this one and getting its error.
			f.cancel()
			if g.calls[key] == f {
				delete(g.calls, key)
			}
		}
		g.mu.Unlock()
		return Result{Outcome: OutcomeError, Err: ctx.Err()}
	}
}

// ErrRefused marks a Transport error that the request caused (the pool
// answered 4xx: the classifier's own request was refused, typically for
// its length). It never counts toward the circuit breaker.
var ErrRefused = errors.New("the classifier pool refused the request")

// ErrNoSlot marks a Transport error of a call that never reached a
// replica: it waited for a slot of a pool whose replicas were all busy
// (and available) until its timeout. It never counts toward the circuit
// breaker: a tenant holding the pool's slots is not the pool failing.
var ErrNoSlot = errors.New("the classifier pool had no free slot")

// errCircuitOpen is the error of a classification the breaker refused.
var errCircuitOpen = errors.New("classifier circuit open: the classifier pool failed repeatedly; using on_error until a probe succeeds")

// Metrics are the classifier's series, registered once and shared by every
// classifier built across reloads.
type Metrics struct {
	requests   *prometheus.CounterVec
	duration   prometheus.Histogram
	confidence prometheus.Histogram
	circuit    prometheus.Gauge
}

// NewMetrics registers the classifier series on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_classifier_requests_total",
			Help: "Classifications by label and result (ok, cache_hit, sticky, timeout, error, circuit_open, refused).",
		}, []string{"label", "result"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "switchyard_classifier_duration_seconds",
			Help:    "Time to classify a request that missed the cache.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
		}),
		confidence: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "switchyard_classifier_confidence",
			Help:    "Probability the classifier gave its chosen label.",
			Buckets: []float64{.5, .6, .7, .8, .9, .95, .99, 1},
		}),
	}
	m.circuit = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "switchyard_classifier_circuit_open",
		Help: "1 while the classifier's circuit breaker is open (the classifier pool is not called; on_error is used).",
	})
	reg.MustRegister(m.requests, m.duration, m.confidence, m.circuit)
	return m
}

// CacheHitRate is the share of classifications that asked the cache and
// found their answer there: cache_hit over every result but sticky (a
// sticky session reuses its class without asking the cache). results are
// switchyard_classifier_requests_total by result, or their increase over a
// window; ok is false when no classification asked the cache. The status
// page, the demo and the Grafana panel "Classifier cache hit rate" use this
// one definition.
func CacheHitRate(results map[string]float64) (rate float64, ok bool) {
	var asked float64
	for r, n := range results {
		if r != OutcomeSticky {
			asked += n
		}
	}
	if asked <= 0 {
		return 0, false
	}
	return results[OutcomeCacheHit] / asked, true
}
