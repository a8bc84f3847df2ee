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

// reasoningMarkers are words that ask for reasoning or a plan: a user
// instruction with one is a task for the larger model. Each must start a
// word ("improve" does not match "prove"); suffixes are allowed
// ("debugging" matches "debug").
var reasoningMarkers = []string{"prove", "step by step", "analyze", "analyse", "design", "debug", "diagnose",
	"why", "investigate", "root cause"}

// failureMarkers are words a tool output that shows a failure holds.
var failureMarkers = []string{"error", "traceback", "exception", "fail", "panic", "not found", "no such file",
	"permission denied", "exited with code 1", "exit code 1", "exit status 1", `"success":false`, "command not found"}

// The headings of the gateway's classifier summary (classifier.Summary)
// that the chooser reads: what the turn is and its evidence.
const (
	summaryLast        = "\nLast message: "
	summaryInstruction = "\nCurrent instruction:\n"
	summaryToolResult  = "\nLatest tool result (excerpt):\n"
	summaryContext     = "\nTask opening (context):\n"
	summarySystem      = "\nSystem prompt (start):\n"
)

// DefaultChooser answers as the reference policy's labels ask a model to,
// from the evidence of the turn, never from its length or its tool count.
// The last label is taken to be the hardest class (complex), the first
// the easiest (simple). For the gateway's classifier summary it reads the
// turn it describes:
//
//   - a tool result is complex when its excerpt shows a failure to
//     diagnose (an error, a traceback, an exception, a failing test, a
//     non-zero exit, not found), simple when it is a routine step;
//   - a new instruction is complex when the user's own words ask for
//     reasoning or a plan (prove, step by step, analyze, design, debug,
//     diagnose, why, investigate, root cause), simple otherwise.
//
// Any other request (not a summary) is judged on its user text's words
// the same way. The chosen label gets probability 0.9 for simple and
// 0.85, 0.9 or 0.95 for complex with one, two or three signs; the other
// labels share the rest equally. With no labels it returns "" and nil.
func DefaultChooser(req ChoiceRequest) (string, map[string]float64) {
	if len(req.Choices) == 0 {
		return "", nil
	}
	signs := turnSigns(req)
	label, confidence := req.Choices[0], 0.9
	if signs > 0 {
		label, confidence = req.Choices[len(req.Choices)-1], 0.8+0.05*float64(min(signs, 3))
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

// turnSigns counts the signs that the request's turn is complex: the
// failure markers of a tool result, or the reasoning markers of the
// user's words.
func turnSigns(req ChoiceRequest) int {
	user := req.Prompt
	for _, m := range req.Messages {
		if m.Role == "user" {
			user = m.Content
		}
	}
	text := "\n" + user
	instr, ok := section(text, summaryInstruction)
	if !ok {
		return countWords(ownWords(user), reasoningMarkers)
	}
	if strings.Contains(text, summaryLast+"a tool result") {
		result, _ := section(text, summaryToolResult)
		return countWords(result, failureMarkers)
	}
	return countWords(ownWords(instr), reasoningMarkers)
}

// section is the text under heading in a summary, up to the next heading.
func section(text, heading string) (string, bool) {
	i := strings.Index(text, heading)
	if i < 0 {
		return "", false
	}
	rest := text[i+len(heading):]
	for _, h := range []string{summaryToolResult, summaryContext, summarySystem} {
		if j := strings.Index(rest, h); j >= 0 {
			rest = rest[:j]
		}
	}
	return rest, true
}

// countWords counts the markers found in text at the start of a word.
func countWords(text string, markers []string) int {
	n := 0
	for _, m := range markers {
		if containsWord(text, []string{m}) {
			n++
		}
	}
	return n
}

// ownWords is text without the blocks agents add to the user's turn on
// their own (<system-reminder>…</system-reminder>, <environment_context>…
// and the like): a lower-case tag name at the start of a line or of the
// text, up to its end tag.
func ownWords(text string) string {
	for from := 0; from < len(text); {
		start := strings.IndexByte(text[from:], '<')
		if start < 0 {
			break
		}
		start += from
		name := text[start+1:]
		n := 0
		for n < len(name) && (name[n] >= 'a' && name[n] <= 'z' || name[n] == '_' || name[n] == '-' || name[n] == ':') {
			n++
		}
		if n == 0 || n >= len(name) || name[n] != '>' {
			from = start + 1 // not a tag: "a < b", "<3"
			continue
		}
		end := strings.Index(text[start:], "</"+name[:n]+">")
		if end < 0 {
			return text[:start] // a block that runs to the end
		}
		text = text[:start] + text[start+end+n+3:]
		from = start
	}
	return text
}

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
