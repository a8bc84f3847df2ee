package pools

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// EndpointOptions is everything one endpoint (one vLLM server, keyed by its
// base URL) is built from. It is comparable: a reload compares the new value
// with the running one to decide whether the endpoint is kept as is or
// updated, so there is no hand-written fingerprint to keep in step.
type EndpointOptions struct {
	// URL is the server's base URL, the endpoint's identity.
	URL string
	// APIKey is sent as a bearer token on requests, probes and scrapes
	// (vLLM's --api-key).
	APIKey string
	// ConnectTimeout bounds the dial and the TLS handshake.
	ConnectTimeout time.Duration
	Health         HealthOptions
	Scrape         ScrapeOptions
	// Models are the model names the pools listing this endpoint send it,
	// sorted and joined by "\n"; the model check of the active probe
	// expects GET /v1/models to list each.
	Models string
}

// Endpoint is one vLLM server. All state that belongs to the server rather
// than to a pool lives here and survives reloads: requests in flight, the
// FIFO admission queue, health and ejection, scrape results, the upstream
// transport and the health and scrape loops. A server listed in several
// pools (a MiniCPM replica that serves traffic and the classifier) is one
// endpoint with one in-flight count.
type Endpoint struct {
	url  *url.URL
	base string // url.String(), kept to build request URLs without allocating
	reg  *Endpoints

	inflight atomic.Int64
	// healthy is the active health checker's verdict.
	healthy atomic.Bool
	// misconfigured is set when the server answered 401/403 or said it does
	// not serve the pool's model; only a probe that sees the key accepted
	// and every model listed clears it.
	misconfigured atomic.Bool
	// answered is when the endpoint last answered a request successfully
	// (unix nanoseconds by the registry's clock; 0: never), for
	// Pool.AnsweredWithin.
	answered atomic.Int64
	// passed is when the endpoint's last probe passed (unix nanoseconds
	// by the registry's clock; 0: never, or a probe failed since), for
	// Pool.AliveWithin.
	passed atomic.Int64
	// misHeldUntil (unix nanos): a misconfiguration found on a request is
	// not cleared by a probe before then (a growing backoff, as for
	// ejections, so a replica that refuses inference but lists its models
	// does not flap in and out every interval).
	misHeldUntil atomic.Int64
	// probing: the endpoint is new and waits for its first passing probe
	// before it takes traffic (only while its health loop runs).
	probing atomic.Bool
	// probed is closed once the endpoint's first probe has answered, pass
	// or fail.
	probed     chan struct{}
	probedOnce sync.Once
	// loops counts the endpoint's running health and scrape loops, so
	// that tests can wait for stopped loops to end.
	loops sync.WaitGroup
	// ejectedUntil (unix nanos) is set by outlier detection.
	ejectedUntil atomic.Int64
	ejections    atomic.Int64
	retired      atomic.Bool
	// hasOld is set while old holds transports to close (read lock-free
	// by release).
	hasOld atomic.Bool
	load   atomic.Pointer[Load]
	client atomic.Pointer[http.Client]
	// control reaches the server for the health and scrape loops, over
	// connections of its own: a probe cancelled by a reload (its loop
	// stops) must never close a connection a request is using, which the
	// standard transport can do when the cancel races the end of an
	// answer without a body.
	control atomic.Pointer[http.Client]

	// queued mirrors len(queue) for the lock-free checks of Release and
	// the filter stage; it changes only under mu.
	queued atomic.Int64

	mu    sync.Mutex // guards queue and the fields below
	queue waitQueue
	// holds counts the fair requests holding slots, by tenant (share.go).
	holds holds
	opts  EndpointOptions
	// stop ends the endpoint's health and scrape loops.
	stop context.CancelFunc
	// old are transports replaced by an update or a removal; their idle
	// connections are closed once no request is in flight.
	old []*http.Transport
	// record is what the endpoint's probes and requests came to (under
	// mu, but for the probe counts, which the health loop owns).
	record endpointRecord
}

// endpointRecord is the history behind an endpoint's state.
type endpointRecord struct {
	// consecutive active probe results, owned by the health loop.
	probeOK, probeFail int
	// misStreak counts misconfigurations in a row (the backoff's
	// multiplier); lastMisEnd is when the last hold ended.
	misStreak  int
	lastMisEnd time.Time
	// outlier detection counters, reset by a success.
	cons5xx, consConnect int
	// ejectStreak is how many ejections in a row the endpoint has had; it
	// multiplies the base ejection time.
	ejectStreak  int
	lastEjectEnd time.Time
	lastErr      string
	why          string
}

func newEndpoint(reg *Endpoints, u *url.URL, o EndpointOptions) *Endpoint {
	e := &Endpoint{url: u, base: o.URL, reg: reg, opts: o, probed: make(chan struct{})}
	e.healthy.Store(true)
	e.client.Store(reg.newClient(o))
	e.control.Store(reg.newControlClient(o))
	return e
}

// URL is the server's base URL.
func (e *Endpoint) URL() *url.URL { return e.url }

// Base is the server's base URL as a string; paths are appended to it.
func (e *Endpoint) Base() string { return e.base }

// Client reaches the server: a keep-alive transport with the endpoint's
// connect timeout. It never follows redirects.
func (e *Endpoint) Client() *http.Client { return e.client.Load() }

// Options returns the options the endpoint runs with now.
func (e *Endpoint) Options() EndpointOptions {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.opts
}

// Inflight is the number of requests Switchyard has open on the server,
// over every pool that lists it.
func (e *Endpoint) Inflight() int64 { return e.inflight.Load() }

// Waiting is the number of requests queued for one of the server's slots.
func (e *Endpoint) Waiting() int64 { return e.queued.Load() }

// Healthy reports the active health verdict (false too while the server is
// marked misconfigured, and while a new endpoint waits for its first
// passing probe).
func (e *Endpoint) Healthy() bool {
	return e.healthy.Load() && !e.misconfigured.Load() && !e.probing.Load()
}

// Probing reports that the endpoint is new and has not yet passed a probe.
func (e *Endpoint) Probing() bool { return e.probing.Load() }

// Misconfigured reports that the server refused the pool's key or does not
// serve the pool's model.
func (e *Endpoint) Misconfigured() bool { return e.misconfigured.Load() }

// Ejected reports whether outlier detection currently excludes the server.
func (e *Endpoint) Ejected(now time.Time) bool { return now.UnixNano() < e.ejectedUntil.Load() }

// EjectedUntil is when the current (or last) ejection ends; zero when the
// server was never ejected.
func (e *Endpoint) EjectedUntil() time.Time {
	if n := e.ejectedUntil.Load(); n > 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// Retired reports that a reload removed the endpoint; it takes no new
// requests and finishes those in flight.
func (e *Endpoint) Retired() bool { return e.retired.Load() }

// Available is Healthy, not Ejected and not Retired.
func (e *Endpoint) Available(now time.Time) bool {
	return e.Healthy() && !e.Ejected(now) && !e.retired.Load()
}

// Ejections counts ejections since the endpoint was configured.
func (e *Endpoint) Ejections() int64 { return e.ejections.Load() }

// CurrentLoad returns the last scrape, or nil.
func (e *Endpoint) CurrentLoad() *Load { return e.load.Load() }

// Queue is the server's reported waiting requests when the scrape is fresh
// (within staleness of now), else 0.
func (e *Endpoint) Queue(now time.Time, staleness time.Duration) float64 {
	l := e.load.Load()
	if l == nil || !l.HasQueue || now.Sub(l.At) > staleness {
		return 0
	}
	return l.Waiting
}

// LastError returns the last recorded failure and why the endpoint is out
// of rotation (if it is).
func (e *Endpoint) LastError() (lastErr, why string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.record.lastErr, e.record.why
}

func (e *Endpoint) setErr(err string) {
	if err == "" {
		return
	}
	e.mu.Lock()
	e.record.lastErr = err
	e.mu.Unlock()
}

// Load is what a server's vLLM /metrics said at one scrape.
type Load struct {
	At      time.Time
	Running float64
	Waiting float64
	KVUsage float64 // 0..1
	HasKV   bool
	// HasQueue: the scrape had vllm:num_requests_waiting (the queue the
	// balancers read); HasRunning: it had vllm:num_requests_running.
	HasQueue   bool
	HasRunning bool
	// Legacy is set when KV usage came from vllm:gpu_cache_usage_perc.
	Legacy bool
	Err    string
}

// NewTransport returns an upstream transport tuned for a gateway: many idle
// keep-alive connections per server, bounded dial and TLS waits, no
// compression negotiation (bodies pass through as the server sent them).
// There is no response header timeout here: it is a pool setting, enforced
// per request by the caller, since one server may be listed in pools with
// different timeouts.
func NewTransport(connect time.Duration) *http.Transport {
	return &http.Transport{
		Proxy:                 nil, // replicas are reached directly, never via $HTTP_PROXY
		DialContext:           (&net.Dialer{Timeout: connect, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   connect,
		ExpectContinueTimeout: 0,
		DisableCompression:    true,
		ForceAttemptHTTP2:     false,
		// Small per-connection buffers: SSE chunks are a few hundred bytes,
		// and bufio reads and writes larger payloads directly, so this only
		// trims what each open stream holds (about 4 KiB of 8).
		WriteBufferSize: 2 << 10,
		ReadBufferSize:  2 << 10,
	}
}

func noRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// retireClient closes c's idle connections now and again once the endpoint
// has nothing in flight (connections still carrying a request go back to
// the idle pool only when that request ends).
func (e *Endpoint) retireClient(c *http.Client) {
	tr, ok := c.Transport.(*http.Transport)
	if !ok || tr == nil || e.reg.opts.Transport != nil {
		return // a shared test transport is not the endpoint's to close
	}
	tr.CloseIdleConnections()
	e.mu.Lock()
	e.old = append(e.old, tr)
	e.hasOld.Store(true)
	e.mu.Unlock()
	if e.inflight.Load() == 0 {
		e.closeOld()
	}
}

// closeOld closes the idle connections of retired transports (and, for a
// removed endpoint, of the current one). A connection whose response body
// was just closed is returned to the idle pool by the transport's own
// goroutine a moment later, so the close is repeated once after a second.
func (e *Endpoint) closeOld() {
	e.mu.Lock()
	old := e.old
	e.old = nil
	e.hasOld.Store(false)
	e.mu.Unlock()
	if e.retired.Load() {
		if e.reg.opts.Transport == nil {
			for _, c := range []*http.Client{e.Client(), e.control.Load()} {
				if tr, ok := c.Transport.(*http.Transport); ok {
					old = append(old, tr)
				}
			}
		}
	}
	for _, tr := range old {
		tr.CloseIdleConnections()
		time.AfterFunc(time.Second, tr.CloseIdleConnections)
	}
}
