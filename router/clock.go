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
type upstreamClock struct {
	t       *poolTimeouts
	timer   *time.Timer
	cancel  context.CancelCauseFunc
	pending atomic.Pointer[phaseTimeout]
	// Stream phase: when it began and when the timer was last pushed back.
	streamStart, lastPush time.Time
}

// start arms the header timeout and returns the context the upstream
// request must use. stop must be called once the response body is closed.
func (c *upstreamClock) start(ctx context.Context, t *poolTimeouts) context.Context {
	c.t = t
	cctx, cancel := context.WithCancelCause(ctx)
	c.cancel = cancel
	c.pending.Store(t.headerErr)
	c.timer = time.AfterFunc(t.header, c.fire)
	return cctx
}

func (c *upstreamClock) fire() { c.cancel(c.pending.Load()) }

// stop disarms the timer and cancels the attempt's context.
func (c *upstreamClock) stop() {
	if c.timer != nil {
		c.timer.Stop()
		c.cancel(nil)
	}
}

// headers is called with the result of sending the request: it stops the
// header timeout and turns a cancellation by it into its phaseTimeout.
func (c *upstreamClock) headers(cctx context.Context, resp *http.Response, err error) (*http.Response, error) {
	if c.timer.Stop() && err == nil {
		return resp, nil
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
		c.arm(c.t.firstTokenErr, c.t.firstToken)
		return
	}
	c.push(c.streamStart)
}

// event is called when the stream made progress: it pushes the idle
// deadline back. To keep this cheap on every read, the timer is moved only
// once an eighth of the idle timeout has passed since the last push, so a
// stalled stream is ended after between 7/8 and all of stream_idle_timeout.
func (c *upstreamClock) event() {
	if c.timer == nil {
		return
	}
	now := time.Now()
	if c.pending.Load() == c.t.firstTokenErr || now.Sub(c.lastPush) >= c.t.idle/8 {
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
		c.timer.Stop()
		c.pending.Store(nil)
		return
	}
	c.arm(why, d)
}

func (c *upstreamClock) arm(why *phaseTimeout, d time.Duration) {
	c.pending.Store(why)
	c.timer.Reset(d)
}
