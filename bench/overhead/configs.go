package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard/switchyard/classifier"
)

// Served model names of the three simulators the sim child runs.
const (
	chatModel     = "bench/chat"     // zero-delay upstream of every measurement
	classifyModel = "bench/classify" // zero-delay classifier pool
	slowModel     = "bench/slow"     // decodes slowly, for open streams
)

// The gateway configurations. Health probes are off so that no probe
// traffic lands in a measurement; every pool is a single replica.
const (
	configPinned = "pinned" // model = pool name, no classifier
	// configResume is pinned with stream resume on: what following each
	// stream to resume it costs.
	configResume = "pinned-resume"
	configHit    = "classifier-hit"  // kind model classifier, repeated prompts
	configMiss   = "classifier-miss" // kind model classifier, unique prompts
	// configBare is not Switchyard: a minimal Go reverse proxy in the same
	// child process, the floor any net/http gateway pays on this machine.
	// It is measured only when asked for.
	configBare = "bare-proxy"
)

// defaultConfigs are measured by default; knownConfigs can be asked for.
var (
	defaultConfigs = []string{configPinned, configHit, configMiss}
	knownConfigs   = []string{configPinned, configHit, configMiss, configResume, configBare}
)

const poolsYAML = `
version: 1
pools:
  chat:
    model: bench/chat
    health: {disabled: true}
    replicas: [{name: chat-a, url: "{{chat}}"}]
  slow:
    model: bench/slow
    health: {disabled: true}
    replicas: [{name: slow-a, url: "{{slow}}"}]
`

const pinnedYAML = poolsYAML + `
routes:
  - name: default
    to: chat
`

// classifierYAML calls the classifier for every "auto" request: the first
// route asks for the class. Both classes go to the same pool, so the
// upstream work equals the direct side's.
const classifierYAML = poolsYAML + `  classify:
    model: bench/classify
    health: {disabled: true}
    replicas: [{name: classify-a, url: "{{classify}}"}]
classifier:
  kind: model
  pool: classify
  labels: [simple, complex]
models:
  - {name: auto, route: policy}
routes:
  - name: complex
    when: {class: complex}
    to: chat
  - name: default
    to: chat
`

// gatewayYAML returns the config text for name with the simulators' base
// URLs filled in.
func gatewayYAML(name string, sims simAddrs) (string, error) {
	var y string
	switch name {
	case configPinned, configBare:
		y = pinnedYAML
	case configResume:
		y = strings.ReplaceAll(pinnedYAML, "    health: {disabled: true}\n", "    health: {disabled: true}\n    resume: {enabled: true}\n")
	case configHit, configMiss:
		y = classifierYAML
	default:
		return "", fmt.Errorf("config %q: unknown (known: %s)", name, strings.Join(knownConfigs, ", "))
	}
	r := strings.NewReplacer("{{chat}}", "http://"+sims.Chat, "{{slow}}", "http://"+sims.Slow, "{{classify}}", "http://"+sims.Classify)
	return r.Replace(y), nil
}

// gatewayModel is the model a client names to the gateway under config name.
func gatewayModel(name string) string {
	switch name {
	case configPinned, configResume:
		return "chat" // the pool's name: a direct target, no policy
	case configBare:
		return chatModel // the bare proxy rewrites nothing
	}
	return "auto"
}

// seqMarker stands for a request's sequence number in a body template.
const seqMarker = "@@SEQ@@"

// hitPrompts is how many distinct prompts the cache-hit config repeats.
const hitPrompts = 8

// bodyTemplate is a request body with at most one place for a number.
type bodyTemplate struct {
	head, tail []byte
	fixed      bool // no number: head is the whole body
	mod        uint64
}

func newTemplate(body string, mod uint64) bodyTemplate {
	head, tail, found := strings.Cut(body, seqMarker)
	return bodyTemplate{head: []byte(head), tail: []byte(tail), fixed: !found, mod: mod}
}

// body returns the body of request seq. A fixed template returns the same
// slice every time (callers must not modify it).
func (t bodyTemplate) body(seq uint64) []byte {
	if t.fixed {
		return t.head
	}
	if t.mod > 0 {
		seq %= t.mod
	}
	b := make([]byte, 0, len(t.head)+len(t.tail)+20)
	b = append(b, t.head...)
	b = strconv.AppendUint(b, seq, 10)
	return append(b, t.tail...)
}

// userPrompt is the user turn of config name. It holds no word that makes
// the simulator's chooser answer "complex"; both classes go to one pool
// anyway.
func userPrompt(name string) string {
	switch name {
	case configHit:
		return "Describe the harbor in one line, variant " + seqMarker + "."
	case configMiss:
		return "Describe the harbor in one line, request " + seqMarker + "."
	}
	return "Describe the harbor in one line."
}

const systemPrompt = "You are terse."

// chatBody is the chat request body naming model. max_tokens is left to
// the simulator's default.
func chatBody(model, user string, stream bool) string {
	s := ""
	if stream {
		s = `,"stream":true`
	}
	return fmt.Sprintf(`{"model":%q%s,"messages":[{"role":"system","content":%q},{"role":"user","content":%q}]}`, model, s, systemPrompt, user)
}

// templates returns the gateway's and the direct side's body templates of
// config name, with the same prompts.
func templates(name string, stream bool) (gw, direct bodyTemplate) {
	var mod uint64
	if name == configHit {
		mod = hitPrompts
	}
	user := userPrompt(name)
	return newTemplate(chatBody(gatewayModel(name), user, stream), mod), newTemplate(chatBody(chatModel, user, stream), mod)
}

// errCaptured stops the classifier once its request body is captured.
var errCaptured = errors.New("captured")

type captureTransport struct{ body []byte }

func (c *captureTransport) ChatCompletion(_ context.Context, body []byte) ([]byte, error) {
	c.body = bytes.Clone(body)
	return nil, errCaptured
}

// classifierTemplate is the exact body the gateway's classifier sends to its
// pool for the prompts of config name, built by the classifier package
// itself with the labels of classifierYAML.
func classifierTemplate(name string) (bodyTemplate, error) {
	ct := &captureTransport{}
	c, err := classifier.New(classifier.Options{Kind: "model", Labels: []string{"simple", "complex"}, Model: classifyModel, Transport: ct,
		OnError: "complex", MaxInputChars: 4000, Timeout: time.Second, Concurrency: 1})
	if err != nil {
		return bodyTemplate{}, err
	}
	c.Classify(context.Background(), classifier.Input{System: systemPrompt, LastUser: userPrompt(name), Turns: 2})
	if ct.body == nil {
		return bodyTemplate{}, errors.New("classifier sent no request")
	}
	var mod uint64
	if name == configHit {
		mod = hitPrompts
	}
	return newTemplate(string(ct.body), mod), nil
}
