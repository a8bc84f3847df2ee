package classifier

import (
	"context"
	"math"
	"strings"
)

// heuristic classifies without a model from cheap features: length, tools,
// code blocks, reasoning markers and the number of turns. It scores how
// hard the request looks (0..1) and maps that onto the labels in order:
// the first label is the easiest class, the last the hardest.
type heuristic struct{ labels []string }

func newHeuristic(labels []string) *heuristic { return &heuristic{labels: labels} }

var reasoningMarkers = []string{
	"step by step", "prove", "derive", "analyze", "analyse", "design", "debug",
	"refactor", "architecture", "trade-off", "tradeoff", "why ", "explain how",
	"plan ", "optimize", "optimise", "root cause",
}

// Hardness returns the heuristic's difficulty score in [0, 1].
func Hardness(in *Input) float64 {
	text := in.LastUser
	if in.Prompt != "" {
		text = in.Prompt
	}
	lower := strings.ToLower(text)
	z := -2.0
	z += math.Min(float64(len(text))/1500, 2.5)    // long inputs
	z += 0.8 * math.Min(float64(len(in.Tools)), 5) // three tools or more tip it to hard
	if strings.Contains(text, "```") {
		z += 1.2
	}
	markers := 0
	for _, m := range reasoningMarkers {
		if strings.Contains(lower, m) {
			markers++
		}
	}
	z += 1.1 * math.Min(float64(markers), 3)
	if in.Turns > 6 {
		z += 0.5
	}
	return 1 / (1 + math.Exp(-2*z))
}

func (h *heuristic) classify(_ context.Context, in *Input) (string, map[string]float64, error) {
	p := Hardness(in)
	n := len(h.labels)
	// Spread the score over the labels: a triangular weight around the
	// position p takes on the label scale.
	scores := make(map[string]float64, n)
	pos := p * float64(n-1)
	total := 0.0
	for i, l := range h.labels {
		w := math.Max(0, 1-math.Abs(pos-float64(i)))
		scores[l] = w
		total += w
	}
	best, bestW := h.labels[0], -1.0
	for _, l := range h.labels {
		scores[l] /= total
		if scores[l] > bestW {
			best, bestW = l, scores[l]
		}
	}
	return best, scores, nil
}
