package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestValidate(t *testing.T) {
	examples, _ := filepath.Glob("../../examples/policies/*.yaml")
	if len(examples) < 5 {
		t.Fatalf("found %d example policies", len(examples))
	}
	code, out, errs := runCLI(t, append([]string{"validate"}, examples...)...)
	if code != exitOK || strings.Count(out, ": ok\n") != len(examples) || errs != "" {
		t.Errorf("validate examples: exit %d\nstdout %s\nstderr %s", code, out, errs)
	}
	code, out, errs = runCLI(t, "validate", "../../testdata/several.bad.yaml", examples[0])
	if code != exitInvalid || !strings.Contains(out, examples[0]+": ok") {
		t.Errorf("validate mixed: exit %d stdout %q", code, out)
	}
	lines := strings.Split(strings.TrimSpace(errs), "\n")
	if len(lines) < 2 {
		t.Errorf("want every problem of several.bad.yaml, got:\n%s", errs)
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, "../../testdata/several.bad.yaml:") {
			t.Errorf("not FILE:LINE:COL: %q", l)
		}
	}
	if code, _, _ := runCLI(t, "validate"); code != exitUsage {
		t.Errorf("validate without files: exit %d, want %d", code, exitUsage)
	}
	if code, _, errs := runCLI(t, "validate", "/nonexistent.yaml"); code != exitInvalid || !strings.Contains(errs, "nonexistent") {
		t.Errorf("missing file: exit %d %s", code, errs)
	}
}

func TestExplainCLI(t *testing.T) {
	code, out, errs := runCLI(t, "explain", "--config", "../../examples/policies/dgx-spark-8node.yaml", "--class", "complex",
		`{"model":"auto","messages":[{"role":"user","content":"hi"}]}`)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var e struct {
		Route, Pool, Class string
		Matched            []string
		Skipped            []struct{ Route, Reason string }
		Fallback           []string
	}
	if err := json.Unmarshal([]byte(out), &e); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if e.Route != "complex" || e.Pool != "qwen" || e.Class != "complex" || len(e.Fallback) != 1 || e.Fallback[0] != "minicpm" ||
		len(e.Skipped) != 1 || e.Skipped[0].Route != "side" {
		t.Errorf("explain: %s", out)
	}
	// A title request (no tools, a short answer budget) is a side request.
	code, out, _ = runCLI(t, "explain", "--config", "../../examples/policies/dgx-spark-8node.yaml", "--class", "simple",
		`{"model":"auto","max_tokens":1024,"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"hi"}]}`)
	if code != exitOK || !strings.Contains(out, `"route": "side"`) || !strings.Contains(out, `"side": true`) || !strings.Contains(out, `"max_tokens 1024 <= 4096"`) {
		t.Errorf("explain a title request: %d %s", code, out)
	}
	code, out, _ = runCLI(t, "explain", "--config", "../../examples/policies/dgx-spark-8node.yaml", "--class", "simple",
		"--header", "X-Experiment: b", `{"model":"auto","messages":[{"role":"user","content":"hi"}]}`)
	if code != exitOK || !strings.Contains(out, `"route": "experiment"`) {
		t.Errorf("explain with header: %d %s", code, out)
	}
	if code, _, errs := runCLI(t, "explain", "--config", "../../examples/policies/dgx-spark-8node.yaml", `{"model":"nope","messages":[]}`); code != exitInvalid {
		t.Errorf("bad request: exit %d %s", code, errs)
	}
	if code, _, errs := runCLI(t, "explain", "--config", "../../examples/policies/dgx-spark-8node.yaml", "--class", "bogus", `{"model":"auto","messages":[{"role":"user","content":"hi"}]}`); code != exitInvalid || !strings.Contains(errs, "not a label") {
		t.Errorf("--class bogus: exit %d %s", code, errs)
	}
	if code, _, _ := runCLI(t, "explain", "--config", "../../examples/policies/dgx-spark-8node.yaml", "{}", "{}"); code != exitUsage {
		t.Errorf("two requests: exit %d", code)
	}
}

func TestUsageAndVersion(t *testing.T) {
	if code, _, errs := runCLI(t); code != exitUsage || !strings.Contains(errs, "Commands:") {
		t.Errorf("no args: %d %s", code, errs)
	}
	if code, _, _ := runCLI(t, "frobnicate"); code != exitUsage {
		t.Errorf("unknown command: %d", code)
	}
	for _, c := range commands() {
		if code, _, errs := runCLI(t, c.name, "--help"); code != exitOK || !strings.Contains(errs, "Usage: switchyard "+c.name) {
			t.Errorf("%s --help: %d %s", c.name, code, errs)
		}
	}
	if code, out, _ := runCLI(t, "version"); code != exitOK || !strings.Contains(out, "switchyard ") || !strings.Contains(out, "go1.") {
		t.Errorf("version: %d %s", code, out)
	}
	if code, _, _ := runCLI(t, "serve", "--bogus"); code != exitUsage {
		t.Errorf("serve --bogus: %d", code)
	}
	if code, _, errs := runCLI(t, "serve", "--config", "../../testdata/several.bad.yaml"); code != exitInvalid || !strings.Contains(errs, "several.bad.yaml:") {
		t.Errorf("serve with a bad config: %d %s", code, errs)
	}
	if code, _, _ := runCLI(t, "sim", "--preset", "nope"); code != exitUsage {
		t.Errorf("sim bad preset: %d", code)
	}
}

type syncWriter struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

func TestPresetArg(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--preset", "qwen", "--speedup", "5"}, "qwen"},
		{[]string{"--speedup=5", "-preset=minicpm"}, "minicpm"},
		{[]string{"--model", "x"}, ""},
		{[]string{"--", "--preset", "qwen"}, ""},
	} {
		if got := presetArg(tc.args); got != tc.want {
			t.Errorf("presetArg(%q) = %q, want %q", tc.args, got, tc.want)
		}
	}
}

// TestValidateWithoutSecrets: validate passes a config whose key variables
// are unset (CI has no secrets); --check-env requires them, as serve does.
func TestValidateWithoutSecrets(t *testing.T) {
	const file = "../../testdata/api-key-env-unset.bad.yaml"
	if code, out, errs := runCLI(t, "validate", file); code != exitOK || !strings.Contains(out, file+": ok") {
		t.Errorf("validate: exit %d\nstdout %s\nstderr %s", code, out, errs)
	}
	if code, _, errs := runCLI(t, "validate", "--check-env", file); code != exitInvalid || !strings.Contains(errs, "SWITCHYARD_KEY_MISSING is not set") {
		t.Errorf("validate --check-env: exit %d\nstderr %s", code, errs)
	}
}

// TestExplainClassifierUnreachable: explain against a config whose
// classifier pool cannot be reached still prints the explanation, says on
// stderr that the class is the fallback label, and exits 3.
func TestExplainClassifierUnreachable(t *testing.T) {
	code, out, errs := runCLI(t, "explain", "--config", "../../examples/policies/dgx-spark-8node.yaml",
		`{"model":"auto","messages":[{"role":"user","content":"hi"}]}`)
	if code != exitRuntime || !strings.Contains(errs, "the classifier could not answer") {
		t.Errorf("exit %d, stderr %s", code, errs)
	}
	if !strings.Contains(out, `"fallback": true`) || !strings.Contains(out, `"route"`) {
		t.Errorf("stdout %s", out)
	}
}
