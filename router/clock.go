package router

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"time"
)

// phaseTimeout is the error of an upstream attempt that one of the pool's
// timeouts ended. It is a net.Error with Timeout() true, so a header
// timeout maps to 504 and is never retried.
type phaseTimeout struct {
	msg string
	// stream is set for the timeouts of a started stream, which count as
	// a replica failure.
	stream bool
}

func (e *phaseTimeout) Error() string   { return e.msg }
func (e *phaseTimeout) Timeout() bool   { return true }
func (e *phaseTimeout) Temporary() bool { return false }

// poolTimeouts are a pool's upstream timeouts with their errors, built once
// per snapshot so that arming them allocates nothing.
type poolTimeouts struct {
	header, firstToken, idle, total time.Duration
	headerErr, firstTokenErr        *phaseTimeout
	idleErr, totalErr               *phaseTimeout
}

func newPoolTimeouts(header, firstToken, idle, total time.Duration) *poolTimeouts {
	return &poolTimeouts{
		header: header, firstToken: firstToken, idle: idle, total: total,
		headerErr:     &phaseTimeout{msg: "no response headers within " + header.String() + " (response_header_timeout)"},
		firstTokenErr: &phaseTimeout{msg: "the stream sent no event within " + firstToken.String() + " (first_token_timeout)", stream: true},
		idleErr:       &phaseTimeout{msg: "the stream sent no event for " + idle.String() + " (stream_idle_timeout)", stream: true},
		totalErr:      &phaseTimeout{msg: "the stream ran longer than " + total.String() + " (max_stream_duration)", stream: true},
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

func (t *poolTimeouts) err(phase uint64) *phaseTimeout {
	switch phase {
	case phaseHeader:
		return t.headerErr
	case phaseFirstToken:
		return t.firstTokenErr
	case phaseIdle:
		return t.idleErr
	case phaseTotal:
		return t.totalErr
	}
	return nil
}

// monoStart anchors the clock's deadlines to the monotonic clock, so a step
// of the wall clock cannot make a firing stand down for good.
var monoStart = time.Now()

func monoNow() int64 { return int64(time.Since(monoStart)) }

// upstreamClock bounds the phases of one upstream attempt with one timer:
// the wait for response headers and, for a stream, the wait for its first
// event, the gaps between events and the stream's whole length. When it
// fires it cancels the attempt's context with the phase's phaseTimeout.
// The timeouts are enforced per request rather than in the transport
// because one server may be listed in pools with different timeouts.
//
// The timer goroutine and the request goroutine meet only in atomics.
// state holds the attempt's generation and the armed phase; whichever side
// takes the phase first (a CompareAndSwap on the whole word) acts on it,
// and a firing left over from an earlier attempt of the same exchange sees
// another generation and does nothing. deadline (monotonic) tells a firing
// that was overtaken by a push to stand down.
type upstreamClock struct {
	t        *poolTimeouts
	timer    *time.Timer
	cancel   context.CancelCauseFunc
	gen      uint64
	state    atomic.Uint64 // gen<<8 | phase
	deadline atomic.Int64  // monoNow() at which the armed phase ends
	// Stream phase: when it began and when the timer was last pushed back.
	streamStart, lastPush time.Time
}

// start arms the header timeout and returns the context the upstream
// request must use. stop must be called once the response body is closed.
func (c *upstreamClock) start(ctx context.Context, t *poolTimeouts) context.Context {
	c.t = t
	c.gen++
	cctx, cancel := context.WithCancelCause(ctx)
	c.cancel = cancel
	c.deadline.Store(monoNow() + int64(t.header))
	c.state.Store(packState(c.gen, phaseHeader))
	gen := c.gen
	// The closure holds this attempt's generation, timeouts and cancel.
	c.timer = time.AfterFunc(t.header, func() { c.fire(gen, t, cancel) })
	return cctx
}

func (c *upstreamClock) fire(gen uint64, t *poolTimeouts, cancel context.CancelCauseFunc) {
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
func (c *upstreamClock) take() bool {
	v := c.state.Load()
	return v&0xff != phaseNone && c.state.CompareAndSwap(v, packState(c.gen, phaseNone))
}

// stop disarms the timer and cancels the attempt's context.
func (c *upstreamClock) stop() {
	if c.timer != nil {
		c.state.Store(packState(c.gen, phaseNone))
		c.timer.Stop()
		c.cancel(nil)
		c.timer = nil
	}
}

// headers is called with the result of sending the request: it takes the
// header timeout back, and turns a cancellation by it into its
// phaseTimeout. If the timer fired as the headers arrived, the timeout
// wins: the context is (being) cancelled, so the body could not be read.
func (c *upstreamClock) headers(cctx context.Context, resp *http.Response, err error) (*http.Response, error) {
	if c.take() {
		c.timer.Stop()
		if err == nil {
			return resp, nil
		}
	} else {
		<-cctx.Done() // the timer fired: its cancel is done or under way
	}
	var pt *phaseTimeout
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
func (c *upstreamClock) streaming() { c.streamingSince(time.Now()) }

// streamingSince is streaming for a stream that began at start: a
// continuation of a cut stream gets what is left of max_stream_duration,
// not a new one.
func (c *upstreamClock) streamingSince(start time.Time) {
	now := time.Now()
	c.streamStart, c.lastPush = start, now
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
func (c *upstreamClock) body() {
	c.streamStart = time.Now()
	c.lastPush = c.streamStart
	if c.t.idle > 0 {
		c.arm(phaseIdle, c.t.idle)
	}
}

// drainWait bounds reading the end of a replica's response after [DONE].
const drainWait = 500 * time.Millisecond

// drainSoon bounds what is left of the attempt (reading the replica's end
// of the response after [DONE]) by drainWait.
func (c *upstreamClock) drainSoon() {
	if c.timer != nil {
		c.arm(phaseIdle, drainWait)
	}
}

// event is called for each event of the stream that carries data: it
// pushes the idle deadline back. To keep this cheap, the timer is moved
// only once an eighth of the idle timeout has passed since the last push,
// so a stalled stream is ended after between 7/8 and all of
// stream_idle_timeout.
func (c *upstreamClock) event() {
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
func (c *upstreamClock) push(now time.Time) {
	d, phase := c.t.idle, uint64(phaseIdle)
	if c.t.total > 0 {
		left := c.t.total - now.Sub(c.streamStart)
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
func (c *upstreamClock) arm(phase uint64, d time.Duration) {
	c.deadline.Store(monoNow() + int64(d))
	c.state.Store(packState(c.gen, phase))
	c.timer.Reset(d)
}
