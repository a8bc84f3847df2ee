package outcomes

import (
	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/prometheus/client_golang/prometheus"
)

// The outcomes of an answered turn, as switchyard_turn_outcomes_total
// counts them, worst first: when the next turn shows several, the first
// listed is counted.
const (
	// ToolError: the next turn returns a tool result that reads as a
	// failure (the answer's tool call failed).
	ToolError = "tool_error"
	// RepeatedCall: the next turn's tool call repeats an earlier one with
	// identical arguments (the agent spins).
	RepeatedCall = "repeated_call"
	// Reasked: the next turn is a new instruction identical to the one
	// this turn answered (the user asked again).
	Reasked = "reasked"
	// MovedUp: the next turn moved the session to a stronger route.
	MovedUp = "moved_up"
	// OK: the next turn shows none of the above.
	OK = "ok"
)

// Bad reports whether outcome is one of the bad ones (all but OK).
func Bad(outcome string) bool { return outcome != OK }

// Turn is what is kept of a session's last answered turn.
type Turn struct {
	Pool, Route string
	// Instruction identifies the instruction the turn answered (a hash
	// of its words; 0: none known).
	Instruction uint64
	// judged: a next turn was seen and counted already.
	judged bool
}

// Next is what the next turn of a session shows.
type Next struct {
	ToolError, RepeatedCall, MovedUp bool
	// Instruction identifies the next turn's new instruction (0: the
	// turn is not a new instruction).
	Instruction uint64
}

// Of is the outcome of an answered turn that next followed.
func Of(answered Turn, next Next) string {
	switch {
	case next.ToolError:
		return ToolError
	case next.RepeatedCall:
		return RepeatedCall
	case next.Instruction != 0 && next.Instruction == answered.Instruction:
		return Reasked
	case next.MovedUp:
		return MovedUp
	}
	return OK
}

// Tracker keeps the last answered turn of at most size sessions (least
// recently seen dropped first) and counts outcomes in counter (labels
// pool, route, outcome). Safe for concurrent use.
type Tracker struct {
	turns   *lru.Cache[string, Turn]
	counter *prometheus.CounterVec
}

// New returns a tracker of at most size sessions (at least 1).
func New(size int, counter *prometheus.CounterVec) *Tracker {
	turns, _ := lru.New[string, Turn](max(size, 1)) // errs only for size <= 0
	return &Tracker{turns: turns, counter: counter}
}

// Next counts the outcome of the session's last answered turn, if it has
// one not judged yet, from what its next turn shows; it returns the
// outcome ("" when none was counted). Each answered turn is judged once.
func (t *Tracker) Next(session string, next Next) string {
	prev, ok := t.turns.Get(session)
	if !ok || prev.judged {
		return ""
	}
	outcome := Of(prev, next)
	prev.judged = true
	t.turns.Add(session, prev) // in place: the key exists
	if t.counter != nil {
		t.counter.WithLabelValues(prev.Pool, prev.Route, outcome).Inc()
	}
	return outcome
}

// Answered records the session's latest answered turn.
func (t *Tracker) Answered(session string, turn Turn) {
	turn.judged = false
	t.turns.Add(session, turn)
}

// Len is the number of sessions kept.
func (t *Tracker) Len() int { return t.turns.Len() }
