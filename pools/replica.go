package pools

import (
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// Replica is one vLLM server, possibly spanning several nodes; it is one
// unit for balancing and health. Hot state lives in atomics, counted here
// and nowhere else, so every balancer sees the same numbers.
type Replica struct {
	Pool  string
	Name  string
	URL   *url.URL
	Nodes []string

	inflight atomic.Int64
	// healthy is the active health checker's verdict.
	healthy atomic.Bool
	// ejectedUntil (unix nanos) is set by passive ejection.
	ejectedUntil atomic.Int64
	ejections    atomic.Int64
	// consecutive active probe results, owned by the health loop.
	probeOK, probeFail int

	load atomic.Pointer[Load]

	mu      sync.Mutex // guards lastErr, why, streak
	lastErr string
	why     string
	streak  int
}

// Load is what a replica's vLLM /metrics said at one scrape.
type Load struct {
	At       time.Time
	Running  float64
	Waiting  float64
	KVUsage  float64 // 0..1
	HasKV    bool
	HasQueue bool
	// Legacy is set when KV usage came from vllm:gpu_cache_usage_perc.
	Legacy bool
	Err    string
}

func newReplica(pool string, spec ReplicaSpec) *Replica {
	r := &Replica{Pool: pool, Name: spec.Name, URL: spec.URL, Nodes: spec.Nodes}
	r.healthy.Store(true)
	return r
}

// Inflight is the number of requests Switchyard has open on the replica.
func (r *Replica) Inflight() int64 { return r.inflight.Load() }

// Healthy reports the active health verdict.
func (r *Replica) Healthy() bool { return r.healthy.Load() }

// Ejected reports whether passive ejection currently excludes the replica.
func (r *Replica) Ejected(now time.Time) bool { return now.UnixNano() < r.ejectedUntil.Load() }

// Available is Healthy and not Ejected.
func (r *Replica) Available(now time.Time) bool { return r.Healthy() && !r.Ejected(now) }

// Ejections counts passive ejections since start.
func (r *Replica) Ejections() int64 { return r.ejections.Load() }

// CurrentLoad returns the last scrape, or nil.
func (r *Replica) CurrentLoad() *Load { return r.load.Load() }

// Queue is the replica's reported waiting requests when the scrape is fresh
// (within staleness of now), else 0.
func (r *Replica) Queue(now time.Time, staleness time.Duration) float64 {
	l := r.load.Load()
	if l == nil || !l.HasQueue || now.Sub(l.At) > staleness {
		return 0
	}
	return l.Waiting
}

// LastError returns the last recorded failure and why the replica is out
// (if it is).
func (r *Replica) LastError() (lastErr, why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastErr, r.why
}

// setErr records a failure that did not change the replica's state; why
// (the reason it is out, if it is) stays as it was.
func (r *Replica) setErr(err string) {
	r.mu.Lock()
	if err != "" {
		r.lastErr = err
	}
	r.mu.Unlock()
}
