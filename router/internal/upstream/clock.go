package upstream

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"time"
)

// PhaseTimeout is the error of an upstream attempt that one of the pool's
// timeouts ended. It is a net.Error with Timeout() true, so a header
// timeout maps to 504 and is never retried.
type PhaseTimeout struct {
	Msg string
	// stream is set for the timeouts of a started stream, which count as
	// a replica failure.
	stream bool
}

func (e *PhaseTimeout) Error() string   { return e.Msg }
func (e *PhaseTimeout) Timeout() bool   { return true }
func (e *PhaseTimeout) Temporary() bool { return false }

// Timeouts are a pool's upstream timeouts with their errors, built once
// per snapshot so that arming them allocates nothing.
type Timeouts struct {
	header, firstToken, idle, total time.Duration
	headerErr, FirstTokenErr        *PhaseTimeout
	idleErr, TotalErr               *PhaseTimeout
}

// FirstToken is the pool's first_token_timeout.
func (t *Timeouts) FirstToken() time.Duration { return t.firstToken }

func NewTimeouts(header, firstToken, idle, total time.Duration) *Timeouts {
	return &Timeouts{
		header: header, firstToken: firstToken, idle: idle, total: total,
		headerErr:     &PhaseTimeout{Msg: "no response headers within " + header.String() + " (response_header_timeout)"},
		FirstTokenErr: &PhaseTimeout{Msg: "the stream sent no event within " + firstToken.String() + " (first_token_timeout)", stream: true},
		idleErr:       &PhaseTimeout{Msg: "the stream sent no event for " + idle.String() + " (stream_idle_timeout)", stream: true},
		TotalErr:      &PhaseTimeout{Msg: "the stream ran longer than " + total.String() + " (max_stream_duration)", stream: true},
	}
}

// Phases of an upstream attempt, as the clock's state encodes them.
const (
	phaseNone = iota
	phaseHeader
	phaseFirstToken
	phaseIdle
	phaseTotal
)

// packState is the clock's state word: the attempt's generation, then its
// phase in the low byte.
func packState(gen, phase uint64) uint64 { return gen<<8 | phase }

func (t *Timeouts) err(phase uint64) *PhaseTimeout {
	switch phase {
	case phaseHeader:
		return t.headerErr
	case phaseFirstToken:
		return t.FirstTokenErr
	case phaseIdle:
		return t.idleErr
	case phaseTotal:
		return t.TotalErr
	}
	return nil
}

// monoStart anchors the clock's deadlines to the monotonic clock, so a step
// of the wall clock cannot make a firing stand down for good.
var monoStart = time.Now()

func monoNow() int64 { return int64(time.Since(monoStart)) }

// Clock bounds the phases of one upstream attempt with one timer:
// the wait for response headers and, for a stream, the wait for its first
// event, the gaps between events and the stream's whole length. When it
// fires it cancels the attempt's context with the phase's PhaseTimeout.
// The timeouts are enforced per request rather than in the transport
// because one server may be listed in pools with different timeouts.
//
// The timer goroutine and the request goroutine meet only in atomics.
// state holds the attempt's generation and the armed phase; whichever side
// takes the phase first (a CompareAndSwap on the whole word) acts on it,
// and a firing left over from an earlier attempt of the same exchange sees
// another generation and does nothing. deadline (monotonic) tells a firing
// that was overtaken by a push to stand down.
type Clock struct {
	t        *Timeouts
	timer    *time.Timer
	Cancel   context.CancelCauseFunc
	gen      uint64
	state    atomic.Uint64 // gen<<8 | phase
	deadline atomic.Int64  // monoNow() at which the armed phase ends
	// Stream phase: when it began and when the timer was last pushed back.
	StreamStart, lastPush time.Time
}

// start arms the header timeout and returns the context the upstream
// request must use. stop must be called once the response body is closed.
func (c *Clock) Start(ctx context.Context, t *Timeouts) context.Context {
	c.t = t
	c.gen++
	cctx, cancel := context.WithCancelCause(ctx)
	c.Cancel = cancel
	c.deadline.Store(monoNow() + int64(t.header))
	c.state.Store(packState(c.gen, phaseHeader))
	gen := c.gen
	// The closure holds this attempt's generation, timeouts and cancel.
	c.timer = time.AfterFunc(t.header, func() { c.fire(gen, t, cancel) })
	return cctx
}

func (c *Clock) fire(gen uint64, t *Timeouts, cancel context.CancelCauseFunc) {
	v := c.state.Load()
	if v>>8 != gen || v&0xff == phaseNone {
		return // another attempt's clock, or disarmed
	}
	if monoNow() < c.deadline.Load() {
		return // pushed back meanwhile; the timer was reset
	}
	if c.state.CompareAndSwap(v, packState(gen, phaseNone)) {
		cancel(t.err(v & 0xff))
	}
}

// take disarms the current phase; false means the timer took it first.
func (c *Clock) Take() bool {
	v := c.state.Load()
	return v&0xff != phaseNone && c.state.CompareAndSwap(v, packState(c.gen, phaseNone))
}

// stop disarms the timer and cancels the attempt's context.
func (c *Clock) Stop() {
	if c.timer != nil {
		c.state.Store(packState(c.gen, phaseNone))
		c.timer.Stop()
		c.Cancel(nil)
		c.timer = nil
	}
}

// headers is called with the result of sending the request: it takes the
// header timeout back, and turns a cancellation by it into its
// PhaseTimeout. If the timer fired as the headers arrived, the timeout
// wins: the context is (being) cancelled, so the body could not be read.
func (c *Clock) Headers(cctx context.Context, resp *http.Response, err error) (*http.Response, error) {
	if c.Take() {
		c.timer.Stop()
		if err == nil {
			return resp, nil
		}
	} else {
		<-cctx.Done() // the timer fired: its cancel is done or under way
	}
	var pt *PhaseTimeout
	if errors.As(context.Cause(cctx), &pt) {
		if resp != nil {
			resp.Body.Close()
		}
		return nil, pt
	}
	return resp, err
}

// streaming arms the first-event timeout (bounded by the whole-stream one)
// for a stream whose headers arrived, or the idle and total ones when it
// is off.
func (c *Clock) Streaming() { c.StreamingSince(time.Now()) }

// streamingSince is streaming for a stream that began at start: a
// continuation of a cut stream gets what is left of max_stream_duration,
// not a new one.
func (c *Clock) StreamingSince(start time.Time) {
	now := time.Now()
	c.StreamStart, c.lastPush = start, now
	if c.t.firstToken > 0 {
		if left := c.t.total - now.Sub(start); c.t.total > 0 && left < c.t.firstToken {
			c.arm(phaseTotal, max(left, time.Nanosecond))
		} else {
			c.arm(phaseFirstToken, c.t.firstToken)
		}
		return
	}
	c.push(now)
}

// body bounds reading a non-stream answer's body once its headers arrived
// by stream_idle_timeout, as a whole (vLLM sends such a body at once).
func (c *Clock) Body() {
	c.StreamStart = time.Now()
	c.lastPush = c.StreamStart
	if c.t.idle > 0 {
		c.arm(phaseIdle, c.t.idle)
	}
}

// drainWait bounds reading the end of a replica's response after [DONE].
const drainWait = 500 * time.Millisecond

// drainSoon bounds what is left of the attempt (reading the replica's end
// of the response after [DONE]) by drainWait.
func (c *Clock) DrainSoon() {
	if c.timer != nil {
		c.arm(phaseIdle, drainWait)
	}
}

// event is called for each event of the stream that carries data: it
// pushes the idle deadline back. To keep this cheap, the timer is moved
// only once an eighth of the idle timeout has passed since the last push,
// so a stalled stream is ended after between 7/8 and all of
// stream_idle_timeout.
func (c *Clock) Event() {
	if c.timer == nil {
		return
	}
	first := c.state.Load()&0xff == phaseFirstToken
	if !first && c.t.idle <= 0 && c.t.total <= 0 {
		return // nothing left to arm
	}
	now := time.Now()
	if first || now.Sub(c.lastPush) >= c.t.idle/8 {
		c.lastPush = now
		c.push(now)
	}
}

// push arms the sooner of the idle and the total deadline.
func (c *Clock) push(now time.Time) {
	d, phase := c.t.idle, uint64(phaseIdle)
	if c.t.total > 0 {
		left := c.t.total - now.Sub(c.StreamStart)
		if d <= 0 || left < d {
			d, phase = max(left, time.Nanosecond), phaseTotal
		}
	}
	if d <= 0 {
		c.state.Store(packState(c.gen, phaseNone))
		c.timer.Stop()
		return
	}
	c.arm(phase, d)
}

// arm sets the phase and its deadline before resetting the timer. A firing
// of the previous phase that races with this either sees the new deadline
// and stands down, or takes the phase first (the stream had reached its
// limit).
func (c *Clock) arm(phase uint64, d time.Duration) {
	c.deadline.Store(monoNow() + int64(d))
	c.state.Store(packState(c.gen, phase))
	c.timer.Reset(d)
}
