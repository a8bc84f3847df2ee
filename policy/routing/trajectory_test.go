package routing_test

import (
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/policy/internal/policytest"
	"github.com/switchyard/switchyard/policy/routing"
)

// trajectoryPolicy is the reference policy's shape: side, then complex on
// the class or on the trajectory's evidence, then the default.
const trajectoryRoutes = `routes:
  - name: side
    when: {any: [{small_model: true}, {tools: 0, max_tokens: {lte: 4096}, class: simple}]}
    to: a
    side: true
  - name: complex
    when: {any: [{tool_error: true}, {repeated_call: true}, {class: complex}]}
    to: b
  - {name: default, to: a, fallback: [b]}
`

// TestDecideTrajectory: a failed tool result and a repeated identical call
// each take the complex route with no classifier call; explain says why.
func TestDecideTrajectory(t *testing.T) {
	cfg := policytest.Load(t, header+`models:
  - {name: auto, route: policy}
  - {name: "*-haiku-*", route: policy, small: true}
`+trajectoryRoutes)
	pol := routing.New(cfg)
	for _, tc := range []struct {
		name  string
		req   routing.Request
		route string
		why   string
		calls int
	}{
		{"tool error", routing.Request{Model: "auto", Tools: 5, Turn: routing.TurnToolResult, ToolError: "exit code 1"}, "complex", "tool_error: the latest tool result reads as a failure (exit code 1)", 0},
		{"repeated call", routing.Request{Model: "auto", Tools: 5, Turn: routing.TurnToolResult, RepeatedCall: "read"}, "complex", `repeated_call: the latest call to "read" repeats an earlier one with identical arguments`, 0},
		{"routine step", routing.Request{Model: "auto", Tools: 5, Turn: routing.TurnToolResult}, "default", "", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cls := label("simple")
			d := pol.Decide(&tc.req, cls.classify, true)
			if d.Route != tc.route || cls.calls != tc.calls {
				t.Fatalf("route %q after %d classifier calls, want %q after %d", d.Route, cls.calls, tc.route, tc.calls)
			}
			if tc.why != "" && (len(d.Why) == 0 || d.Why[0] != tc.why) {
				t.Errorf("why = %q, want %q", d.Why, tc.why)
			}
		})
	}
	// tool_error: false holds for a turn without a failure.
	neg := policytest.Load(t, header+`models: [{name: auto, route: policy}]
routes:
  - {name: calm, when: {tool_error: false, repeated_call: false}, to: a}
  - {name: default, to: b}
`)
	p2 := routing.New(neg)
	if d := p2.Decide(&routing.Request{Model: "auto", ToolError: "is_error"}, nil, true); d.Route != "default" || !strings.Contains(d.Skipped[0].Reason, "is_error") {
		t.Errorf("tool_error: false on a failed result: %+v", d)
	}
	if d := p2.Decide(&routing.Request{Model: "auto"}, nil, false); d.Route != "calm" {
		t.Errorf("tool_error: false without a failure: %+v", d)
	}
}

// TestDecideSessionMovesDown: a session moved up by one failed call comes
// back down at the next new instruction judged simple, stays up through a
// tool loop, and with move_down: never stays up.
func TestDecideSessionMovesDown(t *testing.T) {
	for _, moveDown := range []string{"", "never"} {
		t.Run("move_down="+moveDown, func(t *testing.T) {
			sess := "session: {header: X-Session-Id, ttl: 1m}\n"
			if moveDown != "" {
				sess = "session: {header: X-Session-Id, ttl: 1m, move_down: " + moveDown + "}\n"
			}
			cfg := policytest.Load(t, header+"models: [{name: auto, route: policy}, {name: \"*-haiku-*\", route: policy, small: true}]\n"+sess+trajectoryRoutes)
			clk := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
			pol := routing.New(cfg, routing.WithSessions(routing.NewSessions(100, time.Minute, clk.Now)))
			instr := routing.Request{Model: "auto", Session: "s", Tools: 5, Turn: routing.TurnInstruction}
			step := routing.Request{Model: "auto", Session: "s", Tools: 5, Turn: routing.TurnToolResult}
			failed := step
			failed.ToolError = "is_error"
			down, downSession := "default", routing.SessionMovedDown
			if moveDown == "never" {
				down, downSession = "complex", routing.SessionKept
			}
			simple, complex := label("simple"), label("complex")
			for i, st := range []struct {
				req            routing.Request
				cls            *classifier
				route, session string
			}{
				{instr, simple, "default", routing.SessionNew},
				{failed, simple, "complex", routing.SessionMovedUp},
				// Inside the tool loop: up only, whatever the turn says.
				{step, simple, "complex", routing.SessionKept},
				{step, simple, "complex", routing.SessionKept},
				// A new instruction judged simple: down (by the rule).
				{instr, simple, down, downSession},
				{step, simple, down, routing.SessionKept},
				// A new instruction judged complex moves it up again.
				{instr, complex, "complex", map[bool]string{true: routing.SessionKept, false: routing.SessionMovedUp}[moveDown == "never"]},
				// ... and the same judgement again keeps it.
				{instr, complex, "complex", routing.SessionKept},
			} {
				d := pol.Decide(&st.req, st.cls.classify, false)
				if d.Route != st.route || d.Session != st.session {
					t.Fatalf("step %d: route %q session %q, want %q %q", i, d.Route, d.Session, st.route, st.session)
				}
			}
		})
	}
}

// TestDecideExplainsMoves: explain says why a session moved down, or why a
// tool-loop turn could not move it.
func TestDecideExplainsMoves(t *testing.T) {
	cfg := policytest.Load(t, header+"models: [{name: auto, route: policy}, {name: \"*-haiku-*\", route: policy, small: true}]\nsession: {header: X-Session-Id, ttl: 1m}\n"+trajectoryRoutes)
	pol := routing.New(cfg, routing.WithSessions(routing.NewSessions(100, time.Minute, nil)))
	pol.Decide(&routing.Request{Model: "auto", Session: "s", Tools: 5, Turn: routing.TurnToolResult, ToolError: "exit code 2"}, label("simple").classify, false)
	d := pol.Decide(&routing.Request{Model: "auto", Session: "s", Tools: 5, Turn: routing.TurnToolResult}, label("simple").classify, true)
	if d.Session != routing.SessionKept || !strings.Contains(d.SessionReason, "never moves a session down") {
		t.Errorf("tool loop: %q %q", d.Session, d.SessionReason)
	}
	d = pol.Decide(&routing.Request{Model: "auto", Session: "s", Tools: 5, Turn: routing.TurnInstruction}, label("simple").classify, true)
	if d.Session != routing.SessionMovedDown || !strings.Contains(d.SessionReason, "moves down") {
		t.Errorf("new instruction: %q %q", d.Session, d.SessionReason)
	}
	// Explaining stored nothing: the session is still on complex.
	if d := pol.Decide(&routing.Request{Model: "auto", Session: "s", Tools: 5, Turn: routing.TurnToolResult}, label("simple").classify, false); d.Route != "complex" {
		t.Errorf("explain moved the session: %+v", d)
	}
}
