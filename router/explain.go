package router

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"

	"github.com/switchyard/switchyard/router/internal/wire"

	"github.com/switchyard/switchyard/policy"
	"github.com/switchyard/switchyard/policy/routing"
	"github.com/switchyard/switchyard/pools"
)

// Explanation is the answer of explain.
type Explanation struct {
	Route   string `json:"route"`
	Pool    string `json:"pool"`
	Replica string `json:"replica,omitempty"`
	// Replicas is each replica of the pool as the balancer saw it: left
	// out by the filter (why), or its score and whether it was picked.
	Replicas []pools.ReplicaScore `json:"replicas,omitempty"`
	Class    string               `json:"class,omitempty"`
	Scores   map[string]float64   `json:"scores"`
	Matched  []string             `json:"matched"`
	Skipped  []routing.Skip       `json:"skipped"`
	Fallback []string             `json:"fallback"`
	Spill    *policy.Spill        `json:"spill,omitempty"`
	Sticky   bool                 `json:"sticky,omitempty"`
	// Why are the matched route's conditions that held, with the
	// request's values.
	Why []string `json:"why,omitempty"`
	// Side: a side route decided the request (routed on its own, the
	// session's decision unchanged).
	Side bool `json:"side,omitempty"`
	// Session is what the session store would do (new, kept, moved_up,
	// side, not_kept) and SessionReason says it in words; both absent
	// without a session id.
	Session       string `json:"session,omitempty"`
	SessionReason string `json:"session_reason,omitempty"`
	// Turn is what the request's last message is (instruction,
	// tool_result); ToolError why its latest tool result reads as a
	// failure; RepeatedCall the tool whose latest call repeats an earlier
	// identical one. Each absent when not set.
	Turn         string `json:"turn,omitempty"`
	ToolError    string `json:"tool_error,omitempty"`
	RepeatedCall string `json:"repeated_call,omitempty"`
	// ClassifierInput is the text the model classifier reads for this
	// request (absent without a model classifier).
	ClassifierInput string `json:"classifier_input,omitempty"`
	// ContextSkips are the pools of the chain the request would skip
	// because its prompt estimate and a minimal answer cannot fit their
	// max_model_len (the last pool of the chain is never skipped).
	ContextSkips []string `json:"context_skips,omitempty"`
	// Classifier says how the class was obtained when the classifier was
	// asked; Fallback is true when it could not answer and on_error's
	// label was used.
	Classifier *ClassifierOutcome `json:"classifier,omitempty"`
}

// ClassifierOutcome is the classifier's part of an explanation.
type ClassifierOutcome struct {
	Result   string `json:"result"`
	Fallback bool   `json:"fallback"`
	Error    string `json:"error,omitempty"`
}

// Explain says which route, pool and replica a request body would get and
// why. With class set, the classifier is not called; without it the
// classifier runs as for a request (and is counted and cached like one).
// No request is sent to a replica, no session decision is stored, and no
// API key is presented, so key conditions do not match.
func (g *Gateway) Explain(ctx context.Context, header http.Header, body []byte, class string) (*Explanation, error) {
	return g.ExplainAPI(ctx, header, body, class, "")
}

// ExplainAPI is Explain for a body of api (chat, completions, responses or
// messages); "" detects it from the body (DetectAPI) or, with an
// anthropic-version header, takes the Messages API. The decision is made
// as serving makes it (the same policy request, session and sticky
// decision); class, when set, stands in for the classifier's answer.
func (g *Gateway) ExplainAPI(ctx context.Context, header http.Header, body []byte, class, api string) (*Explanation, error) {
	s := g.snap.Load()
	if api == "" {
		api = string(DetectAPI(body))
		if header.Get("Anthropic-Version") != "" {
			api = string(APIMessages)
		}
	}
	ep, ok := apiEndpoints[API(api)]
	if !ok {
		names := make([]string, 0, len(apiEndpoints))
		for _, a := range APIs() {
			names = append(names, string(a))
		}
		return nil, wire.BadRequest("api", fmt.Sprintf("unknown API %q (known: %s)", wire.Clip(api), strings.Join(names, ", ")))
	}
	info, err := wire.Parse(body, ep, s.Config.Server.MaxJSONDepth)
	if err != nil {
		return nil, err
	}
	x := &exchange{snap: s, info: info, body: body, id: "explain", ep: ep}
	tgt, ok := s.resolve(info.Model)
	if !ok {
		return nil, toAPIError(errModelNotFound, "the model `"+wire.Clip(info.Model)+"` does not exist")
	}
	if class != "" && s.classifier != nil && !slices.Contains(s.classifier.Labels(), class) {
		return nil, wire.BadRequest("class", fmt.Sprintf("class %q is not a label (labels: %s)", wire.Clip(class), strings.Join(s.classifier.Labels(), ", ")))
	}
	var d routing.Decision
	r := (&http.Request{Header: header}).WithContext(ctx)
	if r.Header == nil {
		r.Header = http.Header{}
	}
	if !tgt.policy {
		d = routing.Decision{Route: "direct", Pools: []string{tgt.pool.Name}, Matched: []string{"direct"}}
	} else {
		x.classify.force = class
		d = g.decide(ctx, r, x, true)
	}
	e := &Explanation{Route: d.Route, Pool: d.Pools[0], Fallback: d.Pools[1:], Matched: d.Matched, Skipped: d.Skipped,
		Spill: d.Spill, Sticky: d.Sticky, Scores: d.Scores, Why: d.Why, Side: d.Side, Session: d.Session, SessionReason: d.SessionReason,
		Turn: x.sess.turn, ToolError: x.sess.toolError, RepeatedCall: x.sess.repeated}
	e.ClassifierInput = x.classify.explained
	for i, p := range d.Pools[:len(d.Pools)-1] {
		if ps := s.pools[p]; ps != nil && !fitsContext(ps, x) {
			e.ContextSkips = append(e.ContextSkips, d.Pools[i])
		}
	}
	e.Scores = rounded(e.Scores)
	if e.Scores == nil {
		e.Scores = map[string]float64{}
	}
	if e.Matched == nil {
		e.Matched = []string{}
	}
	if e.Skipped == nil {
		e.Skipped = []routing.Skip{}
	}
	if d.Classified {
		e.Class = d.Class
	}
	if r := x.classify.res; r.Outcome != "" {
		e.Classifier = &ClassifierOutcome{Result: r.Outcome, Fallback: r.Fallback()}
		if r.Err != nil {
			e.Classifier.Error = r.Err.Error()
		}
	}
	if ps := s.pools[e.Pool]; ps != nil {
		preq := &pools.Request{}
		if ps.NeedsKey() {
			preq.Key = affinityKey(x, r, ps.cfg.Affinity.Depth)
		}
		rep, scores := ps.Explain(preq)
		if rep != nil {
			e.Replica = rep.Name
		}
		e.Replicas = scores
	}
	return e, nil
}

// rounded returns scores rounded to 3 decimals, for people to read
// (0.85, not 0.8500000000000001).
func rounded(scores map[string]float64) map[string]float64 {
	if scores == nil {
		return nil
	}
	out := make(map[string]float64, len(scores))
	for k, v := range scores {
		out[k] = math.Round(v*1000) / 1000
	}
	return out
}
