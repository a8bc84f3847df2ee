package router_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/polltest"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/switchyard/switchyard/replay"
	"github.com/switchyard/switchyard/vllmsim"
)

// trajectoryYAML is the reference policy's shape: side, then complex on
// the trajectory's evidence or the class, then small. {{classifier}} is
// the classifier section (or nothing).
const trajectoryYAML = `
version: 1
pools:
  big: {model: Qwen/Qwen3.8-Flash-Next, health: {disabled: true}, replicas: [{name: big-a, url: "{{big}}"}]}
  small: {model: openbmb/MiniCPM5-2B, health: {disabled: true}, replicas: [{name: small-a, url: "{{small}}"}]}
{{classifier}}
models:
  - {name: "*", route: policy}
session: {ttl: 10m}
routes:
  - name: complex
    when: {any: [{tool_error: true}, {repeated_call: true}{{class}}]}
    to: big
  - name: default
    to: small
`

// markerChooser answers complex exactly when the classifier's input holds
// the marker, and counts its calls.
func markerChooser(calls *atomic.Int64) vllmsim.Option {
	return vllmsim.WithChooser(func(req vllmsim.ChoiceRequest) (string, map[string]float64) {
		calls.Add(1)
		for _, m := range req.Messages {
			if m.Role == "user" && strings.Contains(m.Content, "ZEBRA") {
				return req.Choices[len(req.Choices)-1], nil
			}
		}
		return req.Choices[0], nil
	})
}

// longProfile is a fast profile without a context bound: agents' captured
// requests are long and ask for long answers.
func longProfile(model string) vllmsim.Profile {
	p := fast(model)
	p.MaxModelLen = 0
	return p
}

// trajectoryGateway starts big and small replicas and a gateway on
// trajectoryYAML, with the marker classifier when classified.
func trajectoryGateway(t *testing.T, classified bool) (*gateway, *atomic.Int64) {
	calls := &atomic.Int64{}
	small := startReplica(t, longProfile("openbmb/MiniCPM5-2B"), markerChooser(calls))
	big := startReplica(t, longProfile("Qwen/Qwen3.8-Flash-Next"))
	yaml := trajectoryYAML
	if classified {
		yaml = strings.ReplaceAll(yaml, "{{classifier}}", "classifier: {kind: model, pool: small, labels: [simple, complex], timeout: 5s, cache: {size: 100}}")
		yaml = strings.ReplaceAll(yaml, "{{class}}", ", {class: complex}")
	} else {
		yaml = strings.ReplaceAll(yaml, "{{classifier}}", "")
		yaml = strings.ReplaceAll(yaml, "{{class}}", "")
	}
	return startGateway(t, loadConfig(t, yaml, map[string]string{"big": big.Srv.URL, "small": small.Srv.URL}, nil)), calls
}

// capturedLine is line n (from 1) of a captured session in
// testdata/agents/sessions: its path and body.
func capturedLine(t *testing.T, file string, n int) (string, string) {
	t.Helper()
	data, err := os.ReadFile("../testdata/agents/sessions/" + file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	line := gjson.Parse(lines[n-1])
	return line.Get("path").Str, line.Get("body").Raw
}

// sendPool posts body to path and returns the pool that answered.
func sendPool(t *testing.T, gw *gateway, path, body string) string {
	t.Helper()
	h := map[string]string{}
	if path == "/v1/messages" {
		h["anthropic-version"] = "2023-06-01"
	}
	resp, b := post(t, gw.API.URL+path, body, h)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: status %d: %s", path, resp.StatusCode, b)
	}
	return resp.Header.Get("X-Switchyard-Pool")
}

// appendMessages appends messages (JSON objects) to body's messages.
func appendMessages(t *testing.T, body string, msgs ...string) string {
	t.Helper()
	for _, m := range msgs {
		var err error
		if body, err = sjson.SetRaw(body, "messages.-1", m); err != nil {
			t.Fatal(err)
		}
	}
	return body
}

// TestFifthInstructionJudgedOnItsOwn: a marker in the fifth user
// instruction of pi's captured session routes that turn complex, and not
// the four before it (each judged on its own words, with the task's
// opening only as context).
func TestFifthInstructionJudgedOnItsOwn(t *testing.T) {
	gw, calls := trajectoryGateway(t, true)
	path, body := capturedLine(t, "pi.jsonl", 4) // the whole tool loop of its first task
	body = appendMessages(t, body, `{"role":"assistant","content":"Done: notes.txt reads alpha, delta, gamma."}`)
	instructions := []string{"now add epsilon at the end", "sort the lines", "show me the file", "rename it to list.txt",
		"ZEBRA: debug why the CSV parser drops the last field, analyze the failing test step by step, then design and write a fix with a regression test"}
	for i, instr := range instructions {
		b, _ := json.Marshal(instr)
		turn := appendMessages(t, body, `{"role":"user","content":`+string(b)+`}`)
		want := "small"
		if i == 4 {
			want = "big"
		}
		before := calls.Load()
		if got := sendPool(t, gw, path, turn); got != want {
			t.Errorf("instruction %d (%q): pool %q, want %q", i+2, instr, got, want)
		}
		if n := calls.Load() - before; n != 1 {
			t.Errorf("instruction %d: %d classifier calls, want 1 (a new instruction is always judged)", i+2, n)
		}
		body = appendMessages(t, turn, `{"role":"assistant","content":"ok"}`)
	}
}

// TestToolResultReachesTheClassifier: a marker in a tool result routes its
// turn complex, on chat and on the Messages API.
func TestToolResultReachesTheClassifier(t *testing.T) {
	gw, _ := trajectoryGateway(t, true)
	for _, tc := range []struct {
		file string
		line int
		// set writes the marker into the captured body's last tool result.
		set string
	}{
		{"opencode.jsonl", 4, "messages.5.content"},
		{"claude-code.jsonl", 3, "messages.4.content.0.content"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			path, body := capturedLine(t, tc.file, tc.line)
			if got := sendPool(t, gw, path, body); got != "small" {
				t.Fatalf("the routine turn: pool %q, want small", got)
			}
			marked, err := sjson.Set(body, tc.set, "ZEBRA the output of the tool")
			if err != nil {
				t.Fatal(err)
			}
			// Another session: no kept decision in the way.
			marked, _ = sjson.Set(marked, "metadata.x", "other")
			if got := sendPool(t, gw, path, strings.Replace(marked, "notes.txt", "other.txt", 1)); got != "big" {
				t.Errorf("a marker in the tool result: pool %q, want big", got)
			}
		})
	}
}

// TestTrajectoryMovesSessions: with no classifier at all, a failed tool
// result and a repeated identical call each move a session up; a session
// moved up by one failed call comes back down at the next new
// instruction judged simple, and not inside the tool loop before it.
func TestTrajectoryMovesSessions(t *testing.T) {
	t.Run("no classifier", func(t *testing.T) {
		gw, _ := trajectoryGateway(t, false)
		path, body := capturedLine(t, "opencode.jsonl", 3) // write succeeded
		if got := sendPool(t, gw, path, body); got != "small" {
			t.Fatalf("routine turn: %q", got)
		}
		failed, _ := sjson.Set(body, "messages.3.content", "Error: ENOENT: no such file or directory, open 'notes.txt'")
		if got := sendPool(t, gw, path, failed); got != "big" {
			t.Errorf("a failed tool result: pool %q, want big", got)
		}
		// Another session repeating its call.
		_, loop := capturedLine(t, "pi.jsonl", 3)
		loop, _ = sjson.Set(loop, "messages.1.content", "Create list.txt")
		if got := sendPool(t, gw, path, loop); got != "small" {
			t.Fatalf("routine turn: %q", got)
		}
		call := gjson.Get(loop, "messages.2").Raw
		result := gjson.Get(loop, "messages.3").Raw
		if got := sendPool(t, gw, path, appendMessages(t, loop, call, result)); got != "big" {
			t.Errorf("a repeated identical call: pool %q, want big", got)
		}
	})
	t.Run("down at a new instruction", func(t *testing.T) {
		gw, _ := trajectoryGateway(t, true)
		path, body := capturedLine(t, "opencode.jsonl", 3)
		failed, _ := sjson.Set(body, "messages.3.content", "Error: ENOENT: no such file or directory")
		if got := sendPool(t, gw, path, failed); got != "big" {
			t.Fatalf("the failed call: %q", got)
		}
		// The loop goes on, routine: still big (never down inside it).
		_, loop := capturedLine(t, "opencode.jsonl", 5)
		loop, _ = sjson.Set(loop, "messages.3.content", "Error: ENOENT: no such file or directory")
		loop, _ = sjson.Set(loop, "messages.5.content", "Wrote file successfully.")
		if got := sendPool(t, gw, path, loop); got != "big" {
			t.Errorf("a routine step after the failure: pool %q, want big", got)
		}
		next := appendMessages(t, loop, `{"role":"assistant","content":"Done."}`, `{"role":"user","content":"thanks, now show me the file"}`)
		if got := sendPool(t, gw, path, next); got != "small" {
			t.Errorf("the next new instruction, judged simple: pool %q, want small", got)
		}
		logs := gw.Logs.String()
		if !strings.Contains(logs, `"session":"moved_down"`) || !strings.Contains(logs, `"tool_error":"not found"`) {
			t.Errorf("the access lines do not say why the session moved:\n%s", logs)
		}
	})
}

// referenceGateway serves the reference policy (examples/policies/
// dgx-spark-8node.yaml) on simulated replicas, the classifier the
// simulator's own (vllmsim.DefaultChooser).
func referenceGateway(t *testing.T) *gateway {
	data, err := os.ReadFile("../examples/policies/dgx-spark-8node.yaml")
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	for _, n := range []string{"01", "03", "05"} {
		text = strings.ReplaceAll(text, "http://spark-"+n+":8000", startReplica(t, longProfile("Qwen/Qwen3.8-Flash-Next")).Srv.URL)
	}
	for _, n := range []string{"07", "08"} {
		text = strings.ReplaceAll(text, "http://spark-"+n+":8000", startReplica(t, longProfile("openbmb/MiniCPM5-2B"), vllmsim.WithChooser(vllmsim.DefaultChooser)).Srv.URL)
	}
	text = strings.Replace(text, "listen: 0.0.0.0:8080", "listen: 127.0.0.1:0", 1)
	text = strings.Replace(text, "admin_listen: 127.0.0.1:9090", "admin_listen: 127.0.0.1:0", 1)
	text = strings.Replace(text, "\nmodels:\n", "\nmodels:\n  - {name: \"*\", route: policy}\n", 1)
	return startGateway(t, loadConfig(t, text, nil, nil))
}

// sessionOutcomes sends a capture's requests in order and returns the
// session outcome of each (from the access lines).
func sessionOutcomes(t *testing.T, gw *gateway, file string) []string {
	var out []string
	data, err := os.ReadFile("../testdata/agents/sessions/" + file)
	if err != nil {
		t.Fatal(err)
	}
	for i, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		c := gjson.Parse(line)
		before := len(gw.Logs.String())
		sendPool(t, gw, c.Get("path").Str, c.Get("body").Raw)
		var access struct{ Session, Route string }
		for _, l := range strings.Split(gw.Logs.String()[before:], "\n") {
			if strings.Contains(l, `"msg":"request"`) {
				_ = json.Unmarshal([]byte(l), &access)
			}
		}
		if access.Route == "" {
			t.Fatalf("%s line %d: no access line", file, i+1)
		}
		out = append(out, access.Session)
	}
	return out
}

// TestReferencePolicyAgentSessions: under the reference policy, Qwen Code
// -c's second run and pi over the Messages API keep their session (no
// request after the first opens a new one), and Qwen Code's memory
// extraction is a side request.
func TestReferencePolicyAgentSessions(t *testing.T) {
	gw := referenceGateway(t)
	for _, file := range []string{"trajectories/qwen-code-continue.jsonl", "trajectories/pi-messages.jsonl"} {
		got := sessionOutcomes(t, gw, file)
		if got[0] != "new" {
			t.Errorf("%s: the first request's session %q, want new", file, got[0])
		}
		for i, s := range got[1:] {
			if s == "new" || s == "" {
				t.Errorf("%s line %d: session %q: it opened a new session (%v)", file, i+2, s, got)
			}
		}
	}
	got := sessionOutcomes(t, gw, "trajectories/qwen-code-memory.jsonl")
	if got[1] != "side" {
		t.Errorf("Qwen Code's memory extraction: session %q, want side (%v)", got[1], got)
	}
}

// TestClassificationsCountedOnce: each request adds at most one result
// to switchyard_classifier_requests_total: a kept session's turn that
// asked the classifier (for a route above the kept one) is counted by
// that result, never also as sticky.
func TestClassificationsCountedOnce(t *testing.T) {
	gw, _ := trajectoryGateway(t, true)
	path, body := capturedLine(t, "opencode.jsonl", 2)
	turns := []string{body}
	for _, line := range []int{3, 4, 5} {
		_, b := capturedLine(t, "opencode.jsonl", line)
		turns = append(turns, b)
	}
	// The same session marked complex, then its routine turns.
	marked, _ := sjson.Set(turns[0], "messages.1.content", "ZEBRA: design the notes format")
	turns = append([]string{marked}, turns[1:]...)
	total := func() float64 { return gw.MetricSum(t, "switchyard_classifier_requests_total", nil) }
	for i, turn := range turns {
		before := total()
		sendPool(t, gw, path, turn)
		if n := total() - before; n > 1 {
			t.Errorf("turn %d added %v classification results, want at most 1", i+1, n)
		}
	}
}

// TestTurnOutcomes: replaying a captured session whose small-pool answer
// is followed by a tool error counts a tool_error outcome for the small
// pool's route; a routine next step counts ok, a repeated call
// repeated_call, and the session's move up after it moved_up.
func TestTurnOutcomes(t *testing.T) {
	gw, _ := trajectoryGateway(t, true)
	path, first := capturedLine(t, "opencode.jsonl", 2)
	_, second := capturedLine(t, "opencode.jsonl", 3)
	outcome := func(pool, route, o string) float64 {
		return gw.MetricValue(t, "switchyard_turn_outcomes_total", map[string]string{"pool": pool, "route": route, "outcome": o})
	}
	if got := sendPool(t, gw, path, first); got != "small" {
		t.Fatalf("first turn: %q", got)
	}
	// The write the small pool's answer asked for failed.
	failed, _ := sjson.Set(second, "messages.3.content", "Error: EACCES: permission denied, open 'notes.txt'")
	if got := sendPool(t, gw, path, failed); got != "big" {
		t.Fatalf("the failed turn: %q", got)
	}
	if v := outcome("small", "default", "tool_error"); v != 1 {
		t.Errorf("small/default tool_error = %v, want 1", v)
	}
	// The big pool's answer is followed by a routine step: ok.
	_, third := capturedLine(t, "opencode.jsonl", 4)
	third, _ = sjson.Set(third, "messages.3.content", "Error: EACCES: permission denied, open 'notes.txt'")
	sendPool(t, gw, path, third)
	if v := outcome("big", "complex", "ok"); v != 1 {
		t.Errorf("big/complex ok = %v, want 1", v)
	}
	if _, m := get(t, gw.Admin.URL+"/metrics", nil); !strings.Contains(string(m), `switchyard_turn_outcomes_total{outcome="tool_error",pool="small",route="default"} 1`) {
		t.Error("/metrics does not show the outcome")
	}
}

// captureYAML records the agents key's requests to {{dir}}.
const captureYAML = `
version: 1
server:
  api_keys:
    - {name: agents, key_env: KEY_AGENTS}
    - {name: ci, key_env: KEY_CI}
pools:
  small: {model: openbmb/MiniCPM5-2B, health: {disabled: true}, replicas: [{name: small-a, url: "{{small}}"}]}
session: {header: X-Session-Id}
capture: {dir: "{{dir}}", keys: [agents], max_file_size: 64KiB, max_files: 50}
routes:
  - {name: default, to: small}
`

// TestCaptureUnderLoad: the agents key's requests, sent 8 at a time, are
// recorded in the capture format switchyard replay reads, with the
// session header and without any key; the ci key's are not; and with a
// folder that cannot be written every request is still answered, the
// drops counted.
func TestCaptureUnderLoad(t *testing.T) {
	small := startReplica(t, fast("openbmb/MiniCPM5-2B"))
	env := map[string]string{"KEY_AGENTS": "sk-agents-secret", "KEY_CI": "sk-ci-secret"}
	for _, unwritable := range []bool{false, true} {
		dir := t.TempDir()
		if unwritable {
			blocker := filepath.Join(dir, "file")
			os.WriteFile(blocker, nil, 0o644)
			dir = filepath.Join(blocker, "sub")
		}
		gw := startGateway(t, loadConfig(t, captureYAML, map[string]string{"small": small.Srv.URL, "dir": dir}, env))
		var wg sync.WaitGroup
		var failed atomic.Int64
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 25 {
					key := "sk-agents-secret"
					if i%5 == 0 {
						key = "sk-ci-secret"
					}
					body := fmt.Sprintf(`{"model":"openbmb/MiniCPM5-2B","max_tokens":2,"messages":[{"role":"user","content":"request %d of worker %d"}]}`, i, w)
					resp, _ := post(t, gw.API.URL+"/v1/chat/completions", body, map[string]string{"Authorization": "Bearer " + key, "X-Session-Id": fmt.Sprint("s", w)})
					if resp.StatusCode != http.StatusOK {
						failed.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		if failed.Load() != 0 {
			t.Fatalf("unwritable %t: %d of 200 requests failed", unwritable, failed.Load())
		}
		recorded := func() float64 { return gw.MetricSum(t, "switchyard_capture_requests_total", nil) }
		dropped := func() float64 { return gw.MetricSum(t, "switchyard_capture_dropped_total", nil) }
		polltest.Eventually(t, 30*time.Second, "the writer to catch up", func() bool { return recorded()+dropped() == 160 })
		if unwritable {
			if dropped() != 160 {
				t.Errorf("unwritable: %v dropped, want 160", dropped())
			}
			continue
		}
		files, _ := filepath.Glob(filepath.Join(dir, "capture-*.jsonl"))
		var lines int
		for _, f := range files {
			data, _ := os.ReadFile(f)
			if strings.Contains(string(data), "secret") {
				t.Errorf("%s holds a key", f)
			}
			reqs, errs := replay.Load(f)
			if len(errs) != 0 {
				t.Errorf("%s: %v", f, errs)
			}
			for _, r := range reqs {
				if r.Headers["X-Session-Id"] == "" || len(r.Headers) != 1 {
					t.Errorf("%s line %d: headers %v", f, r.Line, r.Headers)
				}
			}
			lines += len(reqs)
		}
		if lines != 160 {
			t.Errorf("%d requests recorded in %d files, want the agents key's 160", lines, len(files))
		}
	}
}
