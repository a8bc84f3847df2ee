package main

import (
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/switchyard/switchyard/vllmsim"
)

// evalConfig writes dgx-spark-8node.yaml to a temporary file whose name
// holds an ampersand (for the HTML-escaping check), with every replica
// on a simulator whose classifier answers come from DefaultChooser, or
// with the MiniCPM replicas refusing connections when dead is set. The
// classifier timeout is raised from 300ms for the race detector.
func evalConfig(t *testing.T, dead bool) string {
	t.Helper()
	data, err := os.ReadFile("../../examples/policies/dgx-spark-8node.yaml")
	if err != nil {
		t.Fatal(err)
	}
	sims := map[string]string{}
	for _, model := range []string{"openbmb/MiniCPM5-2B", "Qwen/Qwen3.8-Flash-Next"} {
		s := httptest.NewServer(vllmsim.New(vllmsim.Profile{Model: model, DefaultMaxTokens: 4},
			vllmsim.WithChooser(vllmsim.DefaultChooser)))
		t.Cleanup(s.Close)
		sims[model] = s.URL
	}
	if dead {
		s := httptest.NewServer(nil)
		s.Close()
		sims["openbmb/MiniCPM5-2B"] = s.URL
	}
	text := regexp.MustCompile(`http://spark-0[78]:8000`).ReplaceAllString(string(data), sims["openbmb/MiniCPM5-2B"])
	text = regexp.MustCompile(`http://spark-0[1-6]:8000`).ReplaceAllString(text, sims["Qwen/Qwen3.8-Flash-Next"])
	text = strings.Replace(text, "timeout: 300ms", "timeout: 10s", 1)
	path := filepath.Join(t.TempDir(), "dgx&sims.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// dataKeyed are the report's objects keyed by data (labels, pools,
// routes, APIs) rather than by field names.
var dataKeyed = map[string]bool{"apis": true, "confusion": true, "confusion.*": true, "per_label": true,
	"split.pools": true, "split.routes": true, "split.by_label": true, "split.by_label.*": true, "projected.replica_rps": true}

var snakeCase = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)

// checkKeys reports every field name of v that is not snake_case.
func checkKeys(t *testing.T, path string, v any) {
	t.Helper()
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			sub := strings.TrimPrefix(path+"."+k, ".")
			if dataKeyed[path] {
				sub = path + ".*"
			} else if !snakeCase.MatchString(k) {
				t.Errorf("key %q at %s is not snake_case", k, path)
			}
			checkKeys(t, sub, e)
		}
	case []any:
		for _, e := range v {
			checkKeys(t, path+"[]", e)
		}
	}
}

// progressLine is a line of eval's progress with no classifier failure.
// eval prints them for a run over a second, which a loaded machine can
// make of any run: a test of a clean run accepts them and nothing else.
var progressLine = regexp.MustCompile(`^switchyard eval: \d+/\d+ cases \(\d+%\), 0 classifier failures, [0-9.hms]+$`)

// onlyProgress reports whether stderr holds nothing but progress lines.
func onlyProgress(stderr string) bool {
	for l := range strings.Lines(stderr) {
		if !progressLine.MatchString(strings.TrimSuffix(l, "\n")) {
			return false
		}
	}
	return true
}

func TestOnlyProgress(t *testing.T) {
	for _, tc := range []struct {
		stderr string
		want   bool
	}{
		{"", true},
		{"switchyard eval: 10/100 cases (10%), 0 classifier failures, 1s\nswitchyard eval: 100/100 cases (100%), 0 classifier failures, 1.2s\n", true},
		{"switchyard eval: 10/100 cases (10%), 1 classifier failures, 1s\n", false},
		{"switchyard eval: 10/100 cases (10%), 0 classifier failures, 1s\nset.jsonl:3: the classifier could not answer\n", false},
	} {
		if got := onlyProgress(tc.stderr); got != tc.want {
			t.Errorf("onlyProgress(%q) = %v, want %v", tc.stderr, got, tc.want)
		}
	}
}

// TestEvalCLI runs the shipped set through the CLI against simulators, as
// JSON and as tables.
func TestEvalCLI(t *testing.T) {
	config := evalConfig(t, false)
	const data = "../../examples/eval/agents.jsonl"
	code, out, errs := runCLI(t, "eval", "--config", config, "--data", data, "--json", "--concurrency", "4")
	if code != exitOK || !onlyProgress(errs) {
		t.Fatalf("eval --json: exit %d\nstderr %s", code, errs)
	}
	if !strings.Contains(out, `"config": "`+config+`"`) {
		t.Errorf("the config's name is missing or HTML-escaped in the JSON:\n%.300s", out)
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	for _, key := range []string{"accuracy", "confusion", "per_label", "calibration", "split", "sweep", "projected", "classifier_failures"} {
		if _, ok := doc[key]; !ok {
			t.Errorf("the JSON lacks %q", key)
		}
	}
	checkKeys(t, "", doc)
	var r struct {
		Cases     int
		Accuracy  float64
		Confusion map[string]map[string]int
		Sweep     struct {
			Points []struct{ Threshold, Share float64 }
		}
		Projected struct {
			LargePool string `json:"large_pool"`
			Ratio     *float64
		}
		ClassifierFailures struct{ Count int } `json:"classifier_failures"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, row := range r.Confusion {
		for _, n := range row {
			total += n
		}
	}
	if r.Cases != 100 || total != 100 || r.Accuracy <= 0 || r.Accuracy >= 1 || r.ClassifierFailures.Count != 0 ||
		len(r.Sweep.Points) != 21 || r.Projected.LargePool != "qwen" || r.Projected.Ratio == nil || *r.Projected.Ratio <= 1 {
		t.Errorf("report: %+v", r)
	}

	code, text, errs := runCLI(t, "eval", "--config", config, "--data", data)
	if code != exitOK || !onlyProgress(errs) {
		t.Fatalf("eval: exit %d\nstderr %s", code, errs)
	}
	for _, want := range []string{"100 cases from " + data + " (chat ", "classifier failures: 0", "Confusion (rows: label, columns: predicted)",
		"\nlabel    support  predicted  correct  precision  recall  f1\n", "\nPer label\n", "\nCalibration (", "\nSplit (", "\nroute       requests  share\n",
		"\nThreshold sweep: requests with score(complex) >= threshold go to the large pool\n", "\n0.50       ", "\nProjected throughput against a large-only cluster\n"} {
		if !strings.Contains(text, want) {
			t.Errorf("the tables lack %q:\n%s", want, text)
		}
	}
}

func TestEvalBadLines(t *testing.T) {
	data := filepath.Join(t.TempDir(), "set.jsonl")
	lines := `{"label":"simple","request":{"model":"auto","messages":[{"role":"user","content":"hi"}]}}
{"label":"simple","request":
{"label":"medium","request":{"model":"auto","messages":[{"role":"user","content":"hi"}]}}

{"label":"complex","request":{"model":"auto","input":42}}
`
	if err := os.WriteFile(data, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runCLI(t, "eval", "--config", evalConfig(t, false), "--data", data)
	want := []string{data + ":2: not valid JSON", data + `:3: label "medium" is not a class`, data + ":5: request (responses API): 'input' must be"}
	got := strings.Split(strings.TrimSpace(errs), "\n")
	if code != exitInvalid || out != "" || len(got) != len(want) {
		t.Fatalf("exit %d, stdout %q, stderr:\n%s", code, out, errs)
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("line %d: %q, want it to start with %q", i, got[i], want[i])
		}
	}
}

// TestEvalClassifierDown: every case falls back to on_error's label; each
// is reported with its line, the report is printed, and the exit is 3.
func TestEvalClassifierDown(t *testing.T) {
	data := filepath.Join(t.TempDir(), "set.jsonl")
	lines := `{"label":"simple","request":{"model":"auto","messages":[{"role":"user","content":"hi"}]}}
{"label":"complex","request":{"model":"auto","input":"Prove it."}}
`
	if err := os.WriteFile(data, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runCLI(t, "eval", "--config", evalConfig(t, true), "--data", data)
	if code != exitRuntime || !strings.Contains(out, "accuracy 0.50 (1 of 2)") || !strings.Contains(out, `classifier failures: 2 (counted as on_error's label "complex")`) ||
		!strings.Contains(errs, data+":1: the classifier could not answer") || !strings.Contains(errs, data+":2: the classifier could not answer") ||
		!strings.Contains(errs, "the classifier answered no case") {
		t.Errorf("exit %d\nstdout %s\nstderr %s", code, out, errs)
	}
}

func TestEvalUsage(t *testing.T) {
	const good = "../../examples/policies/dgx-spark-8node.yaml"
	const data = "../../examples/eval/agents.jsonl"
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no data", []string{"--config", good}, exitUsage, "--data is required"},
		{"no concurrency", []string{"--config", good, "--data", data, "--concurrency", "0"}, exitUsage, "--concurrency 0: must be at least 1"},
		{"an operand", []string{"--config", good, "--data", data, "extra"}, exitUsage, "Usage: switchyard eval"},
		{"bad config", []string{"--config", "../../testdata/several.bad.yaml", "--data", data}, exitInvalid, "several.bad.yaml:"},
		{"no classifier", []string{"--config", "../../examples/policies/ring-4node.yaml", "--data", data}, exitInvalid, "has no classifier"},
		{"missing data", []string{"--config", good, "--data", "/nonexistent/set.jsonl"}, exitInvalid, "/nonexistent/set.jsonl"},
		{"unknown hard label", []string{"--config", good, "--data", data, "--hard", "medium"}, exitInvalid, `hard label "medium" is not a class`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errs := runCLI(t, append([]string{"eval"}, tc.args...)...)
			if code != tc.code || !strings.Contains(errs, tc.want) {
				t.Errorf("exit %d (want %d), stderr lacks %q:\n%s", code, tc.code, tc.want, errs)
			}
		})
	}
}
