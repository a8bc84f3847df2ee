package vllmsim

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"net/http"
	"time"
)

// Faults are knobs for failure tests. They are safe to change while serving
// (Server.SetFaults); each inference request reads them once when it arrives.
// The durations here are wall-clock: Profile.SpeedUp does not divide them.
type Faults struct {
	// FailPercent (0..100) is the share of valid inference requests that fail
	// at once with FailStatus and a vLLM-style error body.
	FailPercent float64
	// FailStatus is the status of injected failures, 400..599; 0 means 500.
	FailStatus int
	// Stall holds every inference request this long before anything else
	// happens (validation, queueing, headers). A client cancel ends the stall.
	Stall time.Duration
	// SlowStart is an extra delay before the first token, after stream headers
	// have been sent and while the request holds its batch slot.
	SlowStart time.Duration
	// CutAfterChunks > 0 aborts the connection of a stream after this many
	// "data:" events (the final "data: [DONE]" counts as one; on the
	// Responses and Messages APIs every event counts), so the client sees
	// no end of stream. A non-stream response is aborted halfway through
	// its body.
	CutAfterChunks int
	// Unhealthy makes GET /health answer 503.
	Unhealthy bool
	// PoisonText, when set, makes every inference request whose body
	// contains it fail at once with FailStatus: a bug that one input
	// triggers on every replica alike.
	PoisonText string
}

// Validate reports every invalid field of f, joined.
func (f Faults) Validate() error {
	var errs []error
	if f.FailPercent < 0 || f.FailPercent > 100 || math.IsNaN(f.FailPercent) {
		errs = append(errs, fmt.Errorf("faults: fail-percent %v: must be within 0..100", f.FailPercent))
	}
	if f.FailStatus != 0 && (f.FailStatus < 400 || f.FailStatus > 599) {
		errs = append(errs, fmt.Errorf("faults: fail-status %d: must be within 400..599", f.FailStatus))
	}
	if f.Stall < 0 {
		errs = append(errs, fmt.Errorf("faults: stall %v: must be >= 0", f.Stall))
	}
	if f.SlowStart < 0 {
		errs = append(errs, fmt.Errorf("faults: slow-start %v: must be >= 0", f.SlowStart))
	}
	if f.CutAfterChunks < 0 {
		errs = append(errs, fmt.Errorf("faults: cut-after %d: must be >= 0", f.CutAfterChunks))
	}
	return errors.Join(errs...)
}

// failStatus is the status of an injected failure.
func (f *Faults) failStatus() int {
	if f.FailStatus == 0 {
		return http.StatusInternalServerError
	}
	return f.FailStatus
}

// RegisterFlags binds f's fields to flags on fs, using f's current values as
// the defaults: --fail-percent --fail-status --stall --slow-start --cut-after
// --unhealthy --poison-text.
func (f *Faults) RegisterFlags(fs *flag.FlagSet) {
	fs.Float64Var(&f.FailPercent, "fail-percent", f.FailPercent, "share of requests (0..100) that fail at once with --fail-status")
	fs.IntVar(&f.FailStatus, "fail-status", f.FailStatus, "HTTP status of injected failures (0 = 500)")
	fs.DurationVar(&f.Stall, "stall", f.Stall, "hold every inference request this long before answering anything")
	fs.DurationVar(&f.SlowStart, "slow-start", f.SlowStart, "extra delay before the first token, after stream headers")
	fs.IntVar(&f.CutAfterChunks, "cut-after", f.CutAfterChunks, "abort streams after this many data events, non-stream responses mid-body (0 = never)")
	fs.BoolVar(&f.Unhealthy, "unhealthy", f.Unhealthy, "GET /health answers 503")
	fs.StringVar(&f.PoisonText, "poison-text", f.PoisonText, "requests whose body contains this `text` fail at once with --fail-status")
}
