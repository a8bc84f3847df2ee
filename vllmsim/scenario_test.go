package vllmsim_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard/switchyard/vllmsim"
)

// TestLoadScenario: every fixture loads or fails as its name says, each
// error at its place in the file.
func TestLoadScenario(t *testing.T) {
	one, ten := 1, 10
	good := map[string]vllmsim.Scenario{
		"calls-and-text.good.yaml": {MaxToolRounds: &one, Turns: []vllmsim.Turn{
			{Calls: []vllmsim.Call{{Tool: "Write", Arguments: map[string]any{"file_path": "/tmp/a.txt", "content": "hi"}}, {Tool: "Bash"}}},
			{},
			{Text: "All done."},
		}},
		"json.good.json": {Turns: []vllmsim.Turn{{Calls: []vllmsim.Call{{Tool: "Read",
			Arguments: map[string]any{"file_path": "/tmp/a.txt", "limit": uint64(ten), "nested": map[string]any{"deep": []any{uint64(1), true, nil}}}}}}}},
		"empty.good.yaml": {},
	}
	bad := map[string][]string{
		"unknown-key.bad.yaml":   {`unknown-key.bad.yaml:3:5: unknown field "delay"`},
		"duplicate-key.bad.yaml": {`duplicate-key.bad.yaml:3:5: mapping key "text" already defined at [2:5]`},
		"invalid.bad.yaml": {
			"invalid.bad.yaml:1:18: max_tool_rounds -1: must be >= 0",
			"invalid.bad.yaml:3:5: turns[0]: has both text and calls (a turn is one or the other)",
			"invalid.bad.yaml:7:9: turns[1].calls[0]: tool: required",
		},
		"wrong-type.bad.yaml": {"wrong-type.bad.yaml:2:12: string was used where sequence is expected"},
	}
	files, err := filepath.Glob("testdata/scenarios/*")
	if err != nil || len(files) != len(good)+len(bad) {
		t.Fatalf("fixtures %v (%v): want the %d in the tables", files, err, len(good)+len(bad))
	}
	for _, path := range files {
		name := filepath.Base(path)
		t.Run(name, func(t *testing.T) {
			sc, err := vllmsim.LoadScenario(path)
			if want, ok := good[name]; ok {
				if err != nil {
					t.Fatalf("error %v", err)
				}
				if diff := cmp.Diff(want, sc); diff != "" {
					t.Errorf("scenario (-want +got):\n%s", diff)
				}
				if err := sc.Validate(); err != nil {
					t.Errorf("Validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("loaded %+v, want errors", sc)
			}
			got := strings.Split(strings.ReplaceAll(err.Error(), "testdata/scenarios/", ""), "\n")
			if len(got) != len(bad[name]) {
				t.Fatalf("errors:\n%s\nwant %d: %q", err, len(bad[name]), bad[name])
			}
			for i, w := range bad[name] {
				if !strings.HasPrefix(got[i], w) {
					t.Errorf("error %d %q, want it to start %q", i, got[i], w)
				}
			}
		})
	}
}

// TestExampleScenarios: every file in examples/scenarios loads.
func TestExampleScenarios(t *testing.T) {
	files, _ := filepath.Glob("../examples/scenarios/*")
	if len(files) == 0 {
		t.Fatal("no example scenarios")
	}
	for _, path := range files {
		if _, err := vllmsim.LoadScenario(path); err != nil {
			t.Errorf("%s: %v", path, err)
		}
	}
}

// TestScenarioValidate: an invalid scenario given in Go is refused by
// Validate and by WithScenario.
func TestScenarioValidate(t *testing.T) {
	sc := vllmsim.Scenario{Turns: []vllmsim.Turn{{Text: "a", Calls: []vllmsim.Call{{}}}}}
	err := sc.Validate()
	want := "scenario: turns[0]: has both text and calls (a turn is one or the other)\nscenario: turns[0].calls[0]: tool: required"
	if err == nil || err.Error() != want {
		t.Errorf("Validate: %v, want %q", err, want)
	}
	defer func() {
		if recover() == nil {
			t.Error("WithScenario accepted an invalid scenario")
		}
	}()
	vllmsim.New(vllmsim.Profile{Model: testModel}, vllmsim.WithScenario(sc))
}

// TestScenarioTurns: scripted turns are answered as written in all three
// APIs, stream and non-stream; unscripted ones by the simulator's rules
// with the scenario's max_tool_rounds.
func TestScenarioTurns(t *testing.T) {
	sc, err := vllmsim.LoadScenario("testdata/scenarios/calls-and-text.good.yaml")
	if err != nil {
		t.Fatal(err)
	}
	sc.Turns = append(sc.Turns, vllmsim.Turn{}, vllmsim.Turn{Text: "one two three four"})
	_, ts := start(t, vllmsim.Profile{DefaultMaxTokens: 5}, vllmsim.WithScenario(sc))
	tools := []string{"Read", "Bash"}
	tests := []struct {
		name string
		conv conversation
		want agentAnswer
	}{
		{"turn 1: the calls, Bash's arguments from its schema", conversation{msgs: msgs(user("go")), tools: tools},
			agentAnswer{Calls: []gotCall{{"Write", `{"content":"hi","file_path":"/tmp/a.txt"}`}, {"Bash", `{"command":"ls -la"}`}}}},
		{"turn 1 without tools: the calls still", conversation{msgs: msgs(user("go"))},
			agentAnswer{Calls: []gotCall{{"Write", `{"content":"hi","file_path":"/tmp/a.txt"}`}, {"Bash", `{}`}}}},
		{"turn 3: the text", conversation{msgs: msgs(user("go"), called("Read"), results(), said("ok"), user("more")), tools: tools},
			agentAnswer{Text: "All done."}},
		{"turn 3, tool_choice none: the text", conversation{msgs: msgs(user("go"), said("a"), user("x"), said("b"), user("y")), toolChoice: "none", tools: tools},
			agentAnswer{Text: "All done."}},
		{"turn 5: the text, shorter than the usual answer", conversation{msgs: msgs(user("go"), said("a"), user("x"), said("b"), user("y"), said("c"), user("z"), said("d"), user("w")), tools: tools},
			agentAnswer{Text: "one two three four"}},
	}
	for _, tc := range tests {
		for _, api := range agentAPIs {
			t.Run(tc.name+"/"+string(api)[4:], func(t *testing.T) {
				for _, stream := range []bool{false, true} {
					got := ask(t, ts, api, tc.conv.body(api, stream), stream)
					if api == messagesAPI {
						for i, c := range tc.want.Calls { // input is a JSON object, not a string
							if c.Args != got.Calls[i].Args && strings.ReplaceAll(got.Calls[i].Args, " ", "") == c.Args {
								got.Calls[i].Args = c.Args
							}
						}
					}
					if diff := cmp.Diff(tc.want, got); diff != "" {
						t.Errorf("stream %v: answer (-want +got):\n%s", stream, diff)
					}
				}
			})
		}
	}

	// Unscripted turns: turn 2 after a tool result gets text; turn 4 after
	// the scenario's one tool round gets text on a user turn. (Responses
	// count a run of assistant items as one turn, hence the user messages
	// between the assistant texts.)
	for _, api := range agentAPIs {
		for _, conv := range []conversation{
			{msgs: msgs(user("go"), called("Read"), results()), tools: tools},
			{msgs: msgs(user("go"), called("Read"), results(), said("a"), user("x"), said("b"), user("again")), tools: tools},
		} {
			if got := ask(t, ts, api, conv.body(api, false), false); len(got.Calls) != 0 || got.Text == "" || got.Text == "All done." {
				t.Errorf("%s: unscripted turn got %+v, want the simulator's text", api, got)
			}
		}
	}
}

// TestScenarioTextCut: a scripted text longer than max_tokens is cut,
// finish "length".
func TestScenarioTextCut(t *testing.T) {
	_, ts := start(t, vllmsim.Profile{}, vllmsim.WithScenario(vllmsim.Scenario{Turns: []vllmsim.Turn{{Text: "one two three"}}}))
	_, b := post(t, ts, "/v1/chat/completions", `{"max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`)
	if got := field(string(b), "choices.0.message.content").Str; got != "one two" || field(string(b), "choices.0.finish_reason").Str != "length" ||
		field(string(b), "usage.completion_tokens").Int() != 2 {
		t.Errorf("answer %s: want %q cut at 2 tokens", b, "one two")
	}
	_, b = post(t, ts, "/v1/chat/completions", `{"max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`)
	if got := field(string(b), "choices.0.message.content").Str; got != "one two three" || field(string(b), "choices.0.finish_reason").Str != "stop" {
		t.Errorf("answer %s: want the whole text, finish stop", b)
	}
}
