package router

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/switchyard/switchyard/router/internal/wire"

	"github.com/tidwall/gjson"

	"github.com/switchyard/switchyard/classifier"
	"github.com/switchyard/switchyard/policy/routing"
)

// API names a request API the policy routes, as switchyard eval reports
// it: the endpoint a body is read as.
type API string

// The routed APIs.
const (
	APIChat        API = "chat"        // POST /v1/chat/completions
	APICompletions API = "completions" // POST /v1/completions
	APIResponses   API = "responses"   // POST /v1/responses (OpenAI's Responses API)
	APIMessages    API = "messages"    // POST /v1/messages (Anthropic's Messages API)
)

// APIs lists the routed APIs.
func APIs() []API { return []API{APIChat, APICompletions, APIResponses, APIMessages} }

var apiEndpoints = map[API]wire.Endpoint{
	APIChat:        wire.Chat,
	APICompletions: wire.Completions,
	APIResponses:   wire.Responses,
	APIMessages:    wire.Messages,
}

// DetectAPI says which API a request body speaks, from its top-level
// fields: input, instructions or previous_response_id without messages is
// the Responses API; messages with a top-level system field, or with
// Anthropic's shapes (a tool's input_schema, tool_use or tool_result
// content blocks) is the Messages API; other messages are chat; a prompt
// without messages is the completions API. Anything else is read as chat,
// so that parsing it names what is missing.
//
// A Messages request with none of those marks reads the same either way:
// the classifier and the policy see the same messages, text and tools.
func DetectAPI(body []byte) API {
	top := gjson.ParseBytes(body)
	msgs := top.Get("messages")
	switch {
	case !msgs.Exists() && (top.Get("input").Exists() || top.Get("instructions").Exists() || top.Get("previous_response_id").Exists()):
		return APIResponses
	case msgs.Exists():
		if top.Get("system").Exists() || anthropicShapes(top) {
			return APIMessages
		}
		return APIChat
	case top.Get("prompt").Exists():
		return APICompletions
	}
	return APIChat
}

// anthropicShapes reports whether a body uses shapes only the Messages API
// has: a tool with input_schema, or a tool_use or tool_result block.
func anthropicShapes(top gjson.Result) bool {
	found := false
	top.Get("tools").ForEach(func(_, t gjson.Result) bool {
		found = t.Get("input_schema").Exists()
		return !found
	})
	top.Get("messages").ForEach(func(_, m gjson.Result) bool {
		m.Get("content").ForEach(func(_, part gjson.Result) bool {
			switch part.Get("type").Str {
			case "tool_use", "tool_result":
				found = true
			}
			return !found
		})
		return !found
	})
	return found
}

// EvalRequest is a request body read for evaluation: parsed as the gateway
// parses it on its API's endpoint, with its model resolved, on the snapshot
// running when it was read.
type EvalRequest struct {
	API API
	// PromptTokens is the gateway's estimate of the prompt's size (the
	// prompt_tokens condition).
	PromptTokens int
	snap         *Snapshot
	info         *wire.Info
	policy       bool
}

// Model is the request's model name.
func (r *EvalRequest) Model() string { return r.info.Model }

// Routed reports whether the policy routes the request; false when its
// model names a pool (the route "direct").
func (r *EvalRequest) Routed() bool { return r.policy }

// PrepareEval reads body as a request of api. Its errors are those the
// gateway would answer the request with (400 for a body it cannot route,
// 404 for an unknown model), with their messages.
func (g *Gateway) PrepareEval(api API, body []byte) (*EvalRequest, error) {
	ep, ok := apiEndpoints[api]
	if !ok {
		names := make([]string, 0, len(apiEndpoints))
		for _, a := range APIs() {
			names = append(names, string(a))
		}
		return nil, fmt.Errorf("unknown API %q (known: %s)", api, strings.Join(names, ", "))
	}
	s := g.snap.Load()
	info, err := wire.Parse(body, ep, s.Config.Server.MaxJSONDepth)
	if err != nil {
		return nil, err
	}
	tgt, ok := s.resolve(info.Model)
	if !ok {
		return nil, fmt.Errorf("%w: the model `%s` does not exist", errModelNotFound, wire.Clip(info.Model))
	}
	return &EvalRequest{API: api, PromptTokens: info.PromptTokens, snap: s, info: info, policy: tgt.policy}, nil
}

// Evaluation is what the gateway makes of one request: the classifier's
// answer and the policy's decision.
type Evaluation struct {
	// Label and Scores are the classifier's answer. The classifier is
	// asked for every request, also when the policy decides without it
	// (Classified false), so that every request has a prediction.
	Label  string
	Scores map[string]float64
	// Outcome is how the answer was obtained (classifier.OutcomeOK,
	// OutcomeCacheHit, …); Err is set when the classifier could not
	// answer, and Label is then on_error's.
	Outcome string
	Err     error
	// Route and Pools are the policy's decision: the route, and the pools
	// in the order they would be tried. A model that names a pool gets
	// the route "direct".
	Route string
	Pools []string
	// Classified is true when the policy used the class.
	Classified bool
}

// Evaluate classifies r and decides its route as serving does, with the
// classifier input serving reads (a session's opening when the request
// has a session) and the classifier itself (its pool, cache and timeout),
// but without headers or an API key, without storing a session decision,
// and without sending r anywhere. Only the classifier call leaves the
// process. A gateway without a classifier leaves Label empty.
func (g *Gateway) Evaluate(ctx context.Context, r *EvalRequest) Evaluation {
	s, info := r.snap, r.info
	hr := (&http.Request{Header: http.Header{}}).WithContext(ctx)
	// As decide does, on a request without a key.
	preq, in, _ := policyRequest(s, hr, "", info)
	var e Evaluation
	var res classifier.Result
	if s.classifier != nil {
		res = s.classifier.Classify(ctx, in)
		e.Label, e.Scores, e.Outcome, e.Err = res.Label, res.Scores, res.Outcome, res.Err
	}
	if !r.policy {
		tgt, _ := s.resolve(info.Model)
		e.Route, e.Pools = "direct", []string{tgt.pool.Name}
		return e
	}
	// explain: true keeps the decision out of the session store, so every
	// request is decided on its own, as the first of its session.
	d := s.Policy.Decide(preq, func() routing.Classification {
		return routing.Classification{Label: res.Label, Scores: res.Scores}
	}, true)
	e.Route, e.Pools, e.Classified = d.Route, d.Pools, d.Classified
	return e
}
