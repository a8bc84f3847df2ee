package agents_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// codexConfig is CODEX_HOME/config.toml: the gateway as the only model
// provider (Responses API), no approvals and no sandbox (the work
// directory is the test's), and every feature that would reach the
// network or add tools switched off. The model name is not one Codex
// knows, so it uses its fallback model metadata, under which it offers
// only function tools (exec_command, write_stdin, request_user_input,
// view_image) and no freeform (custom, grammar) apply_patch tool.
const codexConfig = `model = "switchyard-agent"
model_provider = "switchyard"
approval_policy = "never"
sandbox_mode = "danger-full-access"
check_for_update_on_startup = false

[model_providers.switchyard]
name = "Switchyard"
base_url = "http://%s/v1"
wire_api = "responses"
env_key = "SWITCHYARD_API_KEY"

[features]
plugins = false
remote_plugin = false
plugin_sharing = false
apps = false
tool_suggest = false
skill_mcp_dependency_install = false
goals = false
memories = false
computer_use = false
browser_use = false
browser_use_external = false
in_app_browser = false
image_generation = false
in_app_updates = false
daemon_auto_start = false
shell_snapshot = false
api_key_model_discovery = false

[agents]
enabled = false

[analytics]
enabled = false

[feedback]
enabled = false

[history]
persistence = "none"
`

// freeformCatalog is a Codex model catalog (model_catalog_json) that
// gives switchyard-agent the metadata of Codex's own models as far as
// tools go: apply_patch as a freeform (custom, Lark grammar) tool. It
// replaces Codex's bundled catalog.
const freeformCatalog = `{"models": [{
  "slug": "switchyard-agent", "display_name": "switchyard-agent", "description": null,
  "supported_reasoning_levels": [], "shell_type": "shell_command", "visibility": "list",
  "supported_in_api": true, "priority": 1, "base_instructions": "You are a coding agent.",
  "supports_reasoning_summaries": false, "support_verbosity": false,
  "apply_patch_tool_type": "freeform", "truncation_policy": {"mode": "bytes", "limit": 10000},
  "supports_parallel_tool_calls": false, "context_window": 272000, "experimental_supported_tools": []
}]}`

// codexRun is what `codex exec --json` reported: its agent messages, the
// commands it ran and the types of the items it completed, in order.
type codexRun struct {
	messages, commands, items []string
}

// codex runs `codex exec task` in work against the cluster's gateway with
// a temporary HOME and CODEX_HOME, and returns what it reported; it fails
// the test unless the turn completed without an error. opts are the
// model catalog Codex reads (model_catalog_json; "" for its own) and the
// model (default switchyard-agent).
func codex(t *testing.T, c *cluster, work, task string, timeout time.Duration, opts ...string) codexRun {
	t.Helper()
	return codexIn(t, c, t.TempDir(), work, []string{task}, timeout, opts...)
}

// codexIn is codex with home as its HOME (CODEX_HOME is home/.codex,
// where it keeps its sessions) and args after `codex exec --json
// --skip-git-repo-check --cd work`: the task, or `resume --last TASK` to
// continue the last session.
func codexIn(t *testing.T, c *cluster, home, work string, args []string, timeout time.Duration, opts ...string) codexRun {
	t.Helper()
	bin := agent(t, "codex")
	codexHome := filepath.Join(home, ".codex")
	if err := os.MkdirAll(codexHome, 0o755); err != nil {
		t.Fatal(err)
	}
	config := fmt.Sprintf(codexConfig, c.gw.addr)
	if len(opts) > 1 {
		config = strings.Replace(config, `model = "switchyard-agent"`, fmt.Sprintf("model = %q", opts[1]), 1)
	}
	if len(opts) > 0 && opts[0] != "" {
		path := filepath.Join(codexHome, "catalog.json")
		if err := os.WriteFile(path, []byte(opts[0]), 0o644); err != nil {
			t.Fatal(err)
		}
		config = fmt.Sprintf("model_catalog_json = %q\n", path) + config
	}
	if err := os.WriteFile(filepath.Join(codexHome, "config.toml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	env := append(baseEnv(t, home), "CODEX_HOME="+codexHome, "SWITCHYARD_API_KEY=switchyard-test")
	out := run(t, timeout, work, env, bin, append([]string{"exec", "--json", "--skip-git-repo-check", "--cd", work}, args...)...)
	var r codexRun
	completed := false
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var ev struct {
			Type string `json:"type"`
			Item struct {
				Type    string `json:"type"`
				Text    string `json:"text"`
				Command string `json:"command"`
			} `json:"item"`
		}
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			continue
		}
		switch ev.Type {
		case "turn.completed":
			completed = true
		case "turn.failed", "error":
			t.Fatalf("codex: %s\n%s", sc.Text(), out)
		case "item.completed":
			r.items = append(r.items, ev.Item.Type)
			switch ev.Item.Type {
			case "agent_message":
				r.messages = append(r.messages, ev.Item.Text)
			case "command_execution":
				r.commands = append(r.commands, ev.Item.Command)
			}
		}
	}
	if !completed {
		t.Fatalf("codex did not complete its turn:\n%s", out)
	}
	return r
}

// TestCodexRunsAShellCommand: Codex, with its quiet tool set (not tool
// heavy: the small pool), asks the gateway over the Responses API, calls
// exec_command to write a file in its work directory, sends the output
// back and ends with the model's text: two streamed turns, both 200.
func TestCodexRunsAShellCommand(t *testing.T) {
	agent(t, "codex")
	work := t.TempDir()
	scenario := `turns:
  - calls:
      - tool: exec_command
        arguments: {cmd: "printf 'hello from codex\n' > hello.txt"}
  - text: "I wrote hello.txt."
`
	c := startCluster(t, scenario)
	r := codex(t, c, work, "Write hello.txt saying hello.", 2*time.Minute)
	hasFile(t, filepath.Join(work, "hello.txt"), "hello from codex\n")
	if len(r.commands) != 1 || !slices.Equal(r.messages, []string{"I wrote hello.txt."}) {
		t.Errorf("commands %q, messages %q; want the scenario's one command and text", r.commands, r.messages)
	}
	turns := c.turns()
	for _, a := range turns {
		if a.Status != 200 || a.Route != "default" || a.Pool != "small" || a.Model != "switchyard-agent" {
			t.Errorf("turn %+v, want 200 on route default, pool small, model switchyard-agent", a)
		}
	}
	if len(turns) != 2 {
		t.Errorf("%d turns, want 2: %+v", len(turns), c.gw.accessLines())
	}
	// With its fallback metadata Codex offers function tools only (see
	// TestCodexAppliesAPatch for its freeform apply_patch).
	for _, a := range turns {
		if !slices.Contains(a.Tools, "function:exec_command") || slices.ContainsFunc(a.Tools, func(s string) bool { return !strings.HasPrefix(s, "function:") }) {
			t.Errorf("turn offers tools %q, want function tools only, exec_command among them", a.Tools)
		}
	}
	if got := metric(t, c.gw.admin, "switchyard_requests_total", map[string]string{"route": "default", "pool": "small"}); got != float64(len(c.gw.accessLines())) {
		t.Errorf("switchyard_requests_total{route=default,pool=small} = %v, want every request (%d)", got, len(c.gw.accessLines()))
	}
}

// TestCodexAppliesAPatch: with model metadata as Codex's own models have
// (apply_patch_tool_type freeform), Codex offers apply_patch as a custom
// tool with a Lark grammar. The gateway offers it to vLLM as a function
// with one string input, turns the model's call back into a
// custom_tool_call, which Codex applies to its work directory; the next
// turn, with the call and its custom_tool_call_output, ends with text.
func TestCodexAppliesAPatch(t *testing.T) {
	agent(t, "codex")
	work := t.TempDir()
	scenario := `turns:
  - calls:
      - tool: apply_patch
        arguments: {input: "*** Begin Patch\n*** Add File: patched.txt\n+written by a patch\n*** End Patch\n"}
  - text: "I added patched.txt."
`
	c := startCluster(t, scenario)
	r := codex(t, c, work, "Add patched.txt with a patch.", 2*time.Minute, freeformCatalog)
	hasFile(t, filepath.Join(work, "patched.txt"), "written by a patch\n")
	if !slices.Contains(r.items, "file_change") || !slices.Equal(r.messages, []string{"I added patched.txt."}) {
		t.Errorf("items %q, messages %q; want a file change and the scenario's text", r.items, r.messages)
	}
	// What the replicas got (the logged bodies are the gateway's): the
	// custom tool as a function whose description carries the grammar,
	// and on the second turn Codex's custom_tool_call and its output as a
	// function call and its result.
	turns := c.turns()
	if len(turns) != 2 {
		t.Fatalf("%d turns, want 2: %+v", len(turns), c.gw.accessLines())
	}
	for _, a := range turns {
		if a.Status != 200 || !slices.Contains(a.Tools, "function:apply_patch") || !strings.Contains(a.Body, "start: begin_patch hunk+ end_patch") ||
			strings.Contains(a.Body, `"custom`) {
			t.Errorf("turn %+v: want 200 and apply_patch offered as a function with its grammar, nothing custom", a.Tools)
		}
	}
	if b := turns[1].Body; !strings.Contains(b, `"type":"function_call","call_id"`) || !strings.Contains(b, `"type":"function_call_output"`) {
		t.Errorf("second turn sent %.2000s; want the patch call and its output as function_call and function_call_output", b)
	}
}

// TestCodexDefaultModel: with its default model, gpt-6.2-sol (code mode
// only), Codex sends no top-level tools but an additional_tools input item
// holding a namespace with its custom exec tool (a Lark grammar); the
// replica is offered exec as a function with the grammar in its
// description, the other tools flattened, and no input item vLLM does not
// know.
func TestCodexDefaultModel(t *testing.T) {
	agent(t, "codex")
	work := t.TempDir()
	c := startCluster(t, "turns:\n  - text: \"Nothing to do.\"\n")
	r := codex(t, c, work, "Say something.", 2*time.Minute, "", "gpt-6.2-sol")
	if !slices.Equal(r.messages, []string{"Nothing to do."}) {
		t.Errorf("messages %q, want the scenario's text", r.messages)
	}
	turns := c.turns()
	if len(turns) != 1 {
		t.Fatalf("%d turns, want 1: %+v", len(turns), c.gw.accessLines())
	}
	a := turns[0]
	t.Logf("tools offered to the replica: %q", a.Tools)
	if a.Status != 200 || !slices.Contains(a.Tools, "function:exec") || !strings.Contains(a.Body, "pragma_source") ||
		strings.Contains(a.Body, `"additional_tools"`) || strings.Contains(a.Body, `"custom"`) || strings.Contains(a.Body, `"namespace"`) {
		t.Errorf("turn %d offered %q; want exec as a function with its grammar and no additional_tools, namespace or custom:\n%.3000s", a.Status, a.Tools, a.Body)
	}
}

// TestCodexOutgrowsTheSmallPool: Codex cats a log of about 24 kB, so its
// next turn cannot fit the small pool's 8192 tokens and the gateway moves
// the session to the large pool (fallback reason context_length), where
// its last turn stays; Codex writes its summary and finishes.
func TestCodexOutgrowsTheSmallPool(t *testing.T) {
	agent(t, "codex")
	work := t.TempDir()
	bigFile(t, work, 24_000)
	scenario := `turns:
  - calls:
      - tool: exec_command
        arguments: {cmd: "cat harbor.log"}
  - calls:
      - tool: exec_command
        arguments: {cmd: "printf 'Boats came in at dawn, every day.\n' > summary.txt"}
  - text: "I summarized the log in summary.txt."
`
	c := startCluster(t, scenario)
	r := codex(t, c, work, "Summarize harbor.log into summary.txt.", 2*time.Minute)
	hasFile(t, filepath.Join(work, "summary.txt"), "Boats came in at dawn, every day.\n")
	if len(r.commands) != 2 || !slices.Equal(r.messages, []string{"I summarized the log in summary.txt."}) {
		t.Errorf("commands %q, messages %q; want the scenario's two commands and text", r.commands, r.messages)
	}
	turns := c.turns()
	if want := []string{"small", "large", "large"}; !slices.Equal(pools(turns), want) {
		t.Fatalf("turns on pools %v, want %v: %+v", pools(turns), want, turns)
	}
	if turns[1].Fallback != "context_length" {
		t.Errorf("turn 2: fallback %q, want context_length: %+v", turns[1].Fallback, turns[1])
	}
	for _, a := range turns {
		if a.Status != 200 || a.Route != "default" {
			t.Errorf("turn %+v, want 200 on route default", a)
		}
	}
	if got := metric(t, c.gw.admin, "switchyard_fallbacks_total", map[string]string{"from": "small", "to": "large", "reason": "context_length"}); got != 1 {
		t.Errorf(`switchyard_fallbacks_total{from="small",to="large",reason="context_length"} = %v, want 1`, got)
	}
}

// TestCodexReplicaKilledMidStream: the replica streaming Codex's answer
// after its command's output is killed with SIGKILL a few tokens in; the
// gateway continues the Responses stream on the pool's other replica, and
// Codex receives the whole answer and finishes.
func TestCodexReplicaKilledMidStream(t *testing.T) {
	agent(t, "codex")
	work := t.TempDir()
	file := filepath.Join(work, "hello.txt")
	// Turn 2 is the simulator's own answer (the passage), which a
	// continuation picks up where it was cut: 60 tokens at 20 a second,
	// three seconds to cut into. Codex sends no max_output_tokens.
	const answer = 60
	scenario := `turns:
  - calls:
      - tool: exec_command
        arguments: {cmd: "printf 'hello from codex\n' > hello.txt"}
  - {}
`
	c := startCluster(t, scenario, "--decode-tps", "20", "--max-tokens", fmt.Sprint(answer), "--natural-lengths=false")
	killed := c.killAfter(file, time.Minute)
	r := codex(t, c, work, "Write hello.txt saying hello.", 2*time.Minute)
	victim := <-killed
	hasFile(t, file, "hello from codex\n")
	if len(r.messages) != 1 || len(strings.Fields(r.messages[0])) != answer {
		t.Errorf("messages %q, want one of the whole answer's %d words", r.messages, answer)
	}
	if got := metric(t, c.gw.admin, "switchyard_stream_resumes_total", map[string]string{"result": "resumed"}); got != 1 {
		t.Errorf(`switchyard_stream_resumes_total{result="resumed"} = %v, want 1`, got)
	}
	turns := c.turns()
	if len(turns) != 2 {
		t.Fatalf("turns %+v, want 2", turns)
	}
	cut := turns[1]
	if cut.Status != 200 || !strings.HasPrefix(cut.Replica, victim+">") || !strings.HasPrefix(cut.Resume, "resumed on ") || cut.CompletionTokens != answer {
		t.Errorf("turn 2 %+v, want 200, replica %s>(another), resumed, the whole answer's %d tokens", cut, victim, answer)
	}
	t.Logf("killed %s; turns %+v", victim, turns)
}
