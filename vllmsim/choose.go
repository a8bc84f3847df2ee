package vllmsim

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Message is one chat message as a Chooser sees it: its role and the text of
// its content (text parts joined; other parts dropped).
type Message struct {
	Role    string
	Content string
}

// ChoiceRequest is what a Chooser decides on: the labels a constrained-choice
// request allows and the request's input.
type ChoiceRequest struct {
	// Choices are the allowed labels, in request order.
	Choices []string
	// Messages are the chat messages (empty for /v1/completions).
	Messages []Message
	// Prompt is the completion prompt (empty for chat, and for prompts given as
	// token ids).
	Prompt string
	// ToolsCount is the number of tools the request offers.
	ToolsCount int
}

// Chooser decides the answer of a constrained-choice request: a label, which
// must be one of req.Choices, and the probability of each label, used for the
// logprobs of the answer (labels missing or at 0 are left out of
// top_logprobs). A nil map means the label is certain. A Chooser is called
// concurrently and must not retain req.
type Chooser func(req ChoiceRequest) (label string, probs map[string]float64)

// longPromptChars is the user-text length beyond which DefaultChooser treats a
// request as hard.
const longPromptChars = 1500

// reasoningMarkers are words that make DefaultChooser treat a request as hard.
// Each must start a word ("improve" does not match "prove"); suffixes are
// allowed ("debugging" matches "debug").
var reasoningMarkers = []string{"prove", "step by step", "analyze", "analyse", "design", "debug", "why"}

// DefaultChooser is a deterministic rule that gives a realistic mix of easy
// and hard answers. The last label is taken to be the hardest class and is
// chosen when the request shows a sign of difficulty: more than 1,500 bytes of
// user text, three tools or more, or a reasoning marker ("prove", "step by
// step", "analyze", "design", "debug", "why") in the user text. Otherwise the
// first label is chosen. The chosen label gets probability 0.9 for an easy
// answer and 0.85, 0.9 or 0.95 for a hard one with one, two or three signs;
// the other labels share the rest equally. With no labels it returns "" and
// nil.
func DefaultChooser(req ChoiceRequest) (string, map[string]float64) {
	if len(req.Choices) == 0 {
		return "", nil
	}
	var userLen int
	for _, m := range req.Messages {
		if m.Role == "user" {
			userLen += len(m.Content)
		}
	}
	userLen += len(req.Prompt)

	signs := 0
	if userLen > longPromptChars {
		signs++
	}
	if req.ToolsCount >= 3 {
		signs++
	}
	if hasReasoningMarker(req) {
		signs++
	}

	label, confidence := req.Choices[0], 0.9
	if signs > 0 {
		label, confidence = req.Choices[len(req.Choices)-1], 0.8+0.05*float64(signs)
	}
	probs := make(map[string]float64, len(req.Choices))
	for _, c := range req.Choices {
		probs[c] = 0
	}
	if len(probs) == 1 {
		probs[label] = 1
		return label, probs
	}
	rest := (1 - confidence) / float64(len(probs)-1)
	for c := range probs {
		probs[c] = rest
	}
	probs[label] = confidence
	return label, probs
}

// hasReasoningMarker reports whether the user text of req holds a reasoning
// marker at the start of a word.
func hasReasoningMarker(req ChoiceRequest) bool {
	for _, m := range req.Messages {
		if m.Role == "user" && containsMarker(m.Content) {
			return true
		}
	}
	return containsMarker(req.Prompt)
}

func containsMarker(text string) bool { return containsWord(text, reasoningMarkers) }

// containsWord reports whether text holds one of markers (lower case) at
// the start of a word, ignoring case.
func containsWord(text string, markers []string) bool {
	if text == "" {
		return false
	}
	lower := strings.ToLower(text)
	for _, marker := range markers {
		for from := 0; ; {
			i := strings.Index(lower[from:], marker)
			if i < 0 {
				break
			}
			at := from + i
			if at == 0 {
				return true
			}
			if r, _ := utf8.DecodeLastRuneInString(lower[:at]); !unicode.IsLetter(r) && !unicode.IsDigit(r) {
				return true
			}
			from = at + len(marker)
		}
	}
	return false
}
