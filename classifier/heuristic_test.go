package classifier_test

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/classifier"
)

func TestHeuristic(t *testing.T) {
	three := []string{"simple", "medium", "complex"}
	long := strings.Repeat("lorem ipsum dolor sit amet ", 160) // 4,320 bytes
	tools := []string{"read_file", "write_file", "run_shell", "search"}
	codeSteps := "Fix this step by step:\n```go\nfunc main() { fmt.Println(x) }\n```"
	hardest := classifier.Input{LastUser: long + codeSteps + " prove it, then debug and design", Tools: tools, Turns: 12}
	tests := []struct {
		name   string
		labels []string
		in     classifier.Input
		want   string
	}{
		{name: "short chat", in: classifier.Input{LastUser: "hi, how are you?", Turns: 1}, want: "simple"},
		{name: "long text", in: classifier.Input{LastUser: long, Turns: 1}, want: "complex"},
		{name: "long completion prompt", in: classifier.Input{Prompt: long}, want: "complex"},
		{name: "four tools", in: classifier.Input{LastUser: "list the files", Tools: tools, Turns: 3}, want: "complex"},
		{name: "code block and step by step", in: classifier.Input{LastUser: codeSteps, Turns: 1}, want: "complex"},
		{name: "three labels, short chat", labels: three, in: classifier.Input{LastUser: "thanks!", Turns: 1}, want: "simple"},
		{name: "three labels, long text", labels: three, in: classifier.Input{LastUser: long, Turns: 1}, want: "medium"},
		{name: "three labels, every sign", labels: three, in: hardest, want: "complex"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ls := tc.labels
			if ls == nil {
				ls = labels
			}
			c, err := classifier.New(filled(classifier.Options{Kind: "heuristic", Labels: ls}))
			if err != nil {
				t.Fatal(err)
			}
			r := c.Classify(context.Background(), tc.in)
			if r.Label != tc.want || r.Outcome != classifier.OutcomeOK {
				t.Errorf("Classify = %q/%q (%v), want %q/ok; hardness %.3f, scores %v",
					r.Label, r.Outcome, r.Err, tc.want, classifier.Hardness(&tc.in), r.Scores)
			}
			sum := 0.0
			for _, l := range ls {
				p, ok := r.Scores[l]
				if !ok || p < 0 || p > 1 {
					t.Errorf("score of %q = %v (present %v), want within [0, 1]", l, p, ok)
				}
				sum += p
				if p > r.Scores[r.Label] {
					t.Errorf("%q scores %v, above the chosen %q (%v)", l, p, r.Label, r.Scores[r.Label])
				}
			}
			if len(r.Scores) != len(ls) || math.Abs(sum-1) > 1e-9 {
				t.Errorf("scores %v sum to %v over %d labels, want 1 over %d", r.Scores, sum, len(r.Scores), len(ls))
			}
			if h := classifier.Hardness(&tc.in); h < 0 || h > 1 {
				t.Errorf("Hardness = %v, want within [0, 1]", h)
			}
		})
	}
}

func TestNewErrors(t *testing.T) {
	tests := []struct {
		name string
		o    classifier.Options
		want string
	}{
		{"unknown kind", classifier.Options{Kind: "oracle", Labels: labels}, `classifier: unknown kind "oracle" (known: heuristic, model)`},
		{"one label", classifier.Options{Kind: "heuristic", Labels: []string{"only"}}, "classifier: at least two labels are required"},
		{"on_error not a label", classifier.Options{Kind: "heuristic", Labels: labels, OnError: "hard"}, `classifier: on_error "hard" is not a label`},
		{"model without transport", classifier.Options{Kind: "model", Labels: labels}, "classifier: kind model needs a transport to its pool"},
		{"prompt written as a Go template", classifier.Options{Kind: "model", Labels: labels, Transport: &capture{}, Prompt: "Labels: {{range .Labels}}{{.}} {{end}}"},
			"classifier: a prompt is plain text, not a Go template: write {labels} where the list of labels goes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := classifier.New(filled(tc.o))
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("New: %v, want %q", err, tc.want)
			}
		})
	}
}

// filled sets what the config loader would fill in, where o leaves it zero.
func filled(o classifier.Options) classifier.Options {
	if o.OnError == "" && len(o.Labels) > 0 {
		o.OnError = o.Labels[len(o.Labels)-1]
	}
	if o.MaxInputChars == 0 {
		o.MaxInputChars = 4000
	}
	if o.Timeout == 0 {
		o.Timeout = 300 * time.Millisecond
	}
	if o.Concurrency == 0 {
		o.Concurrency = 64
	}
	return o
}
