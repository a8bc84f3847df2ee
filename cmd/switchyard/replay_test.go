package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	replayConfig = "../../testdata/agents/replay.yaml"
	sessions     = "../../testdata/agents/sessions/"
)

// onePolicyEdit writes replay.yaml with one rule added at the top: pi's
// requests (its four tools) go to qwen.
func onePolicyEdit(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(replayConfig)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(string(data), "\nroutes:", "\nroutes:\n  - {name: four-tools, when: {tools: 4}, to: qwen}", 1)
	if text == string(data) {
		t.Fatal("no routes: in the replay config")
	}
	path := filepath.Join(t.TempDir(), "new.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestReplayAgainst: two policies that differ in one rule: replay lists
// exactly the turns that rule moves (pi's four, not OpenCode's), and
// exits 4 past --max-change, 0 within it.
func TestReplayAgainst(t *testing.T) {
	newPolicy := onePolicyEdit(t)
	args := []string{"replay", "--config", newPolicy, "--against", replayConfig, "--json", sessions + "pi.jsonl", sessions + "opencode.jsonl"}
	code, out, errs := runCLI(t, args...)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var doc struct {
		Changes []struct {
			Capture string
			Line    int
		}
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	var got []string
	for _, c := range doc.Changes {
		got = append(got, fmt.Sprintf("%s:%d", c.Capture, c.Line))
	}
	if strings.Join(got, " ") != "pi:1 pi:2 pi:3 pi:4" {
		t.Errorf("changed turns %v, want pi's four", got)
	}
	for _, tc := range []struct {
		max  string
		code int
	}{{"0", exitChanged}, {"0.5", exitChanged}, {"1", exitOK}} {
		code, out, errs := runCLI(t, "replay", "--config", newPolicy, "--against", replayConfig, "--max-change", tc.max, sessions+"pi.jsonl", sessions+"opencode.jsonl")
		if code != tc.code {
			t.Errorf("--max-change %s: exit %d, want %d\n%s%s", tc.max, code, tc.code, out, errs)
		}
		if !strings.Contains(out, "4 turns change route") || !strings.Contains(out, "pi line 1: default (minicpm) -> four-tools (qwen)") {
			t.Errorf("--max-change %s: the table does not list the changes:\n%s", tc.max, out)
		}
	}
}

// TestReplayBadCaptures: a truncated line, a line that is not JSON and a
// line of another format name their file and line; the rest is replayed
// (exit 1); a capture with nothing to replay is an error.
func TestReplayBadCaptures(t *testing.T) {
	good, err := os.ReadFile(sessions + "pi.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(good)), "\n")
	bad := strings.Join([]string{lines[0], lines[1][:len(lines[1])/2], "not json", `{"version":2,"request":{}}`, lines[2]}, "\n") + "\n"
	path := filepath.Join(t.TempDir(), "mixed.jsonl")
	if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runCLI(t, "replay", "--config", replayConfig, path)
	if code != exitInvalid {
		t.Errorf("exit %d, want %d", code, exitInvalid)
	}
	for _, want := range []string{path + ":2: not a captured request", path + ":3: not a captured request", path + ":4: not a captured request"} {
		if !strings.Contains(errs, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errs)
		}
	}
	if !strings.Contains(out, "mixed ") || !strings.Contains(out, "        2 ") {
		t.Errorf("the two good lines were not replayed:\n%s", out)
	}
	empty := filepath.Join(t.TempDir(), "empty.jsonl")
	os.WriteFile(empty, nil, 0o644)
	if code, _, errs := runCLI(t, "replay", "--config", replayConfig, empty); code != exitInvalid || !strings.Contains(errs, "nothing was replayed") {
		t.Errorf("an empty capture: exit %d: %s", code, errs)
	}
	if code, _, errs := runCLI(t, "replay", "--config", replayConfig, "--max-change", "0.1", path); code != exitUsage || !strings.Contains(errs, "--max-change needs --against") {
		t.Errorf("--max-change alone: exit %d: %s", code, errs)
	}
}

// TestReplayConfigIsTheReference: testdata/agents/replay.yaml is the
// reference policy with two models entries for the captures, nothing else.
func TestReplayConfigIsTheReference(t *testing.T) {
	ref, err := os.ReadFile("../../examples/policies/dgx-spark-8node.yaml")
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(replayConfig)
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, line := range strings.Split(string(got), "\n") {
		if strings.Contains(line, `{name: "*", route: policy}`) || strings.Contains(line, "{name: agent-small,") {
			continue
		}
		kept = append(kept, line)
	}
	body := strings.Join(kept, "\n")
	if i := strings.Index(body, "# Switchyard's reference deployment"); i < 0 || body[i:] != string(ref) {
		t.Errorf("%s differs from the reference policy beyond its two models entries", replayConfig)
	}
}
