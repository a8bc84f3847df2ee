package upstream

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/switchyard/switchyard/pools"
)

// Failure is a replica answer that will not be passed to the
// client as is (429, 5xx, or a sign the replica is misconfigured), kept to
// explain the final error.
type Failure struct {
	Status int
	Msg    string
	// retryAfter is what the replica's Retry-After said (0: nothing).
	RetryAfter time.Duration
}

// ParseRetryAfter reads a Retry-After header: delay seconds or an HTTP
// date (RFC 9110 §10.2.3). 0 when absent or unreadable.
func ParseRetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if v = strings.TrimSpace(v); v != "" && strings.Trim(v, "0123456789") == "" {
		// delay-seconds: digits only; absurd values are capped at a day.
		if n, err := strconv.Atoi(v); err == nil {
			return time.Duration(min(n, 86400)) * time.Second
		}
		return 24 * time.Hour
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return min(t.Sub(now), 24*time.Hour)
	}
	return 0
}

func (u *Failure) Error() string {
	return fmt.Sprintf("replica answered %d: %s", u.Status, u.Msg)
}

// Result is the verdict on one attempt, as the executor reads it once:
// whether the exchange is over, whether another replica may be asked, what
// the attempt says of its replica (for passive health) and what the client
// is told. Each constructor below makes one kind of verdict.
type Result struct {
	// done: the exchange is over (an answer reached the client, or the
	// client went away); nothing is retried.
	done bool
	// retry: nothing reached the client and another replica may take the
	// request (only with !done).
	retry bool
	// outcome and detail feed passive health; reason labels the retry
	// metric if this attempt is retried.
	outcome pools.Outcome
	detail  string
	reason  string
	err     error
	// poison: two replicas gave the same 500 for the request (see
	// execute); the request, not the pool, is at fault.
	poison bool
}

// Answered: the answer reached the client, whole or cut (or the client
// left while it was relayed), so the exchange is over; o and detail are
// what it says of the replica.
func Answered(o pools.Outcome, detail string) Result {
	return Result{done: true, outcome: o, detail: detail}
}

// ClientLeft: the client went away (err says how); nothing is retried and
// the replica is not blamed.
func ClientLeft(err error) Result { return Result{done: true, outcome: pools.Neutral, err: err} }

// Failed: the attempt failed and no other replica is asked (none would do
// better, or the failure may be slowness rather than loss); err is what the
// client is told.
func Failed(o pools.Outcome, detail string, err error) Result {
	return Result{outcome: o, detail: detail, err: err}
}

// Retryable: nothing reached the client and another replica may take the
// request; reason labels the retry metric.
func Retryable(o pools.Outcome, reason, detail string, err error) Result {
	return Result{retry: true, outcome: o, reason: reason, detail: detail, err: err}
}

// NotSent: no request reached a replica (none could be built, or no
// replica could take it); the replica, if one was chosen, is not blamed.
func NotSent(err error) Result { return Result{err: err} }

// Done reports whether the exchange is over.
func (r Result) Done() bool { return r.done }

// Err is what went wrong, nil for an answer passed on.
func (r Result) Err() error { return r.err }

// Poison reports that the request, not the pool, made two replicas fail
// alike.
func (r Result) Poison() bool { return r.poison }

// WithErr is r with err in place of its error (err wraps it, usually).
func (r Result) WithErr(err error) Result {
	r.err = err
	return r
}

// caller makes the attempts of one execution.
type Attempt interface {
	// send makes one attempt on rep, which the executor has counted in
	// flight and releases when send returns: send must have closed the
	// response body by then.
	Send(ctx context.Context, rep *pools.Replica) Result
	// acquired is told each replica chosen, before send.
	Acquired(rep *pools.Replica)
}

// execution is one request to be placed on a pool by execute.
type Execution struct {
	Pool     *pools.Pool
	Req      *pools.Request
	Attempts int
	Call     Attempt
	// retries counts the retries actually sent.
	Retries int
	// Queued is the time its attempts waited for a replica slot.
	Queued time.Duration
	// triedBuf backs the list of replicas tried, so that it costs no
	// allocation for the usual few attempts.
	triedBuf, refusedBuf [4]*pools.Replica
	// retryAfter is the largest Retry-After of the 429s seen.
	retryAfter time.Duration
	// only, when set, is the one replica that may take the request.
	Only *pools.Replica
	// held are the retryable 500s not yet told to passive health (see
	// the poison rule of Execute), all of one status.
	held []heldFailure
	// avoid, when set, is a replica never to be asked (the one that cut
	// the stream a continuation resumes).
	Avoid [1]*pools.Replica
}

// execute is the one upstream executor, the only retry loop: client
// requests (attempt), classifier calls (poolTransport) and stream
// continuations (continuation) all run through it. It acquires a replica,
// has the caller make one attempt (which sends with send), records the
// outcome for passive health, releases, and retries per the rule below.
//
// The stages, from the edge in: forward walks the decided chain of pools;
// placeOn prepares the body for one pool and runs execute; the caller's
// send is one attempt (attempt, for a client request, which passes the
// answer on with deliver or relay); send makes its one HTTP exchange. The
// client's status is decided by toAPIError for an answer the gateway
// writes, and is the replica's for one it relays.
//
// Retry rule: an attempt is retried only while nothing has
// reached the client (send says so with retry), on a replica not yet
// tried, bounded by ex.attempts and the request's context. A 429 or 5xx
// answer is never retried on the replica that gave it; a failure to get
// any answer (a keep-alive connection a restarted replica had closed) may
// be retried on the same replica when no other can take it. A retry is
// counted, and its backoff slept, only when some replica can take it.
//
// Poison rule: a request that gets 500 from two replicas and has no
// untried replica left within its attempts is taken to be the cause (a
// vLLM bug on one input, say): it is not retried further, and none of its
// 500s counts toward a replica's consecutive_5xx. While an untried replica
// is left it is tried: two broken replicas must not keep a request from a
// healthy third. So a retryable 500 is told to passive health only once a
// later attempt's status shows whether the request is to blame (Settle;
// the slot is released at once all the same).
func (e *Executor) Execute(ctx context.Context, ex *Execution) Result {
	ps := ex.Pool
	ex.held = nil
	defer ex.Settle(ps, 0)
	// Replicas are compared by endpoint: a reload during a queue wait
	// hands the waiter the pool's new view, whose Replica values are new.
	tried := ex.triedBuf[:0]
	for _, r := range ex.Avoid {
		if r != nil {
			tried = append(tried, r)
		}
	}
	other := func(r *pools.Replica) bool { return ex.Only != nil && r.Endpoint != ex.Only.Endpoint }
	exclude := func(r *pools.Replica) bool { return other(r) || hasEndpoint(tried, r) }
	// refused lists the replicas whose attempt got no answer at all; only
	// those may be asked again when no other replica can take the request.
	refused := ex.refusedBuf[:0]
	answered := func(r *pools.Replica) bool {
		return other(r) || hasEndpoint(tried, r) && !hasEndpoint(refused, r)
	}
	var last Result
	for a := 0; a < ex.Attempts; a++ {
		same := false
		if a > 0 {
			if !ps.CanTake(exclude) {
				if last.outcome != pools.ConnectFailure || !ps.CanTake(answered) {
					break
				}
				same = true
			}
			if err := backoff(ctx, a, e.Rand); err != nil {
				return NotSent(err)
			}
		}
		waitStart := time.Now()
		var rep *pools.Replica
		var err error
		if same {
			rep, err = ps.Acquire(ctx, ex.Req, answered)
		} else {
			rep, err = ps.Acquire(ctx, ex.Req, exclude)
		}
		if err != nil {
			// The wait counts even when it ends without a slot: a 503
			// after queue_timeout was queued all that time.
			ex.Queued += time.Since(waitStart)
			switch {
			case ctx.Err() != nil:
				return NotSent(ctx.Err())
			case a > 0:
				return last
			case errors.Is(err, pools.ErrSaturated):
				return NotSent(fmt.Errorf("%w: pool %q: every replica is at max_inflight %d", ErrNoReplica, ps.Name, ps.MaxInflight()))
			}
			return NotSent(fmt.Errorf("%w: pool %q has no healthy replica", ErrNoReplica, ps.Name))
		}
		waited := time.Since(waitStart)
		ex.Queued += waited
		e.QueueWait.WithLabelValues(ps.Name).Observe(waited.Seconds())
		if a > 0 {
			ex.Retries++
			e.Retries.WithLabelValues(ps.Name, last.reason).Inc()
		}
		tried = append(tried, rep)
		ex.Call.Acquired(rep)
		res := ex.Call.Send(ctx, rep)
		status := failedStatus(res)
		if len(ex.held) > 0 && poisonStatus(status) && status == ex.held[0].status &&
			!(res.retry && !res.done && ctx.Err() == nil && a+1 < ex.Attempts && ps.CanTake(exclude)) {
			// The same 500 from a second replica and none untried left:
			// the request's fault.
			ex.held = nil
			ps.ReleaseFor(rep, ex.Req)
			e.Poison.WithLabelValues(ps.Name).Inc()
			res.retry, res.poison = false, true
			return res
		}
		ex.Settle(ps, status)
		if poisonStatus(status) && res.retry && !res.done && ctx.Err() == nil && a+1 < ex.Attempts {
			ex.held = append(ex.held, heldFailure{rep: rep, outcome: res.outcome, detail: res.detail, status: status})
		} else {
			ps.Observe(rep, res.outcome, res.detail)
		}
		ps.ReleaseFor(rep, ex.Req)
		if res.done || !res.retry || ctx.Err() != nil {
			return res
		}
		var uf *Failure
		if errors.As(res.err, &uf) && uf.Status == http.StatusTooManyRequests {
			// The client is told the longest wait any replica asked for.
			ex.retryAfter = max(ex.retryAfter, uf.RetryAfter)
			uf.RetryAfter = ex.retryAfter
		}
		if res.outcome == pools.ConnectFailure && !hasEndpoint(refused, rep) {
			refused = append(refused, rep)
		}
		last = res
	}
	return last
}

// executor runs executions; its metrics are the gateway's.
type Executor struct {
	QueueWait *prometheus.HistogramVec // by pool
	Retries   *prometheus.CounterVec   // by pool and reason
	Poison    *prometheus.CounterVec   // by pool
	// rand jitters retry backoff.
	Rand func() uint64
}

// heldFailure is a replica's 5xx not yet told to passive health (see the
// poison rule of execute).
type heldFailure struct {
	rep     *pools.Replica
	outcome pools.Outcome
	detail  string
	status  int
}

// replicaDepthMargin is how much deeper than a request replica data may
// nest: an answer echoes the request inside its own structure (the
// Responses API's response.created carries the request's tools one level
// down), so a request at the bound must not make its answer refused.
const replicaDepthMargin = 16

func ReplicaDepth(requestBound int) int { return requestBound + replicaDepthMargin }

// poisonStatus reports a status the poison rule applies to: 500, what
// vLLM answers when one input makes it fail, and 503, which a replica may
// answer for one request it cannot take while serving others. Either is
// the request's fault only when every replica tried gave it (the rule
// tries an untried replica first); a replica that answers 503 alone, as
// one restarting or overloaded does, is counted once another answers. 502
// and 504 describe what stands before the replica, never the request.
func poisonStatus(status int) bool {
	return status == http.StatusInternalServerError || status == http.StatusServiceUnavailable
}

// settle tells passive health of a held 5xx once the next attempt's answer
// has a status that is not the same failure (status 0: the execution ends
// without one): the replica was at fault after all. It is called as soon
// as the next answer's headers are judged, not when that answer ends, so
// a failing replica is counted while a long stream runs elsewhere.
func (ex *Execution) Settle(ps *pools.Pool, status int) {
	if len(ex.held) > 0 && !(status != 0 && status == ex.held[0].status) {
		for _, h := range ex.held {
			ps.Observe(h.rep, h.outcome, h.detail)
		}
		ex.held = nil
	}
}

// hasEndpoint reports whether rs holds a replica of r's endpoint.
func hasEndpoint(rs []*pools.Replica, r *pools.Replica) bool {
	for _, x := range rs {
		if x.Endpoint == r.Endpoint {
			return true
		}
	}
	return false
}

// failedStatus is the status of a replica's failed answer (0 when the
// attempt got none, or succeeded).
func failedStatus(res Result) int {
	var uf *Failure
	if res.done || !errors.As(res.err, &uf) {
		return 0
	}
	return uf.Status
}

// isConnectTimeout reports a timeout while connecting (dial or TLS
// handshake): the request was never sent, so it is a connection failure,
// retried elsewhere, not a slow answer.
func isConnectTimeout(err error) bool {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" {
		return true
	}
	return strings.Contains(err.Error(), "TLS handshake timeout")
}

// JudgeStatus classifies a replica's answer status: what it says about the
// replica, and whether another replica may be asked instead.
func JudgeStatus(status int) (o pools.Outcome, retry bool, reason string) {
	switch {
	case status == http.StatusTooManyRequests:
		return pools.Neutral, true, "status_429"
	case status >= 500:
		return pools.Status5xx, true, "status_5xx"
	case status == http.StatusUnauthorized || status == http.StatusForbidden || status == http.StatusNotFound:
		// The client's credentials are never forwarded and the model
		// was rewritten to the pool's: the pool's key is wrong, or the
		// server does not serve the pool's model.
		return pools.Misconfigured, true, "misconfigured"
	}
	return pools.Success, false, ""
}

// JudgeError classifies a failure to get an answer from rep: the client
// going away, a timeout (never retried), or a connection failure.
func JudgeError(ctx context.Context, pool string, rep *pools.Replica, err error, what string) Result {
	if ctx.Err() != nil {
		return ClientLeft(ctx.Err())
	}
	ue := &Error{Pool: pool, Replica: rep.Name, Err: err}
	if what != "" {
		ue.Err = fmt.Errorf("%s: %w", what, err)
	}
	if IsTimeout(err) && !isConnectTimeout(err) {
		// Not replayed: the request may be slow rather than lost, and a
		// replay doubles the load. Answers 504.
		return Failed(pools.Timeout, ue.Err.Error(), ue)
	}
	return Retryable(pools.ConnectFailure, "connect", ue.Err.Error(), ue)
}

// backoff waits a jittered, growing delay before retry number a (≥1),
// returning early with the context's error.
func backoff(ctx context.Context, a int, rnd func() uint64) error {
	base := 10 * time.Millisecond << min(a-1, 4)
	d := base/2 + time.Duration(rnd()%uint64(base))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
