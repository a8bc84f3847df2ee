package classifier_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/switchyard/switchyard/classifier"
)

func TestParse(t *testing.T) {
	three := []string{"simple", "medium", "complex"}
	tests := []struct {
		name    string
		labels  []string
		raw     []byte
		label   string
		scores  map[string]float64
		wantErr bool
	}{
		{
			name:   "renormalised over the labels",
			raw:    answer("simple", top{"simple", 0.6}, top{"complex", 0.3}, top{"\n", 0.1}),
			label:  "simple",
			scores: map[string]float64{"simple": 2.0 / 3, "complex": 1.0 / 3},
		},
		{
			name:   "a label never listed gets 0",
			labels: three,
			raw:    answer("simple", top{"simple", 0.7}, top{"medium", 0.2}, top{"xyz", 0.1}),
			label:  "simple",
			scores: map[string]float64{"simple": 0.7 / 0.9, "medium": 0.2 / 0.9, "complex": 0},
		},
		{
			name:   "a prefix token counts for its label",
			raw:    answer("complex", top{"comp", 0.6}, top{"simple", 0.2}, top{"The", 0.2}),
			label:  "complex",
			scores: map[string]float64{"complex": 0.75, "simple": 0.25},
		},
		{
			name:   "a prefix of two labels is split between them",
			labels: []string{"simple", "complex", "creative"},
			raw:    answer("simple", top{"simple", 0.6}, top{"c", 0.4}),
			label:  "simple",
			scores: map[string]float64{"simple": 0.6, "complex": 0.2, "creative": 0.2},
		},
		{
			name:   "an exact token is not also a prefix",
			labels: []string{"code", "code-review"},
			raw:    answer("code", top{"code", 0.5}, top{"code-review", 0.5}),
			label:  "code",
			scores: map[string]float64{"code": 0.5, "code-review": 0.5},
		},
		{
			name:   "tokens match with spaces and any case",
			raw:    answer("complex", top{" Complex", 0.8}, top{" simple", 0.2}),
			label:  "complex",
			scores: map[string]float64{"complex": 0.8, "simple": 0.2},
		},
		{
			name:   "the answer may disagree with the logprobs",
			raw:    answer("complex", top{"simple", 0.55}, top{"complex", 0.45}),
			label:  "complex",
			scores: map[string]float64{"simple": 0.55, "complex": 0.45},
		},
		{
			name:   "no logprobs: the chosen label is certain",
			raw:    answer("complex"),
			label:  "complex",
			scores: map[string]float64{"simple": 0, "complex": 1},
		},
		{
			name:   "only junk in the logprobs: the chosen label is certain",
			raw:    answer("simple", top{"\n", 0.9}, top{"Sure", 0.1}),
			label:  "simple",
			scores: map[string]float64{"simple": 1, "complex": 0},
		},
		{
			name:   "free text matched case-insensitively",
			raw:    answer("  Complex. "),
			label:  "complex",
			scores: map[string]float64{"simple": 0, "complex": 1},
		},
		{
			name:   "quoted label",
			raw:    answer(`"simple"`),
			label:  "simple",
			scores: map[string]float64{"simple": 1, "complex": 0},
		},
		{name: "garbage reply", raw: answer("I would say it is rather hard"), wantErr: true},
		{name: "empty reply", raw: answer(""), wantErr: true},
		{name: "label inside a sentence", raw: answer("complex, because it is long"), wantErr: true},
		{name: "empty choices", raw: []byte(`{"id":"x","object":"chat.completion","choices":[]}`), wantErr: true},
		{name: "no choices field", raw: []byte(`{"object":"error","message":"bad"}`), wantErr: true},
		{name: "malformed JSON", raw: []byte(`{"choices":[{"message":`), wantErr: true},
		{name: "not JSON", raw: []byte(`Internal Server Error`), wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ls := tc.labels
			if ls == nil {
				ls = labels
			}
			label, scores, err := classifier.Parse(tc.raw, ls)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("Parse = %q, %v; want an error", label, scores)
				}
				if label != "" || scores != nil {
					t.Errorf("Parse returned %q, %v with its error; want nothing", label, scores)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if label != tc.label {
				t.Errorf("label = %q, want %q", label, tc.label)
			}
			if diff := cmp.Diff(tc.scores, scores, cmpopts.EquateApprox(0, 1e-12)); diff != "" {
				t.Errorf("scores (-want +got):\n%s", diff)
			}
		})
	}
}
