package admin

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/switchyard/switchyard/router/internal/wire"
)

// The status page's data, kept by the gateway itself so that the page
// works with no Prometheus: per-second request counts by pool and API for
// statusSeconds, the last statusDecisions decisions, and per replica the
// last replicaSamples outcomes. Recording a request costs a few atomic
// operations and, for the decision log, one small allocation.
const (
	statusSeconds   = 15 * 60
	statusPools     = 16 // pool names tracked; later ones count as "other"
	statusDecisions = 50
	replicaSamples  = 128
)

// statusAPIs are the APIs the split is shown for; the rest count as other.
var statusAPIs = [...]string{"chat", "completions", "responses", "messages", "other"}

func apiIndex(ep wire.Endpoint) int {
	switch ep {
	case wire.Chat:
		return 0
	case wire.Completions:
		return 1
	case wire.Responses:
		return 2
	case wire.Messages:
		return 3
	}
	return 4
}

type slot struct {
	// sec is the unix second the slot counts; a slot is cleared two
	// seconds before its second comes, so writers never race a clear.
	sec  atomic.Int64
	reqs [statusPools][len(statusAPIs)]atomic.Int32
	errs [statusPools][len(statusAPIs)]atomic.Int32
}

// Decision is one line of the decision log: the access line's facts, no
// prompt text.
type Decision struct {
	At        time.Time `json:"at"`
	Key       string    `json:"key,omitempty"`
	API       string    `json:"api"`
	Model     string    `json:"model,omitempty"`
	Route     string    `json:"route,omitempty"`
	Class     string    `json:"class,omitempty"`
	Score     *float64  `json:"score,omitempty"`
	Pool      string    `json:"pool,omitempty"`
	Replica   string    `json:"replica,omitempty"`
	Status    int       `json:"status"`
	LatencyMS float64   `json:"latency_ms"`
	TTFTMS    float64   `json:"ttft_ms,omitempty"`
}

// replicaRing holds one endpoint's last outcomes: when, whether it failed,
// and the time to first token (µs; 0 when none was measured).
type replicaRing struct {
	n    atomic.Uint64
	at   [replicaSamples]atomic.Int64 // unix nanos; 0: empty
	fail [replicaSamples]atomic.Bool
	ttft [replicaSamples]atomic.Int64
}

// Ring is the status page's memory: the zero value is ready once
// Prepare has cleared the current second; Run keeps it ahead of the clock.
type Ring struct {
	slots     [statusSeconds]slot
	mu        sync.Mutex // guards allocating pool indexes
	poolIndex sync.Map   // pool name → int
	poolNames [statusPools]atomic.Pointer[string]
	nPools    atomic.Int32
	decisions [statusDecisions]atomic.Pointer[Decision]
	nDecided  atomic.Uint64
	replicas  sync.Map // Replica → *replicaRing
	// Gather, when set, is read once a second for the classifier's
	// counters, so that its rates cover the same window as the split's.
	Gather    prometheus.Gatherer
	counters  [counterSamples]atomic.Pointer[ClassifierCounters]
	nCounters atomic.Uint64
}

// counterSamples is how many seconds of classifier counters are kept: a
// minute and a spare.
const counterSamples = 64

// SampleClassifier keeps the classifier's counters at now.
func (r *Ring) SampleClassifier(now time.Time) {
	if r.Gather == nil {
		return
	}
	c := gatherClassifier(r.Gather)
	c.At = now
	r.counters[(r.nCounters.Add(1)-1)%counterSamples].Store(&c)
}

// classifierSince is the oldest counter sample taken at or after since,
// nil when there is none.
func (r *Ring) classifierSince(since time.Time) *ClassifierCounters {
	n := r.nCounters.Load()
	var oldest *ClassifierCounters
	for i := uint64(0); i < min(n, counterSamples); i++ {
		c := r.counters[(n-1-i)%counterSamples].Load()
		if c == nil || c.At.Before(since) {
			break
		}
		oldest = c
	}
	return oldest
}

// pool returns the index of a pool name, allocating one on first sight;
// past statusPools names, the last index ("other").
func (r *Ring) pool(name string) int {
	if v, ok := r.poolIndex.Load(name); ok {
		return v.(int)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if v, ok := r.poolIndex.Load(name); ok {
		return v.(int)
	}
	n := int(r.nPools.Load())
	if n >= statusPools-1 {
		other := "other"
		r.poolNames[statusPools-1].Store(&other)
		r.poolIndex.Store(name, statusPools-1)
		r.nPools.Store(statusPools)
		return statusPools - 1
	}
	r.poolNames[n].Store(&name)
	r.poolIndex.Store(name, n)
	r.nPools.Store(int32(n + 1))
	return n
}

// Prepare clears the slot of second sec (run about two seconds ahead).
func (r *Ring) Prepare(sec int64) {
	s := &r.slots[sec%statusSeconds]
	if s.sec.Load() == sec {
		return
	}
	for p := range s.reqs {
		for a := range s.reqs[p] {
			s.reqs[p][a].Store(0)
			s.errs[p][a].Store(0)
		}
	}
	s.sec.Store(sec)
}

// Run keeps the slots ahead of the clock until ctx ends.
func (r *Ring) Run(ctx context.Context, now func() time.Time) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		sec := now().Unix()
		r.Prepare(sec + 1)
		r.Prepare(sec + 2)
		// Endpoints a reload or a DNS change removed are forgotten once
		// drained, so that churn does not pin them.
		r.replicas.Range(func(k, _ any) bool {
			if e := k.(Replica); e.Retired() && e.Inflight() == 0 {
				r.replicas.Delete(k)
			}
			return true
		})
		r.SampleClassifier(now())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Sample is what the ring keeps of one finished request: the access
// line's facts, no prompt text.
type Sample struct {
	API wire.Endpoint
	// Pool is the pool the request was sent to ("" when none was chosen);
	// Endpoint and Replica the replica that answered last (nil, "" when
	// none was reached).
	Pool     string
	Endpoint Replica
	Replica  string
	Status   int
	TTFT     time.Duration
	Key      string
	Model    string
	Route    string
	Class    string
	// Score is the classifier's probability of Class, nil when unknown.
	Score *float64
}

// Record counts one finished request.
func (r *Ring) Record(x Sample, now time.Time, elapsed time.Duration) {
	if x.Pool != "" {
		s := &r.slots[now.Unix()%statusSeconds]
		if s.sec.Load() == now.Unix() { // else the clock ran ahead of Run: not counted
			p, a := r.pool(x.Pool), apiIndex(x.API)
			s.reqs[p][a].Add(1)
			if x.Status >= 500 {
				s.errs[p][a].Add(1)
			}
		}
	}
	if x.Endpoint != nil {
		v, ok := r.replicas.Load(x.Endpoint)
		if !ok {
			v, _ = r.replicas.LoadOrStore(x.Endpoint, &replicaRing{})
		}
		rr := v.(*replicaRing)
		i := (rr.n.Add(1) - 1) % replicaSamples
		rr.fail[i].Store(x.Status >= 500)
		rr.ttft[i].Store(x.TTFT.Microseconds())
		rr.at[i].Store(now.UnixNano())
	}
	d := &Decision{At: now.UTC(), API: statusAPIs[apiIndex(x.API)], Key: x.Key, Model: x.Model, Route: x.Route, Class: x.Class,
		Score: x.Score, Pool: x.Pool, Replica: x.Replica, Status: x.Status,
		LatencyMS: float64(elapsed.Microseconds()) / 1000, TTFTMS: float64(x.TTFT.Microseconds()) / 1000}
	r.decisions[(r.nDecided.Add(1)-1)%statusDecisions].Store(d)
}

// SplitSeries is the per-second request counts of the last n seconds up
// to now (oldest first), by pool and API.
type SplitSeries struct {
	Start   int64                       `json:"start"` // unix second of the first value
	Seconds int                         `json:"seconds"`
	Pools   map[string]map[string][]int `json:"pools"`  // pool → api → counts
	Errors  map[string][]int            `json:"errors"` // pool → 5xx counts
}

func (r *Ring) Series(now time.Time, n int) SplitSeries {
	end := now.Unix()
	start := end - int64(n) + 1
	out := SplitSeries{Start: start, Seconds: n, Pools: map[string]map[string][]int{}, Errors: map[string][]int{}}
	np := int(r.nPools.Load())
	for p := 0; p < np; p++ {
		name := r.poolNames[p].Load()
		if name == nil {
			continue
		}
		apis := map[string][]int{}
		errs := make([]int, n)
		any := false
		for a, api := range statusAPIs {
			vals := make([]int, n)
			for i := 0; i < n; i++ {
				sec := start + int64(i)
				s := &r.slots[sec%statusSeconds]
				if s.sec.Load() != sec {
					continue
				}
				vals[i] = int(s.reqs[p][a].Load())
				errs[i] += int(s.errs[p][a].Load())
				any = any || vals[i] > 0
			}
			apis[api] = vals
		}
		if any {
			out.Pools[*name] = apis
			out.Errors[*name] = errs
		}
	}
	return out
}

// Recent returns the decision log, newest first.
func (r *Ring) Recent() []*Decision {
	n := r.nDecided.Load()
	out := make([]*Decision, 0, statusDecisions)
	for i := uint64(0); i < min(n, statusDecisions); i++ {
		if d := r.decisions[(n-1-i)%statusDecisions].Load(); d != nil {
			out = append(out, d)
		}
	}
	return out
}

// ReplicaStats are a replica's outcomes over the last window: error rate
// and time to first token.
type ReplicaStats struct {
	Requests  int      `json:"requests"`
	ErrorRate float64  `json:"error_rate"`
	TTFTP50   *float64 `json:"ttft_p50_ms,omitempty"`
	TTFTP99   *float64 `json:"ttft_p99_ms,omitempty"`
}

// Replica is the outcomes of endpoint e over the last window.
func (r *Ring) Replica(e Replica, now time.Time, window time.Duration) ReplicaStats {
	var st ReplicaStats
	v, ok := r.replicas.Load(e)
	if !ok {
		return st
	}
	rr := v.(*replicaRing)
	var ttfts []float64
	fails := 0
	for i := range replicaSamples {
		at := rr.at[i].Load()
		if at == 0 || now.Sub(time.Unix(0, at)) > window {
			continue
		}
		st.Requests++
		if rr.fail[i].Load() {
			fails++
		}
		if t := rr.ttft[i].Load(); t > 0 {
			ttfts = append(ttfts, float64(t)/1000)
		}
	}
	if st.Requests > 0 {
		st.ErrorRate = float64(fails) / float64(st.Requests)
	}
	if len(ttfts) > 0 {
		slices.Sort(ttfts)
		p50, p99 := ttfts[len(ttfts)/2], ttfts[min(len(ttfts)-1, len(ttfts)*99/100)]
		st.TTFTP50, st.TTFTP99 = &p50, &p99
	}
	return st
}
