package classifier

import (
	"context"
	"encoding/binary"
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

// Input is what a classifier reads of a request. The router fills it from
// the body; Truncate bounds it before it is sent or hashed.
type Input struct {
	// System is the system (or developer) prompt.
	System string
	// LastUser is the last user turn's text.
	LastUser string
	// Tools are the names of the tools offered.
	Tools []string
	// Turns is the number of messages.
	Turns int
	// Prompt is the prompt of a /v1/completions request.
	Prompt string
	// Last says what the conversation's last message is: LastInstruction
	// (a user message with text), LastToolResult, or "" (unknown: a
	// completions prompt, an assistant prefill). With it, the summary
	// describes the turn: Last, Steps, PromptTokens and MaxTokens.
	Last string
	// Steps is the number of assistant turns since the last user message
	// with text (0 when the last message is that message).
	Steps int
	// PromptTokens is the request's prompt size estimate; MaxTokens the
	// answer length it asks for (0: none). The summary shows both in
	// bands (bands), so nearby sizes read, hash and cache alike.
	PromptTokens, MaxTokens int
}

// What Input.Last says of the last message.
const (
	LastInstruction = "instruction"
	LastToolResult  = "tool_result"
)

// answerBand is band for an answer length, "not set" for none.
func answerBand(n int) string {
	if n <= 0 {
		return "not set"
	}
	return band(n)
}

// band writes n tokens as the band it falls in: under 1k, then doubling
// bands (1k-2k, 2k-4k, ...) up to 128k and more.
func band(n int) string {
	if n < 1024 {
		return "under 1k"
	}
	lo := 1
	for lo*2*1024 <= n && lo < 128 {
		lo *= 2
	}
	if lo >= 128 {
		return "128k or more"
	}
	return fmt.Sprintf("%dk-%dk", lo, lo*2)
}

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
	// Prompt overrides the default system prompt template (text/template
	// over .Labels, .Descriptions).
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
	sem     chan struct{}
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
}

// allow reports whether a call may be made now, and whether it is the
// probe of a half-open circuit.
func (c *Classifier) allow() (ok, probe bool) {
	if c.opts.BreakerFailures <= 0 {
		return true, false
	}
	b := &c.breaker
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.openUntil.IsZero():
		return true, false
	case c.now().Before(b.openUntil) || b.probing:
		return false, false
	}
	b.probing = true
	return true, true
}

// outcome records a call's result in the breaker.
func (c *Classifier) outcome(failed, probe bool, err error) {
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
	case probe || b.openUntil.IsZero():
		b.failures++
		if probe || b.failures >= c.opts.BreakerFailures {
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
	c := &Classifier{opts: o, backend: b, sem: make(chan struct{}, o.Concurrency), seed: maphash.MakeSeed()}
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
	ok, probe := c.allow()
	if !ok {
		r := c.fail(errCircuitOpen)
		r.Outcome = OutcomeCircuitOpen
		return r
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	select {
	case c.sem <- struct{}{}:
		defer func() { <-c.sem }()
	case <-ctx.Done():
		if probe {
			c.endProbe() // not the backend's fault: let another probe go
		}
		return c.fail(ctx.Err())
	}
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
			c.outcome(true, probe, err)
		} else if probe {
			c.endProbe()
		}
		r := c.fail(err)
		if errors.Is(err, ErrRefused) {
			r.Outcome = OutcomeRefused
		}
		return r
	}
	c.outcome(false, probe, nil)
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

// truncate keeps the system prompt's first part and the head and tail of
// the last user turn within limit characters in total, tool names
// included.
//
// Every part a client writes is bounded, so no request can make the
// classifier's own call overflow its model's context: at most maxTools
// tool names of at most maxToolName bytes each, within an eighth of max
// in all; the system prompt within a quarter; the last user turn within
// what remains. The prompt of a completions request, which has no other
// part, may use all of max.
func (in *Input) truncate(limit int) {
	if len(in.Tools) > maxTools {
		in.Tools = in.Tools[:maxTools]
	}
	toolBudget := limit / 8
	tools := make([]string, 0, len(in.Tools))
	for _, t := range in.Tools {
		t = head(t, min(maxToolName, toolBudget))
		if t == "" {
			break
		}
		toolBudget -= len(t)
		tools = append(tools, t)
	}
	in.Tools = tools
	used := 0
	for _, t := range tools {
		used += len(t) + 2 // ", " between names
	}
	in.System = head(in.System, limit/4)
	in.LastUser = headTail(in.LastUser, max(0, limit-len(in.System)-used))
	in.Prompt = headTail(in.Prompt, limit)
}

// The bounds of the tool names the classifier sees: OpenAI's function
// names are at most 64 characters.
const (
	maxTools    = 32
	maxToolName = 64
)

func head(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return validUTF8Prefix(s[:n])
}

func headTail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const sep = "\n…\n"
	if n <= len(sep)+2 {
		return head(s, n)
	}
	h := (n - len(sep)) / 2
	t := n - len(sep) - h
	return validUTF8Prefix(s[:h]) + sep + validUTF8Suffix(s[len(s)-t:])
}

func validUTF8Prefix(s string) string {
	for len(s) > 0 && !utf8ValidEnd(s) {
		s = s[:len(s)-1]
	}
	return s
}

func validUTF8Suffix(s string) string {
	for len(s) > 0 && s[0]&0xC0 == 0x80 {
		s = s[1:]
	}
	return s
}

func utf8ValidEnd(s string) bool {
	// Walk back over continuation bytes to the last rune start.
	i := len(s) - 1
	for i > 0 && s[i]&0xC0 == 0x80 && len(s)-i < 4 {
		i--
	}
	r := s[i:]
	need := 1
	switch b := r[0]; {
	case b >= 0xF0:
		need = 4
	case b >= 0xE0:
		need = 3
	case b >= 0xC0:
		need = 2
	}
	return len(r) >= need
}

// hash identifies what would be sent, for the cache and shared calls. Each
// field is written with its length first, so no two different inputs can
// run together into the same bytes.
func (in *Input) hash(seed maphash.Seed) uint64 {
	var h maphash.Hash
	h.SetSeed(seed)
	var n [8]byte
	writeInt := func(v int) {
		binary.LittleEndian.PutUint64(n[:], uint64(v))
		h.Write(n[:])
	}
	writeStr := func(s string) {
		writeInt(len(s))
		h.WriteString(s)
	}
	writeStr(in.System)
	writeStr(in.LastUser)
	writeStr(in.Prompt)
	writeInt(len(in.Tools))
	for _, t := range in.Tools {
		writeStr(t)
	}
	writeInt(in.Turns)
	writeStr(in.Last)
	if in.Last != "" {
		writeInt(in.Steps)
		writeStr(band(in.PromptTokens))
		writeStr(answerBand(in.MaxTokens))
	}
	return h.Sum64()
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
