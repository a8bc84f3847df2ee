package agents_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// claudeResult is the fields of `claude -p --output-format json` the
// tests read.
type claudeResult struct {
	Type     string `json:"type"`
	Subtype  string `json:"subtype"`
	IsError  bool   `json:"is_error"`
	NumTurns int    `json:"num_turns"`
	Result   string `json:"result"`
}

// claude runs `claude -p task` in work against the cluster's gateway, with
// a temporary HOME and config directory and everything that would leave
// the machine switched off, and returns its result. env is added to its
// environment, flags to its command line (such as --tools to narrow the
// tool set).
func claude(t *testing.T, c *cluster, work, task string, timeout time.Duration, env []string, flags ...string) claudeResult {
	t.Helper()
	return claudeIn(t, c, t.TempDir(), work, task, timeout, env, append([]string{"--no-session-persistence"}, flags...)...)
}

// claudeIn is claude with home as its HOME (and config directory), whose
// flags replace --no-session-persistence: with sessions kept, a later run
// in the same home may continue (-c) the last.
func claudeIn(t *testing.T, c *cluster, home, work, task string, timeout time.Duration, env []string, flags ...string) claudeResult {
	t.Helper()
	bin := agent(t, "claude")
	env = append(append(baseEnv(t, home), env...),
		"CLAUDE_CONFIG_DIR="+filepath.Join(home, ".claude"),
		"ANTHROPIC_BASE_URL=http://"+c.gw.addr,
		"ANTHROPIC_AUTH_TOKEN=switchyard-test",
		"ANTHROPIC_MODEL=claude-sonnet-4-5",
		"ANTHROPIC_SMALL_FAST_MODEL=claude-haiku-4-5",
		"ANTHROPIC_DEFAULT_HAIKU_MODEL=claude-haiku-4-5",
		// Everything that is not the conversation itself: telemetry
		// (Statsig, Sentry, OpenTelemetry), auto-updates, release notes,
		// model capability lookups, the feedback survey, /bug.
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		"DISABLE_TELEMETRY=1",
		"DISABLE_ERROR_REPORTING=1",
		"DISABLE_AUTOUPDATER=1",
		"DISABLE_BUG_COMMAND=1",
		"DISABLE_NON_ESSENTIAL_MODEL_CALLS=1",
		"DISABLE_COST_WARNINGS=1",
		"CLAUDE_CODE_ENABLE_TELEMETRY=0",
		"CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY=1",
		"CLAUDE_CODE_DISABLE_AUTO_MEMORY=1",
		"CLAUDE_CODE_IDE_SKIP_AUTO_INSTALL=1",
		"ENABLE_TOOL_SEARCH=false",
	)
	args := append([]string{
		"-p", task, "--output-format", "json",
		// Root may not --dangerously-skip-permissions: allow the tools
		// the task needs instead.
		"--allowedTools", "Read,Write,Edit,Bash",
		"--disallowedTools", "WebFetch,WebSearch",
		"--strict-mcp-config",
	}, flags...)
	out := run(t, timeout, work, env, bin, args...)
	var r claudeResult
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("claude's output is not its JSON result: %v\n%s", err, out)
	}
	if r.Type != "result" || r.Subtype != "success" || r.IsError {
		t.Fatalf("claude did not succeed: %s", out)
	}
	return r
}

// writeScenario scripts Claude Code's Write tool: turn 1 writes content to
// path, turn 2 answers with text (text, or the simulator's own when "").
func writeScenario(path, content, text string) string {
	last := "  - {}\n"
	if text != "" {
		last = fmt.Sprintf("  - text: %q\n", text)
	}
	return fmt.Sprintf("turns:\n  - calls:\n      - tool: Write\n        arguments: {file_path: %q, content: %q}\n%s", path, content, last)
}

// TestClaudeCodeWritesAFile: Claude Code, with its whole tool set, asks
// the gateway (the tool-heavy route, the large pool), calls Write, writes
// the file in its work directory, sends the tool result back and ends
// with the model's text: two Messages requests, both 200.
func TestClaudeCodeWritesAFile(t *testing.T) {
	agent(t, "claude")
	work := t.TempDir()
	file := filepath.Join(work, "hello.txt")
	const content = "hello from the simulator\n"
	c := startCluster(t, writeScenario(file, content, "I wrote hello.txt."))
	r := claude(t, c, work, "Write hello.txt saying hello.", 2*time.Minute, nil)
	hasFile(t, file, content)
	if r.Result != "I wrote hello.txt." || r.NumTurns != 2 {
		t.Errorf("result %q after %d turns, want the scenario's text after 2", r.Result, r.NumTurns)
	}
	lines := c.gw.accessLines()
	for _, a := range lines {
		if a.Status != 200 || a.Route != "tool-heavy" || a.Pool != "large" || a.Model != "claude-sonnet-4-5" {
			t.Errorf("access line %+v, want 200 on route tool-heavy, pool large, model claude-sonnet-4-5", a)
		}
	}
	if len(lines) != 2 {
		t.Errorf("%d requests, want the 2 turns: %+v", len(lines), lines)
	}
	if got := metric(t, c.gw.admin, "switchyard_requests_total", map[string]string{"route": "tool-heavy", "pool": "large"}); got != 2 {
		t.Errorf("switchyard_requests_total{route=tool-heavy,pool=large} = %v, want 2", got)
	}
}

// TestClaudeCodeOutgrowsTheSmallPool: Claude Code with only Read and Write
// starts on the small pool (8192 tokens of context); it reads a log of
// about 40 kB, so its next turn cannot fit there and the gateway moves the
// session to the large pool (fallback reason context_length), where its
// last turn stays; Claude Code writes its summary and finishes.
func TestClaudeCodeOutgrowsTheSmallPool(t *testing.T) {
	agent(t, "claude")
	work := t.TempDir()
	log := bigFile(t, work, 40_000)
	file := filepath.Join(work, "summary.txt")
	const content = "# Harbor log\n\nBoats came in at dawn, every day.\n"
	scenario := fmt.Sprintf(`turns:
  - calls:
      - tool: Read
        arguments: {file_path: %q}
  - calls:
      - tool: Write
        arguments: {file_path: %q, content: %q}
  - text: "I summarized the log in summary.txt."
`, log, file, content)
	c := startCluster(t, scenario)
	r := claude(t, c, work, "Summarize harbor.log into summary.txt.", 2*time.Minute, nil, "--tools", "Read,Write")
	hasFile(t, file, content)
	if r.Result != "I summarized the log in summary.txt." {
		t.Errorf("result %q, want the scenario's last text", r.Result)
	}
	lines := c.turns()
	if want := []string{"small", "large", "large"}; !slices.Equal(pools(lines), want) {
		t.Fatalf("turns on pools %v, want %v: %+v", pools(lines), want, lines)
	}
	if lines[1].Fallback != "context_length" {
		t.Errorf("turn 2: fallback %q, want context_length: %+v", lines[1].Fallback, lines[1])
	}
	for _, a := range lines {
		if a.Status != 200 || a.Route != "default" {
			t.Errorf("access line %+v, want 200 on route default", a)
		}
	}
	if got := metric(t, c.gw.admin, "switchyard_fallbacks_total", map[string]string{"from": "small", "to": "large", "reason": "context_length"}); got != 1 {
		t.Errorf(`switchyard_fallbacks_total{from="small",to="large",reason="context_length"} = %v, want 1`, got)
	}
}

// TestClaudeCodeReplicaKilledMidStream: the replica streaming Claude
// Code's answer after its tool result is killed with SIGKILL a few tokens
// in; the gateway continues the stream on the pool's other replica, Claude
// Code receives the whole answer, none the wiser, and finishes.
func TestClaudeCodeReplicaKilledMidStream(t *testing.T) {
	agent(t, "claude")
	work := t.TempDir()
	file := filepath.Join(work, "hello.txt")
	const content = "hello from the simulator\n"
	// Turn 2 is the simulator's own answer (the passage), which a
	// continuation picks up where it was cut, of max_tokens: 60 tokens at
	// 20 a second, three seconds to cut into. The resumed stream is a chat
	// request that the simulator answers with all of its max_tokens (the
	// original's less what was sent), so the uncut answer runs to
	// max_tokens too (--max-tokens above it, CLAUDE_CODE_MAX_OUTPUT_TOKENS
	// at it): both end with stop_reason "max_tokens". Claude Code asks the
	// model to go on after such an answer; turn 3 ends the task.
	const answer = 60
	scenario := fmt.Sprintf(`turns:
  - calls:
      - tool: Write
        arguments: {file_path: %q, content: %q}
  - {}
  - text: "I wrote hello.txt."
`, file, content)
	c := startCluster(t, scenario, "--decode-tps", "20", "--max-tokens", fmt.Sprint(answer+1), "--natural-lengths=false")
	killed := c.killAfter(file, time.Minute)
	r := claude(t, c, work, "Write hello.txt saying hello.", 2*time.Minute, []string{"CLAUDE_CODE_MAX_OUTPUT_TOKENS=" + fmt.Sprint(answer)})
	victim := <-killed
	hasFile(t, file, content)
	if !strings.Contains(r.Result, "I wrote hello.txt.") {
		t.Errorf("result %q, want the scenario's last text", r.Result)
	}
	if got := metric(t, c.gw.admin, "switchyard_stream_resumes_total", map[string]string{"pool": "large", "result": "resumed"}); got != 1 {
		t.Errorf(`switchyard_stream_resumes_total{pool="large",result="resumed"} = %v, want 1`, got)
	}
	turns := c.turns()
	if len(turns) < 2 {
		t.Fatalf("turns %+v", turns)
	}
	cut := turns[1]
	if cut.Status != 200 || !strings.HasPrefix(cut.Replica, victim+">") || !strings.HasPrefix(cut.Resume, "resumed on ") || cut.CompletionTokens != answer {
		t.Errorf("turn 2 %+v, want 200, replica %s>(another), resumed, the whole answer's %d tokens", cut, victim, answer)
	}
	for _, a := range turns {
		if a.Status != 200 {
			t.Errorf("turn %+v, want 200", a)
		}
	}
	t.Logf("killed %s; turns %+v", victim, turns)
}
