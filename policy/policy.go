package policy

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// Request is what the policy reads of one request. The router fills it from
// the body's few routing fields and the headers; the policy never sees the
// body itself.
type Request struct {
	Model        string
	Stream       bool
	Tools        int
	Messages     int
	PromptTokens int
	Header       http.Header
	// Key is the authenticated API key's name ("" without auth).
	Key string
	// Session is the session id (configured header, else the `user` field).
	Session string
}

// Classification is the classifier's answer for one request.
type Classification struct {
	Label string
	// Scores holds a probability per label (they sum to 1 when known).
	Scores map[string]float64
	// Fallback: the classifier could not answer and Label is on_error's.
	Fallback bool
}

// Decision is the outcome of evaluating the routes for one request.
type Decision struct {
	Route string
	// Pools are tried in order: the chosen target, then the route's fallbacks.
	Pools []string
	Spill *Spill
	// Classified is true when the classifier's answer was used (or a sticky
	// session reused a class); Class and Scores are then set.
	Classified bool
	Class      string
	Scores     map[string]float64
	// Sticky is true when the decision was reused from the session store.
	Sticky bool
	// Matched and Skipped are filled only when explaining.
	Matched []string `json:"matched"`
	Skipped []Skip   `json:"skipped"`
}

// Skip records why a route did not match (explain only).
type Skip struct {
	Route  string `json:"route"`
	Reason string `json:"reason"`
}

// ClassifyFunc returns the classification of the request being decided. The
// policy calls it at most once per decision, and only when evaluation reaches
// a class or score condition.
type ClassifyFunc func() Classification

// Policy is the compiled, immutable routes section.
type Policy struct {
	routes   []*route
	pools    map[string]bool
	sessions *Sessions
	rand     func() uint64
	// ctrl moves the auto score bounds (control.share); nil without one.
	ctrl *Controller
}

// WithController sets the share controller (one kept across reloads);
// without it, New makes one when the config has control.share.
func WithController(c *Controller) Option { return func(p *Policy) { p.ctrl = c } }

// Controller is the policy's share controller, nil without control.share.
func (p *Policy) Controller() *Controller { return p.ctrl }

// Option configures a Policy.
type Option func(*Policy)

// WithSessions enables sticky decisions kept in s.
func WithSessions(s *Sessions) Option { return func(p *Policy) { p.sessions = s } }

// WithRand injects the randomness used by weighted splits.
func WithRand(f func() uint64) Option { return func(p *Policy) { p.rand = f } }

// New compiles cfg's routes; the Policy keeps nothing of cfg.
func New(cfg *Config, opts ...Option) *Policy {
	p := &Policy{rand: rand.Uint64, pools: map[string]bool{}}
	for _, r := range cfg.Routes {
		p.routes = append(p.routes, compileRoute(r))
	}
	for _, pool := range cfg.Pools {
		p.pools[pool.Name] = true
	}
	for _, o := range opts {
		o(p)
	}
	if p.ctrl == nil && cfg.Control != nil && cfg.Control.Share != nil {
		p.ctrl = NewController(cfg.Control.Share.Options())
	}
	return p
}

// Routes returns the route names in order.
func (p *Policy) Routes() []string {
	out := make([]string, len(p.routes))
	for i, r := range p.routes {
		out[i] = r.name
	}
	return out
}

type evalState struct {
	req      *Request
	classify ClassifyFunc
	done     bool
	cls      Classification
	explain  bool
	ctrl     *Controller
	// observed: the request's score was given to the controller;
	// autoPassed: an auto bound of the route being matched held.
	observed, autoPassed bool
}

func (s *evalState) class() Classification {
	if !s.done {
		s.cls, s.done = s.classify(), true
	}
	return s.cls
}

// Escalate keeps, for a session, decision d moved on to pools (the rest of
// its chain from the pool that took the request): a conversation that
// outgrew a pool's context stays on the larger pool for its later turns
// and never moves back down. Without sessions it does nothing.
func (p *Policy) Escalate(session string, d Decision, pools []string) {
	if p.sessions == nil || session == "" || len(pools) == 0 {
		return
	}
	d.Pools = append([]string(nil), pools...)
	d.Matched, d.Skipped, d.Sticky = nil, nil, false
	p.sessions.Replace(session, d)
}

// Decide evaluates the routes in order for req; the first match wins. With
// explain, Matched and Skipped record the reasons. A session's earlier
// decision is reused while it lives.
func (p *Policy) Decide(req *Request, classify ClassifyFunc, explain bool) Decision {
	if p.sessions != nil && req.Session != "" {
		// The store outlives reloads: a kept decision counts only while its
		// route and every pool it names still exist.
		if d, ok := p.sessions.Get(req.Session); ok {
			if p.stillValid(d) {
				d.Sticky = true
				if explain {
					d.Matched = []string{d.Route}
					d.Skipped = nil
				} else if p.ctrl != nil {
					p.ctrl.observeDecision(d.Pools[0] == p.ctrl.Pool(), false)
				}
				return d
			}
			if !explain {
				p.sessions.Delete(req.Session) // decide afresh, and keep that
			}
		}
	}
	st := evalState{req: req, classify: classify, explain: explain, ctrl: p.ctrl}
	var d Decision
	for _, r := range p.routes {
		st.autoPassed = false
		ok, reason := st.match(r.when)
		if !ok {
			if explain {
				d.Skipped = append(d.Skipped, Skip{Route: r.name, Reason: reason})
			}
			continue
		}
		d.Route = r.name
		if explain {
			d.Matched = append(d.Matched, r.name)
		}
		target := r.to
		if len(r.split) > 0 {
			key := req.Session
			if !r.sticky {
				key = "" // decided afresh per request: drawn at random
			}
			target = p.pick(r.split, key)
		}
		d.Pools = make([]string, 0, 1+len(r.fallback))
		d.Pools = append(d.Pools, target)
		for _, fb := range r.fallback {
			// A split may list its own pools as fallbacks; skip the one chosen.
			if fb != target {
				d.Pools = append(d.Pools, fb)
			}
		}
		d.Spill = r.spill
		if st.done {
			d.Classified, d.Class, d.Scores = true, st.cls.Label, st.cls.Scores
		}
		if p.ctrl != nil && !explain {
			p.ctrl.observeDecision(target == p.ctrl.Pool(), st.autoPassed)
		}
		// Explaining never stores: it must not change what later requests get.
		if p.sessions != nil && req.Session != "" && !explain && r.sticky {
			keep := d
			keep.Matched, keep.Skipped = nil, nil
			p.sessions.Put(req.Session, keep)
		}
		return d
	}
	// Validation guarantees a catch-all last route; reaching here means the
	// policy was built from an unvalidated config.
	panic("policy: no route matched; the config was not validated")
}

func (p *Policy) stillValid(d Decision) bool {
	found := false
	for _, r := range p.routes {
		found = found || r.name == d.Route
	}
	if !found {
		return false
	}
	for _, name := range d.Pools {
		if !p.pools[name] {
			return false
		}
	}
	return d.Spill == nil || p.pools[d.Spill.To]
}

// pick chooses a split's pool by weight: at random, or for a session by
// a hash of its id, so that every instance picks the same pool for it.
func (p *Policy) pick(split Split, session string) string {
	total := 0
	for _, e := range split {
		total += e.Weight
	}
	draw := p.rand
	if session != "" {
		draw = func() uint64 {
			h := fnv.New64a()
			h.Write([]byte(session))
			return h.Sum64()
		}
	}
	n := int(draw() % uint64(total))
	for _, e := range split {
		if n < e.Weight {
			return e.Pool
		}
		n -= e.Weight
	}
	return split[len(split)-1].Pool
}

// match reports whether w holds; reason says why not (explain only).
func (s *evalState) match(w *cond) (bool, string) {
	if w == nil {
		return true, ""
	}
	req := s.req
	if len(w.model) > 0 && !w.model.Has(req.Model) {
		return false, s.why(func() string { return fmt.Sprintf("model %q not in %v", req.Model, []string(w.model)) })
	}
	if w.stream != nil && *w.stream != req.Stream {
		return false, s.why(func() string { return fmt.Sprintf("stream is %t", req.Stream) })
	}
	if w.tools != nil && !w.tools.Match(float64(req.Tools)) {
		return false, s.why(func() string { return fmt.Sprintf("tools %d not %s", req.Tools, w.tools) })
	}
	if w.messages != nil && !w.messages.Match(float64(req.Messages)) {
		return false, s.why(func() string { return fmt.Sprintf("messages %d not %s", req.Messages, w.messages) })
	}
	if w.promptTokens != nil && !w.promptTokens.Match(float64(req.PromptTokens)) {
		return false, s.why(func() string { return fmt.Sprintf("prompt_tokens %d not %s", req.PromptTokens, w.promptTokens) })
	}
	for _, h := range w.header {
		got := req.Header.Get(h.name)
		if !h.values.Has(got) {
			return false, s.why(func() string { return fmt.Sprintf("header %s is %q, want %v", h.name, got, []string(h.values)) })
		}
	}
	if len(w.key) > 0 && !w.key.Has(req.Key) {
		return false, s.why(func() string { return fmt.Sprintf("key %q not in %v", req.Key, []string(w.key)) })
	}
	if w.not != nil && !w.not.needsClassifier() {
		if ok, _ := s.match(w.not); ok {
			return false, s.why(func() string { return "not: the negated condition matched" })
		}
	}
	if len(w.any) > 0 {
		// An OR's order does not change its result: try the alternatives
		// that need no classifier first, so a cheap one can decide it.
		matched := false
		var reasons []string
		for pass := 0; pass < 2 && !matched; pass++ {
			for _, sub := range w.any {
				if sub.needsClassifier() != (pass == 1) {
					continue
				}
				ok, r := s.match(sub)
				if ok {
					matched = true
					break
				}
				if s.explain {
					reasons = append(reasons, r)
				}
			}
		}
		if !matched {
			return false, s.why(func() string { return fmt.Sprintf("none of any matched (%s)", strings.Join(reasons, "; ")) })
		}
	}
	if w.not != nil && w.not.needsClassifier() {
		if ok, _ := s.match(w.not); ok {
			return false, s.why(func() string { return "not: the negated condition matched" })
		}
	}
	// Classifier conditions last, so a rule that fails on a cheap condition
	// never triggers a classifier call.
	if len(w.class) > 0 {
		c := s.class()
		if !w.class.Has(c.Label) {
			return false, s.why(func() string { return fmt.Sprintf("class is %q, want %v", c.Label, []string(w.class)) })
		}
	}
	if len(w.score) > 0 {
		c := s.class()
		for _, sc := range w.score {
			label, cmp := sc.label, sc.cmp
			v := c.Scores[label]
			auto := 0.0
			if cmp.Auto != "" && s.ctrl != nil {
				auto = s.ctrl.Threshold()
				// A fallback label's score says nothing of the traffic.
				if !s.observed && !s.explain && !c.Fallback {
					s.ctrl.observeScore(v)
					s.observed = true
				}
			}
			if !cmp.MatchAuto(v, auto) {
				return false, s.why(func() string {
					if cmp.Auto != "" {
						return fmt.Sprintf("score[%s] %s not %s (auto = %s)", label, strconv.FormatFloat(v, 'f', 3, 64), cmp, strconv.FormatFloat(auto, 'f', 3, 64))
					}
					return fmt.Sprintf("score[%s] %s not %s", label, strconv.FormatFloat(v, 'f', 3, 64), cmp)
				})
			}
			if cmp.Auto != "" {
				s.autoPassed = true
			}
		}
	}
	return true, ""
}

// why renders a skip reason only when explaining, so that a plain decision
// builds no strings.
func (s *evalState) why(reason func() string) string {
	if !s.explain {
		return ""
	}
	return reason()
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// NeedsClassifier reports whether any route has a class or score condition.
func (p *Policy) NeedsClassifier() bool {
	for _, r := range p.routes {
		if r.when.needsClassifier() {
			return true
		}
	}
	return false
}
