package classifier

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"

	openai "github.com/sashabaranov/go-openai"
	"github.com/tidwall/gjson"
)

// LabelsPlaceholder in a prompt is replaced with the labels, one line each:
// "- name: meaning", or "- name" for a label without a meaning.
const LabelsPlaceholder = "{labels}"

// DefaultPrompt is the classifier's system prompt. It states each label's
// meaning; the labels are also enforced by constrained decoding.
const DefaultPrompt = `You route requests for an AI gateway. Read the request summary and answer with exactly one label, nothing else.
Labels:
` + LabelsPlaceholder

// CheckPrompt refuses a prompt written as a Go template. Prompts are plain
// text with LabelsPlaceholder: running text/template would make the linker
// keep every exported method of every type in the binary, since its
// executor looks methods up by name (7 MB of an unstripped binary, 3 MB
// of idle memory).
func CheckPrompt(text string) error {
	if i := strings.Index(text, "{{"); i >= 0 && strings.Contains(text[i:], "}}") {
		return fmt.Errorf("a prompt is plain text, not a Go template: write %s where the list of labels goes", LabelsPlaceholder)
	}
	return nil
}

// renderPrompt replaces LabelsPlaceholder in text with the labels.
func renderPrompt(text string, labels []string, descs map[string]string) string {
	var list strings.Builder
	for i, l := range labels {
		if i > 0 {
			list.WriteByte('\n')
		}
		list.WriteString("- ")
		list.WriteString(l)
		if d := descs[l]; d != "" {
			list.WriteString(": ")
			list.WriteString(d)
		}
	}
	return strings.ReplaceAll(text, LabelsPlaceholder, list.String())
}

// modelBackend asks a small model for a constrained choice among the labels
// in one decode step and reads a probability per label from the logprobs.
type modelBackend struct {
	o        *Options
	prompt   string
	maxToks  int
	topProbs int
}

func newModelBackend(o *Options) (backend, error) {
	if o.Transport == nil {
		return nil, errors.New("classifier: kind model needs a transport to its pool")
	}
	text := o.Prompt
	if text == "" {
		text = DefaultPrompt
	}
	if err := CheckPrompt(text); err != nil {
		return nil, fmt.Errorf("classifier: %w", err)
	}
	longest := 0
	for _, l := range o.Labels {
		longest = max(longest, len(l))
	}
	return &modelBackend{
		o:      o,
		prompt: renderPrompt(text, o.Labels, o.Descriptions),
		// A label is at most one token per byte; constrained decoding stops
		// at the end of the label, so this only bounds a misbehaving server.
		maxToks:  max(longest, 1),
		topProbs: min(max(len(o.Labels), 5), 20),
	}, nil
}

// chatRequest is go-openai's request plus the vLLM fields it lacks.
// Temperature shadows the embedded field so that 0 is sent rather than
// omitted (go-openai tags it omitempty).
//
// The answer's length is bounded with max_completion_tokens, which vLLM
// accepts since v0.6.4 (vllm-project/vllm#9837). LegacyMaxTokens sends the
// older max_tokens instead, only with guided_choice: that switch exists for
// older vLLM servers, and from v0.4.2 (vllm-project/vllm#4355) until v0.6.4
// (vllm-project/vllm#10463) vLLM answers 400 to a field it does not know.
type chatRequest struct {
	openai.ChatCompletionRequest
	Temperature       float32            `json:"temperature"`
	LegacyMaxTokens   int                `json:"max_tokens,omitempty"`
	StructuredOutputs *structuredOutputs `json:"structured_outputs,omitempty"`
}

type structuredOutputs struct {
	Choice []string `json:"choice"`
}

// Request builds the exact request body sent to the classifier pool.
func (b *modelBackend) Request(in *Input) ([]byte, error) {
	req := chatRequest{
		ChatCompletionRequest: openai.ChatCompletionRequest{
			Model: b.o.Model,
			Messages: []openai.ChatCompletionMessage{
				{Role: openai.ChatMessageRoleSystem, Content: b.prompt},
				{Role: openai.ChatMessageRoleUser, Content: in.summary()},
			},
			LogProbs:           true,
			TopLogProbs:        b.topProbs,
			ChatTemplateKwargs: map[string]any{"enable_thinking": false},
		},
		Temperature: 0,
	}
	if b.o.GuidedChoice {
		req.GuidedChoice = b.o.Labels
		req.LegacyMaxTokens = b.maxToks
	} else {
		req.StructuredOutputs = &structuredOutputs{Choice: b.o.Labels}
		req.MaxCompletionTokens = b.maxToks
	}
	return json.Marshal(req)
}

func (b *modelBackend) classify(ctx context.Context, in *Input) (string, map[string]float64, error) {
	body, err := b.Request(in)
	if err != nil {
		return "", nil, err
	}
	raw, err := b.o.Transport.ChatCompletion(ctx, body)
	if err != nil {
		return "", nil, err
	}
	return Parse(raw, b.o.Labels)
}

// Parse reads a classifier answer. The label is the reply matched exactly,
// then case-insensitively; anything else is an error (the caller uses
// on_error). Scores come from the first token's top logprobs, renormalised
// over the labels; without logprobs the chosen label gets probability 1.
func Parse(raw []byte, labels []string) (string, map[string]float64, error) {
	// Only the first choice's content and first-token logprobs matter;
	// gjson reads them in place, which costs a fraction of decoding the
	// whole answer into openai.ChatCompletionResponse on every cache miss.
	if !gjson.ValidBytes(raw) {
		return "", nil, errors.New("classifier: decode response: not valid JSON")
	}
	ch := gjson.GetBytes(raw, "choices.0")
	if !ch.Exists() {
		return "", nil, errors.New("classifier: response has no choices")
	}
	content := ch.Get("message.content").String()
	label := matchLabel(content, labels)
	if label == "" {
		return "", nil, fmt.Errorf("classifier: reply %q is not a label", truncateForError(content))
	}
	scores := make(map[string]float64, len(labels))
	for _, l := range labels {
		scores[l] = 0
	}
	first := ch.Get("logprobs.content.0")
	if first.Exists() {
		tops := first.Get("top_logprobs").Array()
		if len(tops) == 0 {
			tops = []gjson.Result{first}
		}
		total := 0.0
		for _, t := range tops {
			lp := t.Get("logprob")
			if lp.Type != gjson.Number {
				continue
			}
			p := math.Exp(lp.Float())
			if math.IsNaN(p) || p <= 0 {
				continue
			}
			matched := tokenLabels(t.Get("token").String(), labels)
			for _, l := range matched {
				scores[l] += p / float64(len(matched))
				total += p / float64(len(matched))
			}
		}
		if total > 0 {
			for l := range scores {
				scores[l] /= total
			}
			return label, scores, nil
		}
	}
	scores[label] = 1
	return label, scores, nil
}

// tokenLabels are the labels a first token stands for: the label it equals,
// else every label it is a prefix of (split evenly between them).
func tokenLabels(token string, labels []string) []string {
	t := strings.ToLower(strings.TrimSpace(token))
	if t == "" {
		return nil
	}
	var out []string
	for _, l := range labels {
		ll := strings.ToLower(l)
		if ll == t {
			return []string{l}
		}
		if strings.HasPrefix(ll, t) {
			out = append(out, l)
		}
	}
	return out
}

func matchLabel(reply string, labels []string) string {
	for _, l := range labels {
		if reply == l {
			return l
		}
	}
	r := strings.TrimSpace(strings.Trim(strings.TrimSpace(reply), `"'.`))
	for _, l := range labels {
		if strings.EqualFold(r, l) {
			return l
		}
	}
	return ""
}

func truncateForError(s string) string {
	if len(s) > 64 {
		return validUTF8Prefix(s[:64]) + "…"
	}
	return s
}
