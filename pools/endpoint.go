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

// EndpointOptions is everything one endpoint is built from. It is
// comparable: a reload compares the new value with the running one to
// decide whether the endpoint is kept as is or updated (no hand-written
// fingerprint to keep in step).
type EndpointOptions struct {
	// URL is the server's base URL, the endpoint's identity.
	URL string
	// APIKey is sent as a bearer token (vLLM's --api-key).
	APIKey string
	// ConnectTimeout bounds the dial and the TLS handshake.
	ConnectTimeout time.Duration
	Health         HealthOptions
	Scrape         ScrapeOptions
	// Models are the models the pools listing it send it, sorted, joined
	// by "\n" (the probes' model check wants GET /v1/models to list each).
	Models string
}

// Endpoint is one vLLM server, keyed by its base URL. State that belongs
// to the server rather than to a pool lives here and survives reloads:
// requests in flight, the admission queue, health and ejection, scrape
// results, the transports and the health and scrape loops. A server listed
// in several pools (a MiniCPM replica that serves traffic and the
// classifier) is one endpoint with one in-flight count. Times held as
// int64 are unix nanoseconds by the Endpoints' clock.
type Endpoint struct {
	url      *url.URL
	base     string // url.String(), kept to build request URLs without allocating
	reg      *Endpoints
	inflight atomic.Int64
	// healthy is the active health checker's verdict.
	healthy atomic.Bool
	// misconfigured: the server answered 401/403 or does not serve the
	// pool's model; only a probe that sees the key accepted and every
	// model listed clears it, and not before misHeldUntil when a request
	// found it (a growing backoff, as for ejections, so a replica that
	// refuses inference but lists its models does not flap).
	misconfigured atomic.Bool
	misHeldUntil  atomic.Int64
	// answered is when it last answered a request successfully, passed
	// when its last probe passed (0: never, or a probe failed since).
	answered atomic.Int64
	passed   atomic.Int64
	// probing: new, out of rotation until its first probe passes (only
	// while its health loop runs). probed is closed once the first probe
	// has answered, pass or fail.
	probing    atomic.Bool
	probed     chan struct{}
	probedOnce sync.Once
	// loops counts the running health and scrape loops (tests wait on it).
	loops        sync.WaitGroup
	ejectedUntil atomic.Int64
	ejections    atomic.Int64
	retired      atomic.Bool
	// hasOld is set while old holds transports to close (read lock-free
	// by release).
	hasOld atomic.Bool
	load   atomic.Pointer[Load]
	client atomic.Pointer[http.Client]
	// control is the health and scrape loops' client, with connections of
	// its own: a probe cancelled by a reload must never close a connection
	// a request is using, which the standard transport can do when the
	// cancel races the end of an answer without a body.
	control atomic.Pointer[http.Client]
	// queued mirrors len(queue) for the lock-free checks of Release and
	// the filter stage; it changes only under mu.
	queued atomic.Int64

	mu    sync.Mutex // guards queue and the fields below
	queue waitQueue
	// holds counts the fair requests holding slots, by tenant (share.go).
	holds holds
	opts  EndpointOptions
	// stop ends the health and scrape loops.
	stop context.CancelFunc
	// old are transports replaced by an update or a removal; their idle
	// connections are closed once no request is in flight.
	old []*http.Transport
	// record is under mu, but for the probe counts (the health loop's).
	record endpointRecord
}

// endpointRecord is the history behind an endpoint's state.
type endpointRecord struct {
	probeOK, probeFail int // consecutive active probe results
	// misStreak and ejectStreak count holds in a row (hold's multiplier);
	// lastMisEnd and lastEjectEnd are when the last ones ended.
	misStreak, ejectStreak   int
	lastMisEnd, lastEjectEnd time.Time
	// outlier detection counters, reset by a success.
	cons5xx, consConnect int
	lastErr, why         string
}

func newEndpoint(reg *Endpoints, u *url.URL, o EndpointOptions) *Endpoint {
	e := &Endpoint{url: u, base: o.URL, reg: reg, opts: o, probed: make(chan struct{})}
	e.healthy.Store(true)
	e.client.Store(reg.newClient(o, false))
	e.control.Store(reg.newClient(o, true))
	return e
}

// URL is the server's base URL.
func (e *Endpoint) URL() *url.URL { return e.url }

// Base is the server's base URL as a string; paths are appended to it.
func (e *Endpoint) Base() string { return e.base }

// Client reaches the server (keep-alive, never follows redirects).
func (e *Endpoint) Client() *http.Client { return e.client.Load() }

// Options returns the options the endpoint runs with now.
func (e *Endpoint) Options() EndpointOptions {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.opts
}

// Inflight is the requests Switchyard has open on the server, over every
// pool that lists it.
func (e *Endpoint) Inflight() int64 { return e.inflight.Load() }

// Waiting is the requests queued for one of the server's slots.
func (e *Endpoint) Waiting() int64 { return e.queued.Load() }

// Healthy reports the active health verdict, false too while the server is
// Misconfigured or Probing.
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

// Retired reports that a reload removed the endpoint: it takes no new
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

// Queue is the server's reported waiting requests when the scrape is
// within staleness of now, else 0.
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
	// HasQueue, HasRunning: the scrape had vllm:num_requests_waiting,
	// vllm:num_requests_running.
	HasQueue   bool
	HasRunning bool
	// Legacy is set when KV usage came from vllm:gpu_cache_usage_perc.
	Legacy bool
	Err    string
}

// NewTransport returns an upstream transport tuned for a gateway: many idle
// keep-alive connections per server, bounded dial and TLS waits, no
// compression negotiation (bodies pass through as sent). The response
// header timeout is a pool's, enforced per request by the caller.
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

// transports are the endpoint's own transports among cs (a shared test
// transport is not the endpoint's to close).
func (e *Endpoint) transports(cs ...*http.Client) []*http.Transport {
	var out []*http.Transport
	for _, c := range cs {
		if tr, ok := c.Transport.(*http.Transport); ok && tr != nil && e.reg.opts.Transport == nil {
			out = append(out, tr)
		}
	}
	return out
}

// retireClient closes c's idle connections now and again once the endpoint
// has nothing in flight (connections still carrying a request go back to
// the idle pool only when that request ends).
func (e *Endpoint) retireClient(c *http.Client) {
	trs := e.transports(c)
	if len(trs) == 0 {
		return
	}
	trs[0].CloseIdleConnections()
	e.mu.Lock()
	e.old = append(e.old, trs...)
	e.hasOld.Store(true)
	e.mu.Unlock()
	if e.inflight.Load() == 0 {
		e.closeOld()
	}
}

// closeOld closes the idle connections of retired transports (and, for a
// removed endpoint, of the current ones). A connection whose response body
// was just closed is returned to the idle pool by the transport's own
// goroutine a moment later, so the close is repeated once after a second.
func (e *Endpoint) closeOld() {
	e.mu.Lock()
	old := e.old
	e.old = nil
	e.hasOld.Store(false)
	e.mu.Unlock()
	if e.retired.Load() {
		old = append(old, e.transports(e.Client(), e.control.Load())...)
	}
	for _, tr := range old {
		tr.CloseIdleConnections()
		time.AfterFunc(time.Second, tr.CloseIdleConnections)
	}
}
