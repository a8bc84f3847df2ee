package agents_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// The agents below are not run by the test suite: TestCaptureSessions
// alone runs them, to record what they send. They are pinned in
// testdata/agents/capture (npm ci --prefix testdata/agents/capture), apart
// from the suite's own agents so that .ci/run does not install them.

// captureAgent is the path of an agent installed in
// testdata/agents/capture (node_modules/.bin/NAME), or skips the test
// saying what is missing.
func captureAgent(t *testing.T, name string) string {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not installed")
	}
	bin := filepath.Join(agentsDir(t), "capture", "node_modules", ".bin", name)
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("%s is not installed: run npm ci --prefix testdata/agents/capture", name)
	}
	return bin
}

// captureEnv is baseEnv with a temporary TMPDIR of the test's own, so
// that the temporary paths agents write into their prompts (OpenCode's
// "$TMPDIR/opencode") are under the test's folder, which the recording
// names $TMP.
func captureEnv(t *testing.T, home string, tolerated ...string) []string {
	t.Helper()
	return append(baseEnvTolerating(t, home, tolerated...), "TMPDIR="+t.TempDir())
}

// captureTask is the task every captured agent is given: three tool
// steps (create, read back, edit) and a closing answer.
const captureTask = "Create notes.txt with the lines alpha, beta and gamma, read it back, then change beta to delta."

// captureWant is notes.txt once the task is done.
const captureWant = "alpha\ndelta\ngamma\n"

// step is one scripted tool call: the tool's name and its arguments.
type step struct {
	tool string
	args map[string]any
}

// stepScenario scripts one tool call per turn, in order, then the closing
// text: a vllmsim scenario (JSON is YAML).
func stepScenario(steps []step, text string) string {
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
	for _, s := range steps {
		sc.Turns = append(sc.Turns, turn{Calls: []call{{s.tool, s.args}}})
	}
	sc.Turns = append(sc.Turns, turn{Text: text})
	b, _ := json.Marshal(sc)
	return string(b)
}

// openCodeConfig is OPENCODE_CONFIG: the gateway as an OpenAI-compatible
// provider with a main model and a small_model (what OpenCode sends its
// title requests to), every edit and command allowed, nothing shared.
func openCodeConfig(gw string) string {
	b, _ := json.Marshal(map[string]any{
		"provider": map[string]any{"switchyard": map[string]any{
			"npm":     "@ai-sdk/openai-compatible",
			"name":    "Switchyard",
			"options": map[string]any{"baseURL": "http://" + gw + "/v1", "apiKey": "switchyard-test"},
			"models": map[string]any{
				"agent":       map[string]any{"name": "agent"},
				"agent-small": map[string]any{"name": "agent-small"},
			},
		}},
		"model":       "switchyard/agent",
		"small_model": "switchyard/agent-small",
		"share":       "disabled",
		"autoupdate":  false,
		"permission":  map[string]any{"edit": "allow", "bash": "allow", "webfetch": "deny"},
	})
	return string(b)
}

// openCode runs `opencode run task` in work against the cluster's gateway,
// with a temporary HOME and models.dev, updates, LSP downloads, default
// plugins and sharing switched off.
func openCode(t *testing.T, c *cluster, work, task string, timeout time.Duration) {
	t.Helper()
	openCodeIn(t, c, t.TempDir(), work, timeout, "run", "--format", "json", task)
}

// openCodeIn runs opencode with args in work against the cluster's
// gateway, as openCode does, with home as its HOME (where it keeps its
// sessions, for `run --continue`).
func openCodeIn(t *testing.T, c *cluster, home, work string, timeout time.Duration, args ...string) {
	t.Helper()
	bin := captureAgent(t, "opencode")
	env := append(captureEnv(t, home),
		"XDG_STATE_HOME="+filepath.Join(home, ".local", "state"),
		"OPENCODE_CONFIG_CONTENT="+openCodeConfig(c.gw.addr),
		// Its embedded npm looks a package up when a small_model is set
		// (the run does not need it): offline, it does not ask.
		"npm_config_offline=true",
		"OPENCODE_DISABLE_MODELS_FETCH=1",
		"OPENCODE_DISABLE_AUTOUPDATE=1",
		"OPENCODE_DISABLE_LSP_DOWNLOAD=1",
		"OPENCODE_DISABLE_DEFAULT_PLUGINS=1",
		"OPENCODE_DISABLE_SHARE=1",
		"OPENCODE_DISABLE_CLAUDE_CODE=1",
	)
	run(t, timeout, work, env, bin, args...)
}

// qwenCode runs `qwen -p task` (approval mode yolo) in work against the
// cluster's gateway as an OpenAI provider, with a temporary HOME whose
// settings switch off usage statistics, telemetry and updates.
func qwenCode(t *testing.T, c *cluster, work, task string, timeout time.Duration) {
	t.Helper()
	qwenCodeIn(t, c, t.TempDir(), work, timeout, "-p", task)
}

// qwenCodeIn runs qwen with args (and approval mode yolo, JSON output) in
// work against the cluster's gateway, as qwenCode does, with home as its
// HOME (where it keeps its sessions, for -c).
func qwenCodeIn(t *testing.T, c *cluster, home, work string, timeout time.Duration, args ...string) {
	t.Helper()
	bin := captureAgent(t, "qwen")
	settings := `{"security": {"auth": {"selectedType": "openai"}}, "privacy": {"usageStatisticsEnabled": false},
"usageStatisticsEnabled": false, "telemetry": {"enabled": false}, "general": {"disableAutoUpdate": true, "disableUpdateNag": true}}`
	if err := os.MkdirAll(filepath.Join(home, ".qwen"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".qwen", "settings.json"), []byte(settings), 0o644); err != nil {
		t.Fatal(err)
	}
	env := append(captureEnv(t, home),
		"OPENAI_BASE_URL=http://"+c.gw.addr+"/v1",
		"OPENAI_API_KEY=switchyard-test",
		"OPENAI_MODEL=agent",
		"QWEN_CODE_SUPPRESS_YOLO_WARNING=1",
	)
	run(t, timeout, work, env, bin, append(args, "--approval-mode", "yolo", "--output-format", "json")...)
}

// pi runs `pi -p task` in work against the cluster's gateway, a custom
// provider of ~/.pi/agent/models.json (chat completions, system role),
// offline (no startup network operations) and without telemetry.
func pi(t *testing.T, c *cluster, work, task string, timeout time.Duration) {
	t.Helper()
	piIn(t, c, t.TempDir(), work, "openai-completions", timeout, "--no-session", "-p", task)
}

// piIn runs pi with args in work against the cluster's gateway, as pi
// does, with home as its HOME (where it keeps its sessions, for
// --continue) and the provider speaking api: "openai-completions" (chat
// completions, as pi), "openai-responses" (the Responses API) or
// "anthropic-messages" (the Messages API, /v1/messages).
func piIn(t *testing.T, c *cluster, home, work, api string, timeout time.Duration, args ...string) {
	t.Helper()
	bin := captureAgent(t, "pi")
	dir := filepath.Join(home, ".pi", "agent")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// The Anthropic SDK adds /v1/messages to its base URL itself.
	base := "http://" + c.gw.addr + "/v1"
	compat := `, "compat": {"supportsDeveloperRole": false, "supportsReasoningEffort": false}`
	if api == "anthropic-messages" {
		base, compat = "http://"+c.gw.addr, ""
	}
	models := `{"providers": {"switchyard": {"baseUrl": "` + base + `", "api": "` + api + `", "apiKey": "switchyard-test"` + compat + `, "models": [{"id": "agent"}]}}}`
	if err := os.WriteFile(filepath.Join(dir, "models.json"), []byte(models), 0o644); err != nil {
		t.Fatal(err)
	}
	env := append(captureEnv(t, home), "PI_OFFLINE=1", "PI_TELEMETRY=0")
	run(t, timeout, work, env, bin, append([]string{"--provider", "switchyard", "--model", "agent"}, args...)...)
}

// cline configures Cline's openai-compatible provider for the gateway
// (`cline auth`) and runs `cline --json task` in work, with a temporary
// HOME whose global settings opt out of telemetry.
func cline(t *testing.T, c *cluster, work, task string, timeout time.Duration) {
	t.Helper()
	bin := captureAgent(t, "cline")
	home := t.TempDir()
	// Cline's global settings: no telemetry (its PostHog and
	// OpenTelemetry exporters), no auto-update.
	settings := filepath.Join(home, ".cline", "data", "settings")
	if err := os.MkdirAll(settings, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(settings, "global-settings.json"), []byte(`{"telemetryOptOut": true, "autoUpdateEnabled": false}`), 0o644); err != nil {
		t.Fatal(err)
	}
	// Opted out, Cline still reports its opt-out (one PostHog event to
	// data.cline.bot) on its first run in a fresh HOME: the trap refuses
	// it, as any request beyond loopback, and the run goes on.
	env := captureEnv(t, home, "data.cline.bot")
	run(t, time.Minute, work, env, bin, "auth", "-p", "openai", "-k", "switchyard-test", "-m", "agent", "-b", "http://"+c.gw.addr+"/v1")
	run(t, timeout, work, env, bin, "--json", "--cwd", work, task)
}
