package router

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard/switchyard/router/internal/recorder"

	"github.com/switchyard/switchyard/router/internal/conns"
	"github.com/switchyard/switchyard/router/internal/discoveries"
	"github.com/switchyard/switchyard/router/internal/metrics"
	"github.com/switchyard/switchyard/router/internal/upstream"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/switchyard/switchyard/classifier"
	"github.com/switchyard/switchyard/discovery"
	"github.com/switchyard/switchyard/policy"
	"github.com/switchyard/switchyard/pools"
	"github.com/switchyard/switchyard/router/internal/admin"
)

// Options configures a Gateway. Zero values are production defaults.
type Options struct {
	// ConfigPath is re-read by Reload.
	ConfigPath string
	Logger     *slog.Logger
	// Registry receives every metric; nil means a new registry.
	Registry *prometheus.Registry
	// Tracer is used for request spans; nil means no tracing (a no-op provider).
	Tracer trace.TracerProvider
	// Propagator carries trace context to replicas; nil means W3C trace context.
	Propagator propagation.TextMapPropagator
	Version    string
	// Rand and Now are injected into pools and policy (tests). Now is the
	// time of day every component reads: sessions, the classifier cache,
	// the share controller, key rate limits, passive health and ejection,
	// Retry-After dates, the model lists' created times, the status page.
	// Durations the runtime's timers
	// enforce (timeouts, backoff, latency histograms) use the monotonic
	// clock.
	Rand func() uint64
	Now  func() time.Time
	// Transport overrides every pool's upstream transport (tests).
	Transport http.RoundTripper
	// Passive runs no health or scrape loops (one-shot tools like explain).
	Passive bool
	// ShadowPath, when set, is a candidate policy evaluated on live
	// traffic without affecting it (serve --shadow); Reload re-reads it.
	ShadowPath string
	// Override is applied to every config Reload reads before it is
	// checked and used, as it was to the first: serve's --listen and
	// --admin-listen. It returns the config to use and leaves its argument
	// unchanged (a loaded config is immutable; see policy.Config.WithListen).
	Override func(*policy.Config) *policy.Config
}

// Gateway serves the client API and the admin API from the current snapshot.
type Gateway struct {
	opts         Options
	log          *slog.Logger
	reg          *prometheus.Registry
	metrics      *metrics.Metrics
	classMetrics *classifier.Metrics
	tracer       trace.Tracer
	// tracing is false with no configured provider: then no span is
	// started at all, so tracing costs nothing (not even context values).
	tracing bool
	prop    propagation.TextMapPropagator
	// unknownModelHint is when the operator was last told of a client's
	// unknown model name (unix nanos; at most once a minute).
	unknownModelHint atomic.Int64
	// status is the status page's data; lastReload the last reload's
	// outcome (nil before any).
	status     *admin.Ring
	lastReload atomic.Pointer[admin.ReloadOutcome]
	started    time.Time

	// shadow is the candidate policy of serve --shadow, nil without one.
	shadow atomic.Pointer[shadowState]
	// endpoints owns every replica server across reloads.
	endpoints *pools.Endpoints
	// discs are the pools' running discoveries (reloadMu).
	discs *discoveries.Running
	snap  atomic.Pointer[Snapshot]
	// draining is set on shutdown: /readyz answers 503.
	draining atomic.Bool
	// streams are the client streams being pumped, with the cancel of
	// their upstream attempt, so that shutdown can end them cleanly.
	streamsMu sync.Mutex
	streams   map[*exchange]context.CancelCauseFunc
	// streamsCut: CutStreams has run; later streams are ended at once.
	streamsCut bool
	reloadMu   sync.Mutex // serialises Reload/Apply
	gen        atomic.Int64
	ctx        context.Context // owns pool loops
	stop       context.CancelFunc
	reqSeq     atomic.Uint64
	// rand jitters retry backoff (Options.Rand, else math/rand/v2).
	rand func() uint64
	// exec is the upstream executor.
	exec *upstream.Executor
	// via is this process's Via entry and local the machine's addresses
	// (loops.go).
	via   string
	local []netip.Addr
}

// New builds a gateway running cfg and starts its health and scrape loops.
func New(cfg *policy.Config, o Options) (*Gateway, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	rnd := o.Rand
	if rnd == nil {
		rnd = rand.Uint64
	}
	tp := o.Tracer
	if tp == nil {
		// Without a configured provider tracing must cost nothing: otel's
		// global delegate still allocates spans, noop does not.
		tp = noop.NewTracerProvider()
	}
	if o.Propagator == nil {
		o.Propagator = propagation.TraceContext{}
	}
	g := &Gateway{opts: o, log: o.Logger, reg: o.Registry, tracer: tp.Tracer("github.com/switchyard/switchyard/router"),
		tracing: o.Tracer != nil, prop: o.Propagator, rand: rnd, via: upstream.NewVia(), local: conns.LocalAddrs()}
	g.metrics = metrics.New(o.Registry, o.Version)
	g.exec = &upstream.Executor{QueueWait: g.metrics.QueueWait, Retries: g.metrics.Retries, Poison: g.metrics.Poison, Rand: rnd}
	g.classMetrics = classifier.NewMetrics(o.Registry)
	g.discs = discoveries.New(discoveries.Options{Log: o.Logger, Now: o.Now, Metrics: discovery.NewMetrics(o.Registry),
		Passive: o.Passive, Refuse: g.refuseSelf, Changed: g.rediscover})
	o.Registry.MustRegister(metrics.NewControlCollector(func() (metrics.ControlState, bool) {
		s := g.snap.Load()
		if s == nil || s.Policy == nil || s.Policy.Controller() == nil {
			return metrics.ControlState{}, false
		}
		c := s.Policy.Controller()
		return metrics.ControlState{Pool: c.Pool(), Target: c.Target(), Share: c.Share(), Threshold: c.Threshold()}, true
	}))
	o.Registry.MustRegister(pools.NewCollector(func() []*pools.Pool {
		if s := g.snap.Load(); s != nil {
			return s.poolList()
		}
		return nil
	}))
	g.ctx, g.stop = context.WithCancel(context.Background())
	g.status, g.started = &admin.Ring{Gather: o.Registry}, o.Now()
	now := o.Now().Unix()
	g.status.Prepare(now)
	g.status.Prepare(now + 1)
	g.status.Prepare(now + 2)
	// The counters' first sample, before any request: the page's rates
	// over the uptime count every request (Run samples once a second).
	g.status.SampleClassifier(g.started)
	go g.status.Run(g.ctx, o.Now)
	g.endpoints = pools.NewEndpoints(pools.EndpointsOptions{Now: o.Now, Rand: o.Rand, Transport: o.Transport,
		OnChange: g.onHealthChange, OnMissing: g.onMissingSignals})
	s, err := g.build(cfg, nil)
	if err != nil {
		g.stop()
		return nil, err
	}
	s.Generation = g.gen.Add(1)
	g.metrics.Generation.Set(float64(s.Generation))
	g.snap.Store(s)
	g.discs.Commit(g.ctx, s.discovery)
	s.recorder.Configure(g.ctx, captureConfig(cfg))
	if o.ShadowPath != "" {
		if err := g.loadShadow(); err != nil {
			g.stop()
			return nil, fmt.Errorf("shadow policy: %w", err)
		}
	}
	if !o.Passive {
		g.endpoints.Start(g.ctx)
	}
	return g, nil
}

// Snapshot returns the running snapshot.
func (g *Gateway) Snapshot() *Snapshot { return g.snap.Load() }

// Registry returns the metrics registry.
func (g *Gateway) Registry() *prometheus.Registry { return g.reg }

// Close stops health and scrape loops and idle upstream connections.
func (g *Gateway) Close() {
	g.stop()
	g.endpoints.Close()
}

// errShuttingDown ends the streams still open when the shutdown grace runs
// out.
var errShuttingDown = errors.New("the gateway is shutting down")

// trackStream records a stream being pumped, so that CutStreams can end
// it. Once CutStreams has run, a stream that starts (a request that was
// queued, or a continuation of a cut stream) is ended at once.
func (g *Gateway) trackStream(x *exchange, cancel context.CancelCauseFunc) {
	g.streamsMu.Lock()
	defer g.streamsMu.Unlock()
	if g.streamsCut {
		cancel(errShuttingDown)
		return
	}
	if g.streams == nil {
		g.streams = map[*exchange]context.CancelCauseFunc{}
	}
	g.streams[x] = cancel
}

func (g *Gateway) untrackStream(x *exchange) {
	g.streamsMu.Lock()
	delete(g.streams, x)
	g.streamsMu.Unlock()
}

// CutStreams ends every client stream in progress with an error event
// saying the gateway is shutting down (their upstream requests are
// cancelled), and returns how many there were; a stream that starts later
// (a queued request, a cut stream's continuation) is ended as it starts.
// The handlers finish writing on their own goroutines.
func (g *Gateway) CutStreams() int {
	g.streamsMu.Lock()
	defer g.streamsMu.Unlock()
	g.streamsCut = true
	for _, cancel := range g.streams {
		cancel(errShuttingDown)
	}
	return len(g.streams)
}

// Drain marks the gateway as shutting down: /readyz answers 503 from now
// on, so a load balancer stops sending new connections, while requests
// keep being served.
func (g *Gateway) Drain() { g.draining.Store(true) }

// Reload re-reads the config file and applies it. An invalid file leaves the
// running config in place and returns the validation errors.
func (g *Gateway) Reload() (int64, error) {
	if g.opts.ConfigPath == "" {
		return 0, errors.New("reload: no config file (the gateway runs an embedded config)")
	}
	cfg, err := LoadConfig(g.opts.ConfigPath)
	if err == nil {
		if g.opts.Override != nil {
			cfg = g.opts.Override(cfg)
		}
		err = restartKeys(g.snap.Load().Config, cfg)
	}
	if err != nil {
		g.metrics.Reloads.WithLabelValues("error").Inc()
		g.log.Error("config reload refused; the running config keeps serving", "file", g.opts.ConfigPath, "error", err.Error())
		g.lastReload.Store(&admin.ReloadOutcome{At: g.opts.Now().UTC(), OK: false, Error: err.Error()})
		return g.snap.Load().Generation, err
	}
	gen, err := g.Apply(cfg)
	if err == nil && g.opts.ShadowPath != "" {
		// The shadow is re-read with the config; a bad shadow file leaves
		// the previous shadow running and the live config applied.
		if serr := g.loadShadow(); serr != nil {
			g.log.Error("shadow policy reload refused; the previous shadow keeps running", "file", g.opts.ShadowPath, "error", serr.Error())
		}
	}
	return gen, err
}

// restartKeys refuses a reload that changes what is fixed when the
// listeners start: their addresses and connection timeouts. Applying the
// rest would leave the served config saying one thing while the process
// does another.
func restartKeys(running, next *policy.Config) error {
	a, b := running.Server, next.Server
	var errs policy.Errors
	for _, k := range []struct {
		key      string
		was, now string
	}{
		{"listen", a.Listen, b.Listen},
		{"admin_listen", a.AdminListen, b.AdminListen},
		{"read_header_timeout", a.ReadHeaderTimeout.Std().String(), b.ReadHeaderTimeout.Std().String()},
		{"idle_timeout", a.IdleTimeout.Std().String(), b.IdleTimeout.Std().String()},
	} {
		if k.was != k.now {
			line, col := next.Position("server", k.key)
			errs = append(errs, &policy.Error{File: next.File, Line: line, Col: col,
				Msg: fmt.Sprintf("server: %s changed from %s to %s: it is fixed when the listeners start; restart switchyard to change it", k.key, k.was, k.now)})
		}
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}

// Apply swaps in cfg: build (which reconciles the endpoint registry) →
// swap. Requests in flight finish on the snapshot they started with;
// replicas that stay keep their state (in-flight counts, queues, health),
// whatever else changed.
func (g *Gateway) Apply(cfg *policy.Config) (int64, error) {
	g.reloadMu.Lock()
	defer g.reloadMu.Unlock()
	prev := g.snap.Load()
	s, err := g.build(cfg, prev)
	if err != nil {
		g.metrics.Reloads.WithLabelValues("error").Inc()
		g.log.Error("config reload failed; the running config keeps serving", "error", err.Error())
		g.lastReload.Store(&admin.ReloadOutcome{At: g.opts.Now().UTC(), OK: false, Error: err.Error()})
		return prev.Generation, err
	}
	s.Generation = g.gen.Add(1)
	g.snap.Store(s)
	g.discs.Commit(g.ctx, s.discovery)
	s.recorder.Configure(g.ctx, captureConfig(cfg))
	g.lastReload.Store(&admin.ReloadOutcome{At: g.opts.Now().UTC(), OK: true, Generation: s.Generation})
	g.metrics.Reloads.WithLabelValues("ok").Inc()
	g.metrics.Generation.Set(float64(s.Generation))
	g.log.Info("config reloaded", "file", cfg.File, "generation", s.Generation, "pools", len(s.poolOrder), "routes", len(cfg.Routes))
	return s.Generation, nil
}

// rediscover rebuilds the running snapshot from its own config after a
// resolution changed a pool's set: the registry adds the new addresses
// (probing until a probe passes) and retires the vanished ones (no new
// requests; those in flight finish), and waiters follow the new view. It
// is serialised with reloads; a discovery a reload replaced meanwhile is
// ignored. The generation stays: the config did not change.
func (g *Gateway) rediscover(pool string, dp *discoveries.Pool) {
	g.reloadMu.Lock()
	defer g.reloadMu.Unlock()
	if !g.discs.Runs(pool, dp) {
		return
	}
	prev := g.snap.Load()
	s, err := g.build(prev.Config, prev)
	if err != nil {
		g.log.Error("discovery: the new replica set could not be applied; the running set keeps serving", "pool", pool, "error", err.Error())
		return
	}
	s.Generation = prev.Generation
	g.snap.Store(s)
	g.discs.Commit(g.ctx, s.discovery)
}

func (g *Gateway) onHealthChange(r *pools.Replica, healthy bool, why string) {
	if healthy {
		g.log.Info("replica healthy", "pool", r.Pool, "replica", r.Name, "why", why)
	} else {
		g.log.Warn("replica out of rotation", "pool", r.Pool, "replica", r.Name, "why", why)
	}
}

func (g *Gateway) onMissingSignals(r *pools.Replica, missing []string) {
	g.log.Warn("replica metrics lack load signals; balancing it on in-flight alone for those", "pool", r.Pool, "replica", r.Name, "missing", missing)
}

// newRequestID returns a short unique id for requests that brought none.
func (g *Gateway) newRequestID() string {
	b := make([]byte, 0, 24)
	b = append(b, "sy-"...)
	b = strconv.AppendUint(b, uint64(time.Now().UnixNano())&0xffffffffff, 16)
	b = append(b, '-')
	b = strconv.AppendUint(b, g.reqSeq.Add(1), 16)
	return string(b)
}

var noopSpan = trace.SpanFromContext(context.Background())

// startSpan starts a span when tracing is configured; otherwise it returns
// ctx unchanged and a no-op span.
func (g *Gateway) startSpan(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !g.tracing {
		return ctx, noopSpan
	}
	return g.tracer.Start(ctx, name, opts...)
}

// captureConfig is the recorder's config from cfg's capture: section (nil:
// off). The headers kept are the session ids agents send, the configured
// session header and the Messages API's version: never a key.
func captureConfig(cfg *policy.Config) *recorder.Config {
	c := cfg.Capture
	if c == nil {
		return nil
	}
	headers := append([]string{"anthropic-version", "prompt-cache-key"}, sessionHeaders[:]...)
	if se := cfg.Session; se != nil && se.Header != "" && !isSecretHeader(se.Header) {
		headers = append(headers, se.Header)
	}
	return &recorder.Config{Dir: c.Dir, Keys: c.Keys, Sample: c.Sample, MaxFileBytes: int64(c.MaxFileSize), MaxFiles: c.MaxFiles, Headers: headers}
}

// isSecretHeader reports whether a header carries credentials.
func isSecretHeader(name string) bool {
	switch strings.ToLower(name) {
	case "authorization", "proxy-authorization", "x-api-key", "api-key", "cookie":
		return true
	}
	return false
}
