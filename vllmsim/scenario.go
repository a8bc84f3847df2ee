package vllmsim

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
)

// Scenario scripts a Server's answers turn by turn, for tests and demos. A
// conversation's turn is the number of the answer the model is about to
// give: 1 + the assistant answers the conversation already holds (chat
// assistant messages; Responses output turns, function_call items made
// together counting once, those of previous_response_id included; Messages
// assistant messages). Turns[i] answers turn i+1; a turn the scenario does
// not script (past the list, or an empty entry) gets the simulator's own
// answer, with MaxToolRounds in place of DefaultMaxToolRounds.
//
// A scripted turn is answered as written, whatever the request's tools,
// tool_choice and parallel_tool_calls, at the profile's timing: a text
// turn's tokens are its words, cut by max_tokens; calls are made in order.
//
// In a file (YAML, or JSON, which is YAML too; LoadScenario):
//
//	max_tool_rounds: 2
//	turns:
//	  - calls:                       # turn 1: two calls in one answer
//	      - tool: Read
//	        arguments: {file_path: /tmp/notes.txt}
//	      - tool: Bash               # arguments built from its schema
//	  - {}                           # turn 2: the simulator's own answer
//	  - text: "Done: the notes are summarized."
type Scenario struct {
	// MaxToolRounds replaces DefaultMaxToolRounds for the turns the
	// scenario does not script; nil keeps the default. 0 answers every
	// such turn with text unless tool_choice forces a call.
	MaxToolRounds *int `json:"max_tool_rounds,omitempty" yaml:"max_tool_rounds,omitempty"`
	// Turns are the scripted turns, from turn 1.
	Turns []Turn `json:"turns,omitempty" yaml:"turns,omitempty"`
}

// Turn is one scripted answer: Text, or Calls, or neither (the
// simulator's own answer); not both.
type Turn struct {
	// Text is the answer's text.
	Text string `json:"text,omitempty" yaml:"text,omitempty"`
	// Calls are the tool calls the answer makes, in order.
	Calls []Call `json:"calls,omitempty" yaml:"calls,omitempty"`
}

// Call is one scripted tool call.
type Call struct {
	// Tool is the name of the tool called. It need not be one the request
	// offers.
	Tool string `json:"tool" yaml:"tool"`
	// Arguments are the call's arguments, written as a JSON object with
	// its keys sorted. nil builds them from the schema of the request's
	// tool of that name (as unscripted calls are built), or "{}" when the
	// request offers none.
	Arguments map[string]any `json:"arguments,omitempty" yaml:"arguments,omitempty"`
}

// WithScenario scripts the Server's answers with sc (see Scenario). New
// panics if sc.Validate fails: load scenario files with LoadScenario.
func WithScenario(sc Scenario) Option {
	return func(s *Server) {
		if err := sc.Validate(); err != nil {
			panic("vllmsim: " + err.Error())
		}
		s.scenario = newScript(sc)
	}
}

// scenarioProblem is one invalid field of a scenario: its path in the
// file ("$.turns[1].calls[0].tool") and what is wrong with it.
type scenarioProblem struct {
	path, msg string
}

func (sc Scenario) problems() []scenarioProblem {
	var out []scenarioProblem
	if sc.MaxToolRounds != nil && *sc.MaxToolRounds < 0 {
		out = append(out, scenarioProblem{"$.max_tool_rounds", fmt.Sprintf("max_tool_rounds %d: must be >= 0", *sc.MaxToolRounds)})
	}
	for i, t := range sc.Turns {
		at := fmt.Sprintf("$.turns[%d]", i)
		if t.Text != "" && len(t.Calls) > 0 {
			out = append(out, scenarioProblem{at, fmt.Sprintf("turns[%d]: has both text and calls (a turn is one or the other)", i)})
		}
		for j, c := range t.Calls {
			cat := fmt.Sprintf("%s.calls[%d]", at, j)
			if c.Tool == "" {
				out = append(out, scenarioProblem{cat, fmt.Sprintf("turns[%d].calls[%d]: tool: required", i, j)})
			}
			if c.Arguments != nil {
				if _, err := json.Marshal(c.Arguments); err != nil {
					out = append(out, scenarioProblem{cat + ".arguments", fmt.Sprintf("turns[%d].calls[%d]: arguments: not JSON: %v", i, j, err)})
				}
			}
		}
	}
	return out
}

// Validate reports every invalid field of sc, joined.
func (sc Scenario) Validate() error {
	var errs []error
	for _, p := range sc.problems() {
		errs = append(errs, errors.New("scenario: "+p.msg))
	}
	return errors.Join(errs...)
}

// LoadScenario reads the scenario file at path (see ParseScenario).
func LoadScenario(path string) (Scenario, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Scenario{}, fmt.Errorf("read scenario: %w", err)
	}
	return ParseScenario(path, data)
}

// ParseScenario decodes a scenario file named file, strictly: unknown and
// duplicate keys are errors, as is every invalid field (joined), each as
// FILE:LINE:COL: message.
func ParseScenario(file string, data []byte) (sc Scenario, err error) {
	defer func() {
		// A panic inside goccy/go-yaml is a bad file, not a crash.
		if r := recover(); r != nil {
			sc, err = Scenario{}, fmt.Errorf("%s: cannot decode: %v", file, r)
		}
	}()
	if err := yaml.UnmarshalWithOptions(data, &sc, yaml.DisallowUnknownField()); err != nil {
		var ye yaml.Error
		if errors.As(err, &ye) {
			if tk := ye.GetToken(); tk != nil && tk.Position != nil {
				return Scenario{}, fmt.Errorf("%s:%d:%d: %s", file, tk.Position.Line, tk.Position.Column, ye.GetMessage())
			}
		}
		return Scenario{}, fmt.Errorf("%s: %w", file, err)
	}
	problems := sc.problems()
	if len(problems) == 0 {
		return sc, nil
	}
	f, _ := parser.ParseBytes(data, 0)
	errs := make([]error, len(problems))
	for i, p := range problems {
		line, col := 1, 1
		if path, err := yaml.PathString(p.path); err == nil && f != nil {
			if n, err := path.FilterFile(f); err == nil && n != nil {
				line, col = nodePosition(n)
			}
		}
		errs[i] = fmt.Errorf("%s:%d:%d: %s", file, line, col, p.msg)
	}
	return Scenario{}, errors.Join(errs...)
}

// nodePosition is where node starts: a mapping's first key.
func nodePosition(n ast.Node) (line, col int) {
	if m, ok := n.(*ast.MappingNode); ok && len(m.Values) > 0 {
		n = m.Values[0].Key
	}
	if tk := n.GetToken(); tk != nil && tk.Position != nil {
		return tk.Position.Line, tk.Position.Column
	}
	return 1, 1
}

// script is a validated Scenario ready to answer: texts cut into tokens,
// arguments encoded. The nil *script scripts nothing.
type script struct {
	maxRounds int
	turns     []scriptTurn
}

type scriptTurn struct {
	text  []string     // tokens of a text turn
	calls []scriptCall // nil for a text turn
}

type scriptCall struct {
	tool string
	args string // JSON; "" builds them from the tool's schema
}

func newScript(sc Scenario) *script {
	s := &script{maxRounds: DefaultMaxToolRounds}
	if sc.MaxToolRounds != nil {
		s.maxRounds = *sc.MaxToolRounds
	}
	for _, t := range sc.Turns {
		var st scriptTurn
		switch {
		case len(t.Calls) > 0:
			for _, c := range t.Calls {
				call := scriptCall{tool: c.Tool}
				if c.Arguments != nil {
					b, _ := json.Marshal(c.Arguments) // checked by Validate
					call.args = string(b)
				}
				st.calls = append(st.calls, call)
			}
		case t.Text != "":
			st.text = splitText(t.Text)
		}
		s.turns = append(s.turns, st)
	}
	return s
}

// turn is the scripted answer of turn n (from 1), if the scenario has one.
func (s *script) turn(n int) (scriptTurn, bool) {
	if s == nil || n < 1 || n > len(s.turns) {
		return scriptTurn{}, false
	}
	t := s.turns[n-1]
	return t, t.calls != nil || t.text != nil
}

// maxToolRounds is the tool rounds an unscripted conversation gets.
func (s *script) maxToolRounds() int {
	if s == nil {
		return DefaultMaxToolRounds
	}
	return s.maxRounds
}
