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

// upstreamClock bounds the phases of one upstream attempt with one timer:
// the wait for response headers and, for a stream, the wait for its first
// event, the gaps between events and the stream's whole length. When it
// fires it cancels the attempt's context with the phase's phaseTimeout.
// The timeouts are enforced per request rather than in the transport
// because one server may be listed in pools with different timeouts.
//
// The timer goroutine and the request goroutine meet only in atomics:
// pending is the armed phase (taken by whichever side acts first) and
// deadline tells a firing that was overtaken by a push to stand down. An
// exchange reuses its clock across attempts; each start makes a new timer
// and context, so a late firing of an old one cancels only its own.
type upstreamClock struct {
	t        *poolTimeouts
	timer    *time.Timer
	cancel   context.CancelCauseFunc
	pending  atomic.Pointer[phaseTimeout]
	deadline atomic.Int64 // unix nanos of the armed phase's end
	// Stream phase: when it began and when the timer was last pushed back.
	streamStart, lastPush time.Time
}

// start arms the header timeout and returns the context the upstream
// request must use. stop must be called once the response body is closed.
func (c *upstreamClock) start(ctx context.Context, t *poolTimeouts) context.Context {
	c.t = t
	cctx, cancel := context.WithCancelCause(ctx)
	c.cancel = cancel
	c.deadline.Store(time.Now().Add(t.header).UnixNano())
	c.pending.Store(t.headerErr)
	// The closure holds this attempt's cancel: a firing that comes late
	// for this attempt never touches the next one's.
	c.timer = time.AfterFunc(t.header, func() { c.fire(cancel) })
	return cctx
}

func (c *upstreamClock) fire(cancel context.CancelCauseFunc) {
	if time.Now().UnixNano() < c.deadline.Load() {
		return // pushed back meanwhile; the timer was reset
	}
	if why := c.pending.Swap(nil); why != nil {
		cancel(why)
	}
}

// stop disarms the timer and cancels the attempt's context.
func (c *upstreamClock) stop() {
	if c.timer != nil {
		c.pending.Store(nil)
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
	if c.pending.Swap(nil) != nil {
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

// streaming arms the first-event timeout (or the idle and total ones when
// that is off) for a stream whose headers arrived.
func (c *upstreamClock) streaming() {
	c.streamStart = time.Now()
	c.lastPush = c.streamStart
	if c.t.firstToken > 0 {
		c.arm(c.t.firstTokenErr, c.t.firstToken, c.streamStart)
		return
	}
	c.push(c.streamStart)
}

// body arms the idle timeout for reading a non-stream answer's body once
// its headers arrived.
func (c *upstreamClock) body() {
	c.streamStart = time.Now()
	c.lastPush = c.streamStart
	if c.t.idle > 0 {
		c.arm(c.t.idleErr, c.t.idle, c.streamStart)
	}
}

// event is called when the stream made progress: it pushes the idle
// deadline back. To keep this cheap on every read, the timer is moved only
// once an eighth of the idle timeout has passed since the last push, so a
// stalled stream is ended after between 7/8 and all of stream_idle_timeout.
func (c *upstreamClock) event() {
	if c.timer == nil {
		return
	}
	first := c.pending.Load() == c.t.firstTokenErr
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
	d, why := c.t.idle, c.t.idleErr
	if c.t.total > 0 {
		left := c.t.total - now.Sub(c.streamStart)
		if d <= 0 || left < d {
			d, why = max(left, time.Nanosecond), c.t.totalErr
		}
	}
	if d <= 0 {
		c.pending.Store(nil)
		c.timer.Stop()
		return
	}
	c.arm(why, d, now)
}

// arm sets the phase and its deadline before resetting the timer, so a
// firing of the previous phase that races with this either sees the new
// deadline and stands down, or wins (the stream had reached its limit).
func (c *upstreamClock) arm(why *phaseTimeout, d time.Duration, now time.Time) {
	c.deadline.Store(now.Add(d).UnixNano())
	c.pending.Store(why)
	c.timer.Reset(d)
}
