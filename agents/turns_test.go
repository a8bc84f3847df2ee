package agents_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/switchyard/switchyard/internal/capture"
)

// labelledTurn is one line of testdata/agents/turns.jsonl: a captured
// request (a line of a file under testdata/agents/sessions) labelled by
// hand as the reference policy's labels describe a turn, judged on the
// request's last message(s): the latest user instruction when it is the
// last thing, else the latest tool result(s).
//
//   - simple: short questions, chat, lookups, formatting, a title or
//     summary; in an agent's loop, a routine step (reading a tool result
//     and making the next obvious call, or an edit the user spelled out);
//   - complex: multi-step reasoning, planning, writing or debugging code,
//     long documents; in an agent's loop, a new task that needs a plan, or
//     a tool result that shows a failure to diagnose.
//
// Side marks the agent's housekeeping requests (titles, summaries, memory
// extraction), which are not the user's task.
type labelledTurn struct {
	File   string `json:"file"`
	Line   int    `json:"line"`
	Agent  string `json:"agent"`
	API    string `json:"api"`
	Label  string `json:"label"`
	Side   *bool  `json:"side"`
	Reason string `json:"reason"`
}

// apiPaths are the request paths of the labels' APIs.
var apiPaths = map[string]string{"chat": "/v1/chat/completions", "responses": "/v1/responses", "messages": "/v1/messages"}

// sessionLines are the lines of a file under testdata/agents/sessions.
func sessionLines(t *testing.T, file string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(agentsDir(t), "sessions", file))
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n"))
}

// TestLabelledTurns: testdata/agents/turns.jsonl is well formed. Every
// line names a request that exists (a file under testdata/agents/sessions,
// a line in it) on the API it says, once; every label is simple or
// complex with a reason and a side flag; there are at least 60 turns of at
// least 4 agents, of both labels.
func TestLabelledTurns(t *testing.T) {
	f, err := os.Open(filepath.Join(agentsDir(t), "turns.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	files := map[string][][]byte{}
	seen := map[string]bool{}
	agents := map[string]bool{}
	labels := map[string]int{}
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for i := 1; sc.Scan(); i++ {
		n++
		var lt labelledTurn
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&lt); err != nil {
			t.Errorf("turns.jsonl:%d: %v", i, err)
			continue
		}
		at := func(format string, args ...any) {
			t.Helper()
			t.Errorf("turns.jsonl:%d (%s:%d): "+format, append([]any{i, lt.File, lt.Line}, args...)...)
		}
		if lt.Label != "simple" && lt.Label != "complex" {
			at("label %q, want simple or complex", lt.Label)
		}
		if strings.TrimSpace(lt.Reason) == "" {
			at("no reason")
		}
		if lt.Side == nil {
			at("no side")
		}
		if lt.Agent == "" {
			at("no agent")
		}
		if !strings.HasPrefix(filepath.Base(lt.File), lt.Agent) {
			at("agent %q is not the file's", lt.Agent)
		}
		key := fmt.Sprintf("%s:%d", lt.File, lt.Line)
		if seen[key] {
			at("labelled twice")
		}
		seen[key] = true
		agents[lt.Agent] = true
		labels[lt.Label]++
		if lt.File == "" || filepath.IsAbs(lt.File) || strings.Contains(lt.File, "..") || !strings.HasSuffix(lt.File, ".jsonl") {
			at("file %q is not a .jsonl file under testdata/agents/sessions", lt.File)
			continue
		}
		lines, ok := files[lt.File]
		if !ok {
			lines = sessionLines(t, lt.File)
			files[lt.File] = lines
		}
		if lt.Line < 1 || lt.Line > len(lines) {
			at("line %d not in the file's %d", lt.Line, len(lines))
			continue
		}
		var req capturedRequest
		if err := json.Unmarshal(lines[lt.Line-1], &req); err != nil {
			at("the request: %v", err)
			continue
		}
		if want, ok := apiPaths[lt.API]; !ok || req.Path != want {
			at("api %q, but the request's path is %s", lt.API, req.Path)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if n < 60 || len(agents) < 4 || labels["simple"] == 0 || labels["complex"] == 0 {
		t.Errorf("%d turns of %d agents (%v), want at least 60 of at least 4, of both labels", n, len(agents), labels)
	}
	t.Logf("%d turns of %d agents: %v", n, len(agents), labels)
}

// TestTrajectoriesLoad: every file TestCaptureTrajectories recorded is one
// request a line (a /v1/ path and a JSON body naming a model), and names
// no folder of the machine it was captured on (bench/capacity's
// TestCapturedSessionsLoad checks the six files above them).
func TestTrajectoriesLoad(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(agentsDir(t), "sessions", "trajectories", "*.jsonl"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no trajectories (%v)", err)
	}
	for _, f := range files {
		name := filepath.Join("trajectories", filepath.Base(f))
		for i, line := range sessionLines(t, name) {
			var req capturedRequest
			var body struct{ Model string }
			if err := json.Unmarshal(line, &req); err != nil || !strings.HasPrefix(req.Path, "/v1/") || json.Unmarshal(req.Body, &body) != nil || body.Model == "" {
				t.Errorf("%s:%d: not a captured request (%v)", name, i+1, err)
				continue
			}
			if at := capture.MachineLeak(string(req.Body)); at >= 0 {
				t.Errorf("%s:%d names a machine path: …%s…", name, i+1, req.Body[max(0, at-80):min(len(req.Body), at+80)])
			}
		}
	}
}
