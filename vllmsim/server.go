package vllmsim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// maxBodyBytes bounds a request body.
const maxBodyBytes = 32 << 20

// Server is one simulated vLLM replica serving one model. It implements
// http.Handler with these routes:
//
//	POST   /v1/chat/completions
//	POST   /v1/completions
//	POST   /v1/responses                 (responses.go)
//	GET    /v1/responses/{id}
//	POST   /v1/responses/{id}/cancel
//	DELETE /v1/responses/{id}            405, as vLLM has no such route
//	POST   /v1/messages                  (messages.go)
//	POST   /v1/messages/count_tokens
//	GET    /v1/models
//	GET    /health
//	GET    /metrics
//
// A Server is safe for concurrent use; it starts no goroutines of its own.
// To abort a response (Faults.CutAfterChunks) it panics with
// http.ErrAbortHandler, which net/http servers handle by dropping the
// connection; call it through an http.Server (httptest.NewServer), not with
// ServeHTTP on a recorder.
type Server struct {
	profile          Profile
	defaultMaxTokens int
	prefillSeconds   float64       // per prompt token, SpeedUp applied; 0 = instant
	decodeStep       time.Duration // per output token, SpeedUp applied; 0 = instant
	chooser          Chooser
	hook             func(r *http.Request, body []byte)
	scenario         *script // nil: no scenario
	// now and after are the clock (WithClock); after is nil for real
	// time, whose timers the exchanges reuse.
	now     func() time.Time
	after   func(time.Duration) <-chan time.Time
	started time.Time

	rngMu sync.Mutex
	rng   *rand.Rand // guarded by rngMu

	faults atomic.Pointer[Faults]
	batch  batch
	stored responseStore // Responses API responses kept for GET and previous_response_id
	kvHeld atomic.Int64  // tokens held by running requests
	prefix *prefixCache  // nil without Profile.PrefixCacheBlocks

	prefillMu   sync.Mutex
	prefillFree time.Time // Profile.SerialPrefill: when the last prefill scheduled ends; guarded by prefillMu

	requests, completed, failed, cancelled atomic.Int64
	promptTokens, completionTokens         atomic.Int64
	cacheQueries, cacheHits                atomic.Int64
	prefillNanos                           atomic.Int64

	metrics *metrics
	mux     *http.ServeMux
}

var _ http.Handler = (*Server)(nil)

// Option configures a Server.
type Option func(*Server)

// WithChooser sets the Chooser of constrained-choice requests (default
// DefaultChooser).
func WithChooser(c Chooser) Option {
	return func(s *Server) {
		if c != nil {
			s.chooser = c
		}
	}
}

// WithRand sets the randomness used for Faults.FailPercent and for response
// and tool-call ids. The default is seeded at random per server (distinct
// simulators never share ids); pass a seeded r for a repeatable run. The
// Server serializes its use of r.
func WithRand(r *rand.Rand) Option {
	return func(s *Server) {
		if r != nil {
			s.rng = r
		}
	}
}

// WithClock sets the Server's clock: now tells the time and after waits
// for a duration, as time.After does. The default is real time. Every
// duration the Server simulates (prefill, decode steps, Faults.Stall and
// SlowStart) is waited for with after, and every time it reports (created,
// latency metrics) is read from now, so a test can step simulated time by
// hand. A nil now or after keeps the real one.
func WithClock(now func() time.Time, after func(time.Duration) <-chan time.Time) Option {
	return func(s *Server) {
		if now != nil {
			s.now = now
		}
		s.after = after
	}
}

// WithRequestHook calls f with every inference POST body exactly as received,
// and every /v1/messages/count_tokens body, before it is parsed (even if it
// is not valid JSON). f runs on the request's goroutine and must not modify
// body.
func WithRequestHook(f func(r *http.Request, body []byte)) Option {
	return func(s *Server) { s.hook = f }
}

// New returns a Server for p. It panics if p.Validate fails: check
// user-supplied profiles with Validate first.
func New(p Profile, opts ...Option) *Server {
	if err := p.Validate(); err != nil {
		panic("vllmsim: " + err.Error())
	}
	speed := p.SpeedUp
	if speed == 0 {
		speed = 1
	}
	s := &Server{
		profile:          p,
		defaultMaxTokens: p.DefaultMaxTokens,
		chooser:          DefaultChooser,
		now:              time.Now,
		batch:            batch{max: p.MaxBatch},
	}
	if s.defaultMaxTokens == 0 {
		s.defaultMaxTokens = fallbackMaxTokens
	}
	if p.PrefixCacheBlocks > 0 {
		s.prefix = newPrefixCache(p.blockSize(), p.PrefixCacheBlocks)
	}
	if p.PrefillTPS > 0 {
		s.prefillSeconds = 1 / (p.PrefillTPS * speed)
	}
	if p.DecodeTPS > 0 {
		s.decodeStep = time.Duration(float64(time.Second) / (p.DecodeTPS * speed))
	}
	s.faults.Store(&Faults{})
	for _, o := range opts {
		o(s)
	}
	s.started = s.now()
	if s.rng == nil {
		// Seeded per server, so that several simulators (a cluster, or
		// separate `switchyard sim` processes) never hand out the same
		// response ids; WithRand makes a server reproducible.
		s.rng = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	s.metrics = newMetrics(s)

	s.mux = http.NewServeMux()
	s.stored.max = maxStoredResponses
	chat := api{
		parse: func(body []byte) (*plan, wire, *apiError) {
			p, e := s.parseChat(body)
			return p, nil, e
		},
		writeError: writeError,
	}
	completions := api{
		parse: func(body []byte) (*plan, wire, *apiError) {
			p, e := s.parseCompletion(body)
			return p, nil, e
		},
		writeError: writeError,
	}
	s.mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		s.serveInference(w, r, chat)
	})
	s.mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) {
		s.serveInference(w, r, completions)
	})
	s.routeResponses()
	s.routeMessages()
	s.mux.HandleFunc("POST /tokenize", s.serveTokenize)
	s.mux.HandleFunc("GET /v1/models", s.serveModels)
	s.mux.HandleFunc("GET /health", s.serveHealth)
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics.registry, promhttp.HandlerOpts{}))
	return s
}

// ServeHTTP routes r to the endpoint it names.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mux.ServeHTTP(w, r)
}

// Profile returns the profile the Server was built with.
func (s *Server) Profile() Profile { return s.profile }

// SetFaults replaces the faults; requests that arrive afterwards see them.
// It panics if f.Validate fails: check user-supplied faults with Validate
// first.
func (s *Server) SetFaults(f Faults) {
	if err := f.Validate(); err != nil {
		panic("vllmsim: " + err.Error())
	}
	s.faults.Store(&f)
}

// Faults returns the current faults.
func (s *Server) Faults() Faults { return *s.faults.Load() }

// Running is the number of requests holding a batch slot.
func (s *Server) Running() int {
	running, _ := s.batch.counts()
	return running
}

// Waiting is the number of requests queued for a batch slot.
func (s *Server) Waiting() int {
	_, waiting := s.batch.counts()
	return waiting
}

// Stats are totals since the Server was created. Every inference request
// counts in Requests and, once it has ended, in exactly one of Completed,
// Failed (an error status, or a response cut by a fault) and Cancelled (the
// client went away). Token totals count prompts when their prefill is done
// and output tokens as they are produced, cancelled requests included.
//
// The prefix-cache totals are counted when a request gets its batch slot,
// as vLLM counts them when it schedules one: PrefixCacheQueries is every
// prompt token looked up and PrefixCacheHits those found cached (the
// vllm:prefix_cache_queries and vllm:prefix_cache_hits counters; both 0
// without Profile.PrefixCacheBlocks). PrefillTime is the simulated prefill
// time scheduled so far, SpeedUp applied: uncached prompt tokens over
// PrefillTPS (0 when PrefillTPS is 0), faults not included.
type Stats struct {
	Requests           int64
	Completed          int64
	Failed             int64
	Cancelled          int64
	PromptTokens       int64
	CompletionTokens   int64
	PrefixCacheQueries int64
	PrefixCacheHits    int64
	PrefillTime        time.Duration
}

// Stats returns the totals so far.
func (s *Server) Stats() Stats {
	return Stats{
		Requests:           s.requests.Load(),
		Completed:          s.completed.Load(),
		Failed:             s.failed.Load(),
		Cancelled:          s.cancelled.Load(),
		PromptTokens:       s.promptTokens.Load(),
		CompletionTokens:   s.completionTokens.Load(),
		PrefixCacheQueries: s.cacheQueries.Load(),
		PrefixCacheHits:    s.cacheHits.Load(),
		PrefillTime:        time.Duration(s.prefillNanos.Load()),
	}
}

// reservePrefill schedules a prefill of d on the Server's one prefill
// engine (Profile.SerialPrefill) and returns when it starts: now, or when
// the prefills scheduled before it end.
func (s *Server) reservePrefill(now time.Time, d time.Duration) time.Time {
	s.prefillMu.Lock()
	defer s.prefillMu.Unlock()
	start := now
	if s.prefillFree.After(now) {
		start = s.prefillFree
	}
	s.prefillFree = start.Add(d)
	return start
}

// kvCacheUsage is the share of Profile.KVCacheTokens held by running
// requests, capped at 1.
func (s *Server) kvCacheUsage() float64 {
	if s.profile.KVCacheTokens <= 0 {
		return 0
	}
	return min(1, float64(s.kvHeld.Load())/float64(s.profile.KVCacheTokens))
}

// serveHealth answers 200 with an empty body, or 503 when Faults.Unhealthy.
func (s *Server) serveHealth(w http.ResponseWriter, _ *http.Request) {
	if s.faults.Load().Unhealthy {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// serveModels lists the served model in vLLM's shape.
func (s *Server) serveModels(w http.ResponseWriter, _ *http.Request) {
	b := make([]byte, 0, 256)
	b = append(b, `{"object":"list","data":[{"id":`...)
	b = appendString(b, s.profile.Model)
	b = append(b, `,"object":"model","created":`...)
	b = strconv.AppendInt(b, s.started.Unix(), 10)
	b = append(b, `,"owned_by":"vllm","root":`...)
	b = appendString(b, s.profile.Model)
	b = append(b, `,"parent":null`...)
	if s.profile.MaxModelLen > 0 {
		b = append(b, `,"max_model_len":`...)
		b = strconv.AppendInt(b, int64(s.profile.MaxModelLen), 10)
	}
	b = append(b, `,"permission":[]}]}`...)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	_, _ = w.Write(b)
}

// api is one inference endpoint: how it reads a request (a plan, and for
// the Responses and Messages APIs the wire that writes the answer) and how
// it answers errors.
type api struct {
	parse      func(body []byte) (*plan, wire, *apiError)
	writeError func(w http.ResponseWriter, e *apiError)
}

// serveInference answers an inference request: read, hook, stall,
// validate, inject failure, then run.
func (s *Server) serveInference(w http.ResponseWriter, r *http.Request, a api) {
	arrival := s.now()
	s.requests.Add(1)
	ctx := r.Context()

	body, err := readBody(w, r)
	if err != nil {
		if ctx.Err() != nil {
			s.cancelled.Add(1)
			return
		}
		s.failed.Add(1)
		if tooBig := (*http.MaxBytesError)(nil); errors.As(err, &tooBig) {
			a.writeError(w, &apiError{status: http.StatusRequestEntityTooLarge,
				message: fmt.Sprintf("the request body is larger than %d bytes", maxBodyBytes)})
			return
		}
		a.writeError(w, badRequest("reading the request body: %v", err))
		return
	}
	if s.hook != nil {
		s.hook(r, body)
	}

	f := s.faults.Load()
	if f.Stall > 0 && !s.sleep(ctx, f.Stall) {
		s.cancelled.Add(1)
		return
	}
	p, wr, e := a.parse(body)
	if e == nil && s.failNow(f.FailPercent) {
		e = &apiError{status: f.failStatus(), message: "simulated failure (vllmsim fail-percent fault)"}
	}
	if e == nil && f.PoisonText != "" && bytes.Contains(body, []byte(f.PoisonText)) {
		e = &apiError{status: f.failStatus(), message: "simulated failure on this input (vllmsim poison-text fault)"}
	}
	if e != nil {
		s.failed.Add(1)
		a.writeError(w, e)
		return
	}
	x := newExchange(s, w, r, p, f, arrival)
	x.wire = wr
	x.run()
}

// readBody reads the whole body, up to maxBodyBytes.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	rd := http.MaxBytesReader(w, r.Body, maxBodyBytes)
	if n := r.ContentLength; n > 0 && n <= maxBodyBytes {
		// net/http delivers exactly Content-Length bytes.
		body := make([]byte, n)
		if _, err := io.ReadFull(rd, body); err != nil {
			return nil, err
		}
		return body, nil
	}
	return io.ReadAll(rd)
}

// failNow draws whether a request fails under FailPercent.
func (s *Server) failNow(percent float64) bool {
	switch {
	case percent <= 0:
		return false
	case percent >= 100:
		return true
	}
	s.rngMu.Lock()
	x := s.rng.Float64() * 100
	s.rngMu.Unlock()
	return x < percent
}

// newID is prefix followed by 32 random hex digits, like vLLM's ids.
func (s *Server) newID(prefix string) string {
	s.rngMu.Lock()
	a, b := s.rng.Uint64(), s.rng.Uint64()
	s.rngMu.Unlock()
	buf := make([]byte, len(prefix)+32)
	copy(buf, prefix)
	putHex(buf[len(prefix):], a)
	putHex(buf[len(prefix)+16:], b)
	return string(buf)
}

// putHex writes v as 16 hex digits.
func putHex(dst []byte, v uint64) {
	for i := 15; i >= 0; i-- {
		dst[i] = hexDigits[v&0xf]
		v >>= 4
	}
}

// sleep waits for d on the Server's clock or until ctx ends; it reports
// whether d elapsed.
func (s *Server) sleep(ctx context.Context, d time.Duration) bool {
	var c <-chan time.Time
	if s.after != nil {
		c = s.after(d)
	} else {
		t := time.NewTimer(d)
		defer t.Stop()
		c = t.C
	}
	select {
	case <-c:
		return true
	case <-ctx.Done():
		return false
	}
}
