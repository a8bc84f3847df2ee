package classifier_test

import (
	"context"
	"encoding/json"
	"flag"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/switchyard/switchyard/classifier"
	"github.com/switchyard/switchyard/vllmsim"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/ from what the classifier sends")

// goldenInput is the request summarised in the golden files. "why" makes
// the simulator's DefaultChooser answer complex.
var goldenInput = classifier.Input{
	System:   "You are a coding agent.",
	LastUser: "Why does the build fail on arm64?",
	Tools:    []string{"read_file", "run_shell"},
	Turns:    3,
}

func goldenOptions(o *classifier.Options) {
	o.Descriptions = map[string]string{
		"simple":  "chit-chat, lookups and short edits",
		"complex": "multi-step reasoning, debugging or design",
	}
}

// TestRequestGolden checks the exact body sent to the classifier pool,
// captured both at the Transport and, end to end, by the replica itself.
func TestRequestGolden(t *testing.T) {
	tests := []struct {
		name   string
		golden string
		edit   func(*classifier.Options)
	}{
		{name: "structured_outputs", golden: "request.golden.json", edit: goldenOptions},
		{name: "guided_choice", golden: "request-guided.golden.json", edit: func(o *classifier.Options) {
			goldenOptions(o)
			o.GuidedChoice = true
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name+"/transport", func(t *testing.T) {
			tr := &capture{label: "complex"}
			c := newModel(t, tr, tc.edit)
			if r := c.Classify(context.Background(), goldenInput); r.Outcome != classifier.OutcomeOK {
				t.Fatalf("Classify: outcome %q (%v), want ok", r.Outcome, r.Err)
			}
			checkGolden(t, tc.golden, tr.last(t))
		})
		t.Run(tc.name+"/simulator", func(t *testing.T) {
			bodies := make(chan []byte, 1)
			_, tr := startSim(t, vllmsim.WithRequestHook(func(_ *http.Request, body []byte) {
				select {
				case bodies <- append([]byte(nil), body...):
				default:
				}
			}))
			c := newModel(t, tr, tc.edit)
			r := c.Classify(context.Background(), goldenInput)
			want := classifier.Result{Label: "complex", Outcome: classifier.OutcomeOK,
				Scores: map[string]float64{"complex": 0.85, "simple": 0.15}}
			if diff := cmp.Diff(want, r, cmpopts.EquateApprox(0, 1e-9), cmpopts.EquateErrors()); diff != "" {
				t.Errorf("Classify through the simulator (-want +got):\n%s", diff)
			}
			select {
			case body := <-bodies:
				checkGolden(t, tc.golden, body)
			default:
				t.Fatal("the simulator received no request")
			}
		})
	}
}

// checkGolden compares body with testdata/name as parsed JSON, so that key
// order and spacing do not matter but every field and value does (a
// temperature of 0 must be present, not omitted).
func checkGolden(t *testing.T, name string, body []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		var v any
		if err := json.Unmarshal(body, &v); err != nil {
			t.Fatalf("request body is not JSON: %v\n%s", err, body)
		}
		pretty, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, append(pretty, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	wantRaw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./classifier/ -run TestRequestGolden -update to record it)", err)
	}
	var want, got map[string]any
	if err := json.Unmarshal(wantRaw, &want); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatalf("request body is not JSON: %v\n%s", err, body)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("request body differs from %s (-want +got):\n%s", path, diff)
	}
}

// TestPromptLabels checks what a custom prompt becomes: {labels} is the
// list of labels, with a meaning where one is given, wherever it stands,
// and braces that are not {labels} (a JSON example, a lone "{{") stay.
func TestPromptLabels(t *testing.T) {
	tests := []struct{ prompt, want string }{
		{"Pick one of:\n{labels}\nAnswer with the label.", "Pick one of:\n- simple\n- complex: multi-step work\nAnswer with the label."},
		{"{labels}\n\nAgain:\n{labels}", "- simple\n- complex: multi-step work\n\nAgain:\n- simple\n- complex: multi-step work"},
		{`Answer {"label": ...}, never "{{" alone.`, `Answer {"label": ...}, never "{{" alone.`},
		{"No list here.", "No list here."},
	}
	for _, tc := range tests {
		tr := &capture{label: "simple"}
		c := newModel(t, tr, func(o *classifier.Options) {
			o.Prompt = tc.prompt
			o.Descriptions = map[string]string{"complex": "multi-step work"}
		})
		if r := c.Classify(context.Background(), classifier.Input{LastUser: "hi"}); r.Outcome != classifier.OutcomeOK {
			t.Fatalf("Classify: outcome %q (%v), want ok", r.Outcome, r.Err)
		}
		var sent struct {
			Messages []struct{ Role, Content string }
		}
		if err := json.Unmarshal(tr.last(t), &sent); err != nil {
			t.Fatal(err)
		}
		if len(sent.Messages) == 0 || sent.Messages[0].Role != "system" || sent.Messages[0].Content != tc.want {
			t.Errorf("prompt %q: sent %+v, want the system message %q", tc.prompt, sent.Messages, tc.want)
		}
	}
}
