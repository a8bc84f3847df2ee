package agents_test

import (
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The trajectories: what real agents send past the first turn of a task,
// recorded by TestCaptureTrajectories into testdata/agents/sessions/
// trajectories (a folder of its own: the six files of
// testdata/agents/sessions are TestCaptureSessions', which
// bench/capacity replays and checks one for one).
//
//   - AGENT-debug.jsonl: debugTask, whose first tool call runs the tests
//     and gets a real failure (Python's unittest: a traceback, FAILED,
//     exit status 1), then the agent reads the parser, fixes it, adds a
//     regression test and runs the tests again, which pass.
//   - AGENT-continue.jsonl: two runs of the agent in one conversation,
//     the second continuing the first (Qwen Code's -c, OpenCode's run
//     --continue, pi's --continue, Claude Code's -c, Codex's exec resume
//     --last) with a second user instruction
//     (continueTasks).
//   - opencode-long.jsonl and pi-long.jsonl: five instructions in one
//     conversation (longTasks, each run continuing the last), four
//     routine ones, the fourth's first command failing (mv of a file
//     that is not there), then debugTask.
//   - qwen-code-memory.jsonl: Qwen Code answers a question without a
//     tool (question), and then runs its memory extractor, a sub-agent
//     of its own system prompt and six tools.
//   - pi-messages.jsonl and pi-responses.jsonl: pi's debugTask over the
//     Messages API (/v1/messages, an anthropic-messages provider) and the
//     Responses API.
//
// headers.json names, for each file, the headers its agent sent (any
// request's), for whoever documents the agents' session ids.

// debugTask is the harder task: a failing test to diagnose.
const debugTask = "Debug why the CSV parser in csvparse.py drops the last field: run its tests with `python3 -m unittest -v test_csvparse`, analyze the failing test step by step, then design and write a fix with a regression test."

// The debug task's work folder: a parser that forgets the field after the
// last comma, and its test.
const (
	csvParser = `"""A small CSV line parser."""


def parse_line(line):
    """Split one line of comma-separated values into its fields."""
    fields = []
    field = ""
    for ch in line:
        if ch == ",":
            fields.append(field)
            field = ""
        else:
            field += ch
    return fields
`
	csvTest = `import unittest

from csvparse import parse_line


class TestParse(unittest.TestCase):
    def test_three_fields(self):
        self.assertEqual(parse_line("a,b,c"), ["a", "b", "c"])


if __name__ == "__main__":
    unittest.main()
`
	testCommand = "python3 -m unittest -v test_csvparse"
	// The fix and the regression test, as edits: the text replaced and
	// its replacement.
	fixOld     = "    return fields\n"
	fixNew     = "    fields.append(field)\n    return fields\n"
	regressOld = "        self.assertEqual(parse_line(\"a,b,c\"), [\"a\", \"b\", \"c\"])\n"
	regressNew = regressOld + "\n    def test_last_field_kept(self):\n        self.assertEqual(parse_line(\"x,y,\"), [\"x\", \"y\", \"\"])\n        self.assertEqual(parse_line(\"only\"), [\"only\"])\n"
	debugDone  = "Fixed: parse_line never appended the field after the last comma. It now does, and test_last_field_kept guards it; both tests pass."
)

// debugWork writes the debug task's files into work.
func debugWork(t *testing.T, work string) {
	t.Helper()
	for name, text := range map[string]string{"csvparse.py": csvParser, "test_csvparse.py": csvTest} {
		if err := os.WriteFile(filepath.Join(work, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// debugFixed fails the test unless the agent's edits are in work and the
// tests pass.
func debugFixed(t *testing.T, work string) {
	t.Helper()
	hasFile(t, filepath.Join(work, "csvparse.py"), strings.Replace(csvParser, fixOld, fixNew, 1))
	hasFile(t, filepath.Join(work, "test_csvparse.py"), strings.Replace(csvTest, regressOld, regressNew, 1))
	cmd := exec.Command("python3", "-m", "unittest", "test_csvparse")
	cmd.Dir = work
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("the tests fail after the fix: %v\n%s", err, out)
	}
}

// The two instructions of a continued conversation, and what they leave.
var continueTasks = [2]string{
	"Create notes.txt with the lines alpha, beta and gamma.",
	"Now write count.sh, a shell script that prints how many lines each .txt file in this folder has, fewest first, and run it.",
}

const (
	countScript = "#!/bin/sh\n# How many lines each .txt file here has, fewest first.\nwc -l *.txt | grep -v ' total$' | sort -n\n"
	notesDone   = "notes.txt holds alpha, beta and gamma."
	countDone   = "count.sh prints each .txt file's line count, fewest first: notes.txt has 3 lines."
)

// The five instructions of a longer conversation: four routine ones (the
// fourth's first command fails: a typo), then debugTask.
var longTasks = [5]string{
	"Create notes.txt with the lines alpha, beta and gamma.",
	"Which word is on the second line of notes.txt?",
	"Change beta to delta in notes.txt.",
	"Rename notes.txt to words.txt.",
	debugTask,
}

// longTurns are the longer conversation's turns for an agent's tools:
// write, answer; answer; edit, answer; a mv that fails, the mv, answer;
// then the debug task's turns (fixAndTest as for debugTurns).
func longTurns(write, edit scriptedTurn, shell func(cmd string) scriptedTurn, read scriptedTurn, fix, regress scriptedTurn, fixAndTest bool) []scriptedTurn {
	turns := []scriptedTurn{
		write, say(notesDone),
		say("The second line of notes.txt is beta."),
		edit, say("notes.txt now reads alpha, delta, gamma."),
		shell("mv note.txt words.txt"), shell("mv notes.txt words.txt"), say("Renamed notes.txt to words.txt."),
	}
	return append(turns, debugTurns(shell(testCommand), read, fix, regress, fixAndTest)...)
}

// longCheck checks what the five instructions leave.
func longCheck(t *testing.T, work string) {
	t.Helper()
	hasFile(t, filepath.Join(work, "words.txt"), captureWant)
	debugFixed(t, work)
}

// question is answered without a tool: Qwen Code runs its memory
// extractor after a turn that ends with the answer to the user's message
// (not after a tool loop).
const (
	question       = "In two sentences: when should a script use Python's csv module instead of splitting each line on commas?"
	questionAnswer = "Use the csv module whenever a field may be quoted or hold a comma or a newline, or the file uses another delimiter: splitting on commas breaks on all of those. Plain splitting is only safe for simple data you write yourself, without quoting."
	nothingToSave  = "Nothing durable to save from this conversation."
)

// captured is one recording of TestCaptureTrajectories: its file's name
// (without .jsonl), the scenario's steps, the agent's runs, and the check
// of what it did.
type captured struct {
	name string
	// setup prepares the work folder; nil for none.
	setup func(t *testing.T, work string)
	// turns are the scripted turns: each one or more calls, or (with
	// no calls) the text.
	turns func(work string) []scriptedTurn
	run   func(t *testing.T, c *cluster, home, work string)
	check func(t *testing.T, work string)
}

// scriptedTurn is one turn of a scenario: calls, or text.
type scriptedTurn struct {
	calls []step
	text  string
}

// turnsScenario is stepScenario for turns of several calls and texts in
// the middle.
func turnsScenario(turns []scriptedTurn) string {
	type call struct {
		Tool      string         `json:"tool"`
		Arguments map[string]any `json:"arguments"`
	}
	type turn struct {
		Text  string `json:"text,omitempty"`
		Calls []call `json:"calls,omitempty"`
	}
	var sc struct {
		Turns []turn `json:"turns"`
	}
	for _, st := range turns {
		tn := turn{Text: st.text}
		for _, s := range st.calls {
			tn.Calls = append(tn.Calls, call{s.tool, s.args})
		}
		sc.Turns = append(sc.Turns, tn)
	}
	b, _ := json.Marshal(sc)
	return string(b)
}

// one is a turn of one call.
func one(tool string, args map[string]any) scriptedTurn {
	return scriptedTurn{calls: []step{{tool, args}}}
}

// say is a text turn.
func say(text string) scriptedTurn { return scriptedTurn{text: text} }

// debugTurns are the debug task's turns for an agent's tools: run the
// tests (a failure), read the parser, fix it, add the regression test,
// run the tests again (they pass), answer. fixAndTest makes the fix and
// the test one turn of two calls (for Qwen Code, whose requests are large).
func debugTurns(shell, read, fix, regress scriptedTurn, fixAndTest bool) []scriptedTurn {
	if fixAndTest {
		both := scriptedTurn{calls: append(slices.Clone(fix.calls), regress.calls...)}
		return []scriptedTurn{shell, read, both, shell, say(debugDone)}
	}
	return []scriptedTurn{shell, read, fix, regress, shell, say(debugDone)}
}

// continueChecks checks what the two continued instructions leave.
func continueCheck(t *testing.T, work string) {
	t.Helper()
	hasFile(t, filepath.Join(work, "notes.txt"), "alpha\nbeta\ngamma\n")
	hasFile(t, filepath.Join(work, "count.sh"), countScript)
}

// TestCaptureTrajectories records what real agents send over a harder
// task and across two instructions (see the list above) into
// testdata/agents/sessions/trajectories, one file per recording; as
// TestCaptureSessions, each agent runs against a cluster whose replicas
// script its own tools' calls, and side requests are recorded as they
// come. It runs only with SWITCHYARD_CAPTURE=1, as it rewrites those
// files; -run TestCaptureTrajectories/NAME records one:
//
//	npm ci --prefix testdata/agents && npm ci --prefix testdata/agents/capture
//	SWITCHYARD_CAPTURE=1 go test ./agents/ -run TestCaptureTrajectories -timeout 30m
func TestCaptureTrajectories(t *testing.T) {
	if os.Getenv("SWITCHYARD_CAPTURE") != "1" {
		t.Skip("set SWITCHYARD_CAPTURE=1 to rewrite testdata/agents/sessions/trajectories")
	}
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed: the debug task's tests are Python's")
	}
	dir := filepath.Join(agentsDir(t), "sessions", "trajectories")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	const timeout = 4 * time.Minute
	headers := map[string][]string{}
	for _, a := range []captured{
		{"opencode-debug", debugWork, func(work string) []scriptedTurn {
			f := func(n string) string { return filepath.Join(work, n) }
			return debugTurns(
				one("bash", map[string]any{"command": testCommand, "description": "Run the parser's tests"}),
				one("read", map[string]any{"filePath": f("csvparse.py")}),
				one("edit", map[string]any{"filePath": f("csvparse.py"), "oldString": fixOld, "newString": fixNew}),
				one("edit", map[string]any{"filePath": f("test_csvparse.py"), "oldString": regressOld, "newString": regressNew}),
				false)
		}, func(t *testing.T, c *cluster, home, work string) {
			openCodeIn(t, c, home, work, timeout, "run", "--format", "json", debugTask)
		}, debugFixed},
		{"qwen-code-debug", debugWork, func(work string) []scriptedTurn {
			f := func(n string) string { return filepath.Join(work, n) }
			// Qwen Code edits only files read in the session: it reads
			// both at once.
			return debugTurns(
				one("run_shell_command", map[string]any{"command": testCommand, "description": "Run the parser's tests"}),
				scriptedTurn{calls: []step{{"read_file", map[string]any{"file_path": f("csvparse.py")}}, {"read_file", map[string]any{"file_path": f("test_csvparse.py")}}}},
				one("edit", map[string]any{"file_path": f("csvparse.py"), "old_string": fixOld, "new_string": fixNew}),
				one("edit", map[string]any{"file_path": f("test_csvparse.py"), "old_string": regressOld, "new_string": regressNew}),
				true)
		}, func(t *testing.T, c *cluster, home, work string) {
			qwenCodeIn(t, c, home, work, timeout, "-p", debugTask)
		}, debugFixed},
		{"pi-debug", debugWork, piDebugTurns, func(t *testing.T, c *cluster, home, work string) {
			piIn(t, c, home, work, "openai-completions", timeout, "--no-session", "-p", debugTask)
		}, debugFixed},
		{"cline-debug", debugWork, func(work string) []scriptedTurn {
			f := func(n string) string { return filepath.Join(work, n) }
			return debugTurns(
				one("run_commands", map[string]any{"commands": []any{testCommand}}),
				one("read_files", map[string]any{"files": []any{map[string]any{"path": f("csvparse.py")}}}),
				one("editor", map[string]any{"path": f("csvparse.py"), "old_text": fixOld, "new_text": fixNew}),
				one("editor", map[string]any{"path": f("test_csvparse.py"), "old_text": regressOld, "new_text": regressNew}),
				false)
		}, func(t *testing.T, c *cluster, home, work string) {
			cline(t, c, work, debugTask, timeout)
		}, debugFixed},
		{"claude-code-debug", debugWork, func(work string) []scriptedTurn {
			f := func(n string) string { return filepath.Join(work, n) }
			// As Qwen Code, Claude Code edits only files it has read.
			return debugTurns(
				one("Bash", map[string]any{"command": testCommand, "description": "Run the parser's tests"}),
				scriptedTurn{calls: []step{{"Read", map[string]any{"file_path": f("csvparse.py")}}, {"Read", map[string]any{"file_path": f("test_csvparse.py")}}}},
				one("Edit", map[string]any{"file_path": f("csvparse.py"), "old_string": fixOld, "new_string": fixNew}),
				one("Edit", map[string]any{"file_path": f("test_csvparse.py"), "old_string": regressOld, "new_string": regressNew}),
				false)
		}, func(t *testing.T, c *cluster, home, work string) {
			// Its four tools only (--tools), as its whole set makes each
			// request over 100 kB; its quick calls on the small model are
			// allowed, as in TestCaptureSessions.
			claude(t, c, work, debugTask, timeout, []string{"DISABLE_NON_ESSENTIAL_MODEL_CALLS="}, "--tools", "Bash,Read,Edit,Write")
		}, debugFixed},
		{"codex-debug", debugWork, func(string) []scriptedTurn {
			return debugTurns(
				one("exec_command", map[string]any{"cmd": testCommand}),
				one("exec_command", map[string]any{"cmd": "cat csvparse.py"}),
				one("exec_command", map[string]any{"cmd": `sed -i 's/^    return fields$/    fields.append(field)\n    return fields/' csvparse.py`}),
				one("exec_command", map[string]any{"cmd": "python3 - <<'EOF'\nimport pathlib\np = pathlib.Path('test_csvparse.py')\np.write_text(p.read_text().replace(" + pyString(regressOld) + ", " + pyString(regressNew) + ", 1))\nEOF"}),
				false)
		}, func(t *testing.T, c *cluster, home, work string) {
			codex(t, c, work, debugTask, timeout)
		}, debugFixed},
		{"pi-messages", debugWork, piDebugTurns, func(t *testing.T, c *cluster, home, work string) {
			piIn(t, c, home, work, "anthropic-messages", timeout, "--no-session", "-p", debugTask)
		}, debugFixed},
		{"pi-responses", debugWork, piDebugTurns, func(t *testing.T, c *cluster, home, work string) {
			piIn(t, c, home, work, "openai-responses", timeout, "--no-session", "-p", debugTask)
		}, debugFixed},
		{"opencode-long", debugWork, func(work string) []scriptedTurn {
			f := func(n string) string { return filepath.Join(work, n) }
			return longTurns(
				one("write", map[string]any{"filePath": f("notes.txt"), "content": "alpha\nbeta\ngamma\n"}),
				one("edit", map[string]any{"filePath": f("notes.txt"), "oldString": "beta", "newString": "delta"}),
				func(cmd string) scriptedTurn {
					return one("bash", map[string]any{"command": cmd, "description": "Run " + cmd})
				},
				one("read", map[string]any{"filePath": f("csvparse.py")}),
				one("edit", map[string]any{"filePath": f("csvparse.py"), "oldString": fixOld, "newString": fixNew}),
				one("edit", map[string]any{"filePath": f("test_csvparse.py"), "oldString": regressOld, "newString": regressNew}),
				true)
		}, func(t *testing.T, c *cluster, home, work string) {
			for i, task := range longTasks {
				args := []string{"run", "--format", "json", task}
				if i > 0 {
					args = []string{"run", "--format", "json", "--continue", task}
				}
				openCodeIn(t, c, home, work, timeout, args...)
			}
		}, longCheck},
		{"pi-long", debugWork, func(string) []scriptedTurn {
			return longTurns(
				one("write", map[string]any{"path": "notes.txt", "content": "alpha\nbeta\ngamma\n"}),
				one("edit", map[string]any{"path": "notes.txt", "edits": []any{map[string]any{"oldText": "beta", "newText": "delta"}}}),
				func(cmd string) scriptedTurn { return one("bash", map[string]any{"command": cmd}) },
				one("read", map[string]any{"path": "csvparse.py"}),
				one("edit", map[string]any{"path": "csvparse.py", "edits": []any{map[string]any{"oldText": fixOld, "newText": fixNew}}}),
				one("edit", map[string]any{"path": "test_csvparse.py", "edits": []any{map[string]any{"oldText": regressOld, "newText": regressNew}}}),
				false)
		}, func(t *testing.T, c *cluster, home, work string) {
			sessions := filepath.Join(home, "pi-sessions")
			for i, task := range longTasks {
				args := []string{"--session-dir", sessions, "-p", task}
				if i > 0 {
					args = []string{"--session-dir", sessions, "--continue", "-p", task}
				}
				piIn(t, c, home, work, "openai-completions", timeout, args...)
			}
		}, longCheck},
		{"qwen-code-memory", nil, func(string) []scriptedTurn {
			// The answer, then the memory extractor's (it forks the
			// conversation: its turn 2).
			return []scriptedTurn{say(questionAnswer), say(nothingToSave)}
		}, func(t *testing.T, c *cluster, home, work string) {
			qwenCodeIn(t, c, home, work, timeout, "-p", question)
		}, func(*testing.T, string) {}},
		{"qwen-code-continue", nil, func(work string) []scriptedTurn {
			f := func(n string) string { return filepath.Join(work, n) }
			return []scriptedTurn{
				one("write_file", map[string]any{"file_path": f("notes.txt"), "content": "alpha\nbeta\ngamma\n"}),
				say(notesDone),
				one("write_file", map[string]any{"file_path": f("count.sh"), "content": countScript}),
				one("run_shell_command", map[string]any{"command": "sh count.sh", "description": "Run count.sh"}),
				say(countDone),
			}
		}, func(t *testing.T, c *cluster, home, work string) {
			qwenCodeIn(t, c, home, work, timeout, "-p", continueTasks[0])
			qwenCodeIn(t, c, home, work, timeout, "-c", "-p", continueTasks[1])
		}, continueCheck},
		{"opencode-continue", nil, func(work string) []scriptedTurn {
			f := func(n string) string { return filepath.Join(work, n) }
			return []scriptedTurn{
				one("write", map[string]any{"filePath": f("notes.txt"), "content": "alpha\nbeta\ngamma\n"}),
				say(notesDone),
				one("write", map[string]any{"filePath": f("count.sh"), "content": countScript}),
				one("bash", map[string]any{"command": "sh count.sh", "description": "Run count.sh"}),
				say(countDone),
			}
		}, func(t *testing.T, c *cluster, home, work string) {
			openCodeIn(t, c, home, work, timeout, "run", "--format", "json", continueTasks[0])
			openCodeIn(t, c, home, work, timeout, "run", "--format", "json", "--continue", continueTasks[1])
		}, continueCheck},
		{"claude-code-continue", nil, func(work string) []scriptedTurn {
			f := func(n string) string { return filepath.Join(work, n) }
			return []scriptedTurn{
				one("Write", map[string]any{"file_path": f("notes.txt"), "content": "alpha\nbeta\ngamma\n"}),
				say(notesDone),
				one("Write", map[string]any{"file_path": f("count.sh"), "content": countScript}),
				one("Bash", map[string]any{"command": "sh count.sh", "description": "Run count.sh"}),
				say(countDone),
			}
		}, func(t *testing.T, c *cluster, home, work string) {
			// Sessions kept (no --no-session-persistence), for -c.
			env := []string{"DISABLE_NON_ESSENTIAL_MODEL_CALLS="}
			claudeIn(t, c, home, work, continueTasks[0], timeout, env, "--tools", "Bash,Read,Edit,Write")
			claudeIn(t, c, home, work, continueTasks[1], timeout, env, "--tools", "Bash,Read,Edit,Write", "-c")
		}, continueCheck},
		{"codex-continue", nil, func(string) []scriptedTurn {
			return []scriptedTurn{
				one("exec_command", map[string]any{"cmd": "printf 'alpha\\nbeta\\ngamma\\n' > notes.txt"}),
				say(notesDone),
				one("exec_command", map[string]any{"cmd": "cat > count.sh <<'EOF'\n" + countScript + "EOF"}),
				one("exec_command", map[string]any{"cmd": "sh count.sh"}),
				say(countDone),
			}
		}, func(t *testing.T, c *cluster, home, work string) {
			codexIn(t, c, home, work, []string{continueTasks[0]}, timeout)
			codexIn(t, c, home, work, []string{"resume", "--last", continueTasks[1]}, timeout)
		}, continueCheck},
		{"pi-continue", nil, func(string) []scriptedTurn {
			return []scriptedTurn{
				one("write", map[string]any{"path": "notes.txt", "content": "alpha\nbeta\ngamma\n"}),
				say(notesDone),
				one("write", map[string]any{"path": "count.sh", "content": countScript}),
				one("bash", map[string]any{"command": "sh count.sh"}),
				say(countDone),
			}
		}, func(t *testing.T, c *cluster, home, work string) {
			sessions := filepath.Join(home, "pi-sessions")
			piIn(t, c, home, work, "openai-completions", timeout, "--session-dir", sessions, "-p", continueTasks[0])
			piIn(t, c, home, work, "openai-completions", timeout, "--session-dir", sessions, "--continue", "-p", continueTasks[1])
		}, continueCheck},
	} {
		t.Run(a.name, func(t *testing.T) {
			work, home := t.TempDir(), t.TempDir()
			if a.setup != nil {
				a.setup(t, work)
			}
			c := startCluster(t, turnsScenario(a.turns(work)))
			rc, rec := recordThrough(t, c)
			a.run(t, rc, home, work)
			a.check(t, work)
			tmp, _ := filepath.Abs(filepath.Dir(work))
			slug := strings.ReplaceAll(work, "/", "-")
			file := filepath.Join(dir, a.name+".jsonl")
			rec.write(t, file, [][2]string{{work, "$WORK"}, {slug, "-$WORK"}, {home, "$HOME"}, {tmp, "$TMP"}, {agentsDir(t), "$AGENTS"}})
			if b, err := os.ReadFile(file); err != nil || strings.Contains(string(b), "TestCaptureTrajectories") {
				t.Fatalf("%s names the test's temporary folder (%v)", file, err)
			}
			headers[a.name+".jsonl"] = slices.Sorted(maps.Keys(rec.allNames))
			t.Logf("%s: %d requests recorded; the headers sent: %q", a.name, len(rec.reqs), headers[a.name+".jsonl"])
		})
	}
	// headers.json keeps the files not recorded this time.
	path := filepath.Join(dir, "headers.json")
	all := map[string][]string{}
	if b, err := os.ReadFile(path); err == nil {
		_ = json.Unmarshal(b, &all)
	}
	maps.Copy(all, headers)
	b, _ := json.MarshalIndent(all, "", "  ")
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}

// piDebugTurns are the debug task's turns for pi's tools, over any API.
func piDebugTurns(string) []scriptedTurn {
	return debugTurns(
		one("bash", map[string]any{"command": testCommand}),
		one("read", map[string]any{"path": "csvparse.py"}),
		one("edit", map[string]any{"path": "csvparse.py", "edits": []any{map[string]any{"oldText": fixOld, "newText": fixNew}}}),
		one("edit", map[string]any{"path": "test_csvparse.py", "edits": []any{map[string]any{"oldText": regressOld, "newText": regressNew}}}),
		false)
}

// pyString is s as a Python string literal (JSON's escapes are Python's
// for this text).
func pyString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
