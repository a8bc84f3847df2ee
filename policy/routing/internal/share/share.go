// Package share is the policy's share controller (control.share): it holds
// the share of policy-routed requests one pool gets at a target by moving
// the threshold of the routes' auto score bounds. The policy feeds it each
// decision and each score an auto bound sees; it imports no Switchyard
// package.
package share

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// controlBins is the resolution of the score histogram: thresholds are
// multiples of 1/(controlBins-1); the last bin holds the scores of
// exactly 1 (a classifier without logprobs gives its label 1).
const controlBins = 1001

// Controller holds the share of policy-routed requests that one pool
// gets at a target, by moving the threshold of the routes' auto score
// bounds ({gte: auto}).
//
// Design: a feed-forward quantile with a slow feedback trim. Every request
// that reaches an auto bound adds its score to a histogram, and every
// decision counts whether it went to the pool and, if so, whether through
// an auto bound. Both decay exponentially with the window. On each tick
// (a thirtieth of the window) the controller computes the fraction p of
// auto-reaching requests that must pass the bound for the pool's share to
// be the target, given the requests the pool gets by other routes, and
// sets the threshold to the score quantile that lets exactly p pass. When
// the mix of easy and hard traffic shifts, the quantile moves with the
// scores at once, so the share follows without waiting for an error to
// build up. A small integral term on the measured share removes what the
// feed-forward estimate misses (requests that fail the bound and reach
// the pool later); its gain works on the window's time scale, so it cannot
// make the loop oscillate.
//
// In capacity mode the target itself moves: up while the pool's
// utilization (in flight and queued over its capacity) is under the goal,
// down when over it, so the large pool takes borderline traffic while it
// has headroom and sheds it first as it saturates.
//
// The per-request path is lock-free (atomic adds, one clock read) and
// allocates nothing; the tick runs on whichever request finds it due.
type Controller struct {
	opts Options

	thr atomic.Uint64 // math.Float64bits of the threshold
	// shareBits and targetBits mirror share and target for lock-free
	// reads (Load may read them while update runs).
	shareBits, targetBits atomic.Uint64
	lastTick              atomic.Int64 // unix nanoseconds
	pending               [controlBins]atomic.Uint32
	total                 atomic.Uint64
	toPool                atomic.Uint64
	poolOther             atomic.Uint64

	mu sync.Mutex
	// Decayed state, under mu.
	hist [controlBins]float64
	// fn, fother and auto decay over an eighth of the window (the
	// feed-forward's view); n and pool over the window.
	fn, fpool, fother, auto float64
	n, pool                 float64
	bias, target            float64
	share                   float64
}

// Options configure a Controller (from control.share).
type Options struct {
	Pool string
	// Target is the share to hold; Capacity makes it move with the pool's
	// utilization towards Utilization.
	Target      float64
	Capacity    bool
	Utilization float64
	Window      time.Duration
	// Load reports the pool's utilization (capacity mode): in flight and
	// queued requests over its slots.
	Load func() float64
	Now  func() time.Time
}

// State is a controller's state, for /admin/control.
type State struct {
	Pool        string  `json:"pool"`
	Mode        string  `json:"mode"`
	Target      float64 `json:"target"`
	Threshold   float64 `json:"threshold"`
	Share       float64 `json:"measured_share"`
	AutoShare   float64 `json:"auto_reached_share"`
	Bias        float64 `json:"bias"`
	Utilization float64 `json:"utilization,omitempty"`
	Window      string  `json:"window"`
	Decisions   float64 `json:"decisions_in_window"`
}

// New starts a controller at threshold 0.5 and, in capacity
// mode, at a target of half the traffic.
func New(o Options) *Controller {
	if o.Now == nil {
		o.Now = time.Now
	}
	c := &Controller{opts: o, target: o.Target}
	if o.Capacity {
		c.target = 0.5
	}
	c.thr.Store(math.Float64bits(0.5))
	c.targetBits.Store(math.Float64bits(c.target))
	c.lastTick.Store(o.Now().UnixNano())
	return c
}

// Pool is the pool whose share the controller holds.
func (c *Controller) Pool() string { return c.opts.Pool }

// Threshold is the auto bound now.
func (c *Controller) Threshold() float64 { return math.Float64frombits(c.thr.Load()) }

// ObserveScore records the score of a request that reached an auto bound.
func (c *Controller) ObserveScore(v float64) {
	i := int(v * (controlBins - 1))
	i = min(max(i, 0), controlBins-1)
	c.pending[i].Add(1)
}

// ObserveDecision records a policy decision: whether it sends to the pool,
// and whether through an auto bound. It runs the tick when one is due.
func (c *Controller) ObserveDecision(toPool, viaAuto bool) {
	c.total.Add(1)
	if toPool {
		c.toPool.Add(1)
		if !viaAuto {
			c.poolOther.Add(1)
		}
	}
	now := c.opts.Now().UnixNano()
	last := c.lastTick.Load()
	if time.Duration(now-last) >= c.tick() && c.lastTick.CompareAndSwap(last, now) {
		c.update(time.Duration(now - last))
	}
}

func (c *Controller) tick() time.Duration { return max(c.opts.Window/30, 10*time.Millisecond) }

// update folds in the observations since the last tick and moves the
// threshold; dt is the time since the last tick.
func (c *Controller) update(dt time.Duration) {
	// Load may read the controller (Share), so it is called unlocked.
	util := 0.0
	if c.opts.Capacity && c.opts.Load != nil {
		util = c.opts.Load()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// The feed-forward reads the recent traffic (an eighth of the window),
	// so that it follows a shift of the mix quickly; the measured share,
	// which the trim and the metrics use, is the window's.
	fast := math.Exp(-float64(dt) / float64(c.opts.Window/8))
	slow := math.Exp(-float64(dt) / float64(c.opts.Window))
	c.auto = 0
	for i := range c.hist {
		c.hist[i] = c.hist[i]*fast + float64(c.pending[i].Swap(0))
		c.auto += c.hist[i]
	}
	total, pool, other := float64(c.total.Swap(0)), float64(c.toPool.Swap(0)), float64(c.poolOther.Swap(0))
	c.fn = c.fn*fast + total
	c.fpool = c.fpool*fast + pool
	c.fother = c.fother*fast + other
	c.n = c.n*slow + total
	c.pool = c.pool*slow + pool
	if c.n < 1 {
		return // nothing seen yet
	}
	step := math.Min(float64(dt)/float64(c.opts.Window), 1)
	if c.opts.Capacity && c.opts.Load != nil {
		// Towards the utilization goal, on the window's time scale.
		c.target = clamp(c.target+step*(c.opts.Utilization-util), 0.01, 1)
		c.targetBits.Store(math.Float64bits(c.target))
	}
	c.share = c.pool / c.n
	c.shareBits.Store(math.Float64bits(c.share))
	// The trim follows the recent share, as the feed-forward does.
	c.bias = clamp(c.bias+2*step*(c.target-c.fpool/c.fn), -0.5, 0.5)
	if c.auto < 1 {
		return
	}
	p := clamp((c.target*c.fn-c.fother)/c.auto+c.bias, 0, 1)
	c.thr.Store(math.Float64bits(c.quantile(p)))
}

// quantile is the lowest threshold that lets at most a fraction p of the
// auto-reaching scores pass (v >= threshold). Bin i holds the scores in
// [i/(controlBins-1), (i+1)/(controlBins-1)), the last one exactly 1.
func (c *Controller) quantile(p float64) float64 {
	want := p * c.auto
	sum := 0.0
	for i := controlBins - 1; i >= 0; i-- {
		if sum+c.hist[i] > want+1e-9 {
			if i == controlBins-1 {
				return math.Nextafter(1, 2) // above every score: none passes
			}
			return float64(i+1) / (controlBins - 1)
		}
		sum += c.hist[i]
	}
	return 0
}

// State reports the controller's state.
func (c *Controller) State() State {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := State{Pool: c.opts.Pool, Mode: "share", Target: c.target, Threshold: c.Threshold(), Share: c.share,
		Bias: c.bias, Window: c.opts.Window.String(), Decisions: c.n}
	if c.fn > 0 {
		st.AutoShare = c.auto / c.fn
	}
	if c.opts.Capacity {
		st.Mode = "capacity"
		if c.opts.Load != nil {
			st.Utilization = c.opts.Load()
		}
	}
	return st
}

// Target is the share the controller aims at now (moving in capacity
// mode).
func (c *Controller) Target() float64 { return math.Float64frombits(c.targetBits.Load()) }

// Share is the pool's measured share over the window.
func (c *Controller) Share() float64 { return math.Float64frombits(c.shareBits.Load()) }

func clamp(v, lo, hi float64) float64 { return math.Min(math.Max(v, lo), hi) }
