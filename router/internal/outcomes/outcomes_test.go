package outcomes

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func counter() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "t"}, []string{"pool", "route", "outcome"})
}

func value(t *testing.T, c *prometheus.CounterVec, labels ...string) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.WithLabelValues(labels...).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestOf: the worst outcome the next turn shows is the turn's.
func TestOf(t *testing.T) {
	prev := Turn{Pool: "small", Route: "default", Instruction: 7}
	for _, tc := range []struct {
		name string
		next Next
		want string
	}{
		{"a routine next step", Next{}, OK},
		{"a failed tool call", Next{ToolError: true, MovedUp: true}, ToolError},
		{"spinning", Next{RepeatedCall: true}, RepeatedCall},
		{"asked again", Next{Instruction: 7}, Reasked},
		{"a new instruction", Next{Instruction: 8}, OK},
		{"moved up", Next{MovedUp: true}, MovedUp},
	} {
		if got := Of(prev, tc.next); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	if Of(Turn{}, Next{Instruction: 0}) != OK {
		t.Error("an unknown instruction is no re-ask")
	}
}

// TestTrackerCountsEachTurnOnce: an answered turn is judged by the first
// turn that follows it, once, on its own pool and route; a session's
// first turn and a turn not answered count nothing.
func TestTrackerCountsEachTurnOnce(t *testing.T) {
	c := counter()
	tr := New(10, c)
	if got := tr.Next("s", Next{ToolError: true}); got != "" {
		t.Errorf("a first turn judged %q", got)
	}
	tr.Answered("s", Turn{Pool: "small", Route: "default"})
	if got := tr.Next("s", Next{ToolError: true}); got != ToolError {
		t.Errorf("got %q", got)
	}
	if got := tr.Next("s", Next{ToolError: true}); got != "" {
		t.Errorf("judged twice: %q", got)
	}
	tr.Answered("s", Turn{Pool: "big", Route: "complex"})
	tr.Next("s", Next{})
	if v := value(t, c, "small", "default", ToolError); v != 1 {
		t.Errorf("small tool_error %v", v)
	}
	if v := value(t, c, "big", "complex", OK); v != 1 {
		t.Errorf("big ok %v", v)
	}
}

// TestTrackerBounded: memory is bounded by the size, whatever the number
// of sessions.
func TestTrackerBounded(t *testing.T) {
	tr := New(100, counter())
	for i := range 10000 {
		tr.Answered(fmt.Sprint("s", i), Turn{Pool: "p", Route: "r"})
	}
	if tr.Len() != 100 {
		t.Errorf("%d sessions kept, want 100", tr.Len())
	}
}

// BenchmarkSeenSession is a request of a session already seen: its next
// turn judged and its answer recorded (issue 41's bound: at most 2 us and
// no allocation).
func BenchmarkSeenSession(b *testing.B) {
	tr := New(100000, counter())
	const s = "0123456789abcdef-key\x00auto"
	tr.Answered(s, Turn{Pool: "small", Route: "default", Instruction: 1})
	b.ReportAllocs()
	for b.Loop() {
		tr.Next(s, Next{Instruction: 2})
		tr.Answered(s, Turn{Pool: "small", Route: "default", Instruction: 2})
	}
}
