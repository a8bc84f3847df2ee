package routing

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/switchyard/switchyard/policy"
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
	// MaxTokens is the answer length the request asks for; 0: none set.
	MaxTokens int
	// System is the system prompt's text (system_contains reads it).
	System string
	Header http.Header
	// Key is the authenticated API key's name ("" without auth).
	Key string
	// Session is the session id (configured header, else the `user` field).
	Session string
	// Turn says what the request's last message is: TurnInstruction (a
	// new instruction from the user), TurnToolResult, or "" (a
	// completions prompt, an assistant prefill).
	Turn string
	// ToolError says why the latest tool result reads as a failure ("":
	// it does not, or the turn is not a tool result); RepeatedCall names
	// the tool whose latest call repeats an earlier identical one.
	ToolError, RepeatedCall string
}

// What Request.Turn says of the last message.
const (
	TurnInstruction = "instruction"
	TurnToolResult  = "tool_result"
)

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
	Spill *policy.Spill
	// Classified is true when the classifier's answer was used (or a sticky
	// session reused a class); Class and Scores are then set.
	Classified bool
	Class      string
	Scores     map[string]float64
	// Sticky is true when the decision was reused from the session store.
	Sticky bool
	// Side is true when a side route (side: true) decided the request: it
	// was routed on its own and the session store was neither read nor
	// changed.
	Side bool
	// Session says what the session store did: "" (no session id, or no
	// store), or one of the Session* outcomes.
	Session string
	// Matched and Skipped are filled only when explaining; so are Why
	// (the conditions of the matched route that held, with the request's
	// values) and SessionReason (Session in words).
	Matched       []string `json:"matched"`
	Skipped       []Skip   `json:"skipped"`
	Why           []string `json:"why,omitempty"`
	SessionReason string   `json:"session_reason,omitempty"`
}

// What the session store did for a request (Decision.Session). A session
// moves up, never down: a request whose own decision is a stronger route
// than the kept one replaces it, where stronger means written earlier in
// routes: (first match wins, so the rules that must catch a request come
// first: the reference policy's hard rules come before its default).
// Side routes and sticky: false routes never move a session.
const (
	// SessionNew: nothing was kept; this decision now is.
	SessionNew = "new"
	// SessionKept: the kept decision was reused (no stronger route matched).
	SessionKept = "kept"
	// SessionMovedUp: a stronger route matched; it replaced the kept one.
	SessionMovedUp = "moved_up"
	// SessionSide: a side route matched; the kept decision, if any, stays.
	SessionSide = "side"
	// SessionNotKept: a sticky: false route matched with nothing kept; the
	// decision is not kept.
	SessionNotKept = "not_kept"
	// SessionMovedDown: a new instruction from the user, decided on its own
	// evidence, took a weaker route than the kept one (session.move_down:
	// new_instruction); it replaced the kept one.
	SessionMovedDown = "moved_down"
)

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
	routes []*route
	pools  map[string]bool
	// small are the models: names and patterns marked small: true.
	small []string
	// sideFrom[i]: a side route is at index i or later.
	sideFrom []bool
	sessions *Sessions
	// moveDown: a new instruction is decided afresh and may move its
	// session down (session.move_down: new_instruction).
	moveDown bool
	// readsSystem: a route has a system_contains condition.
	readsSystem bool
	rand        func() uint64
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
func New(cfg *policy.Config, opts ...Option) *Policy {
	p := &Policy{rand: rand.Uint64, pools: map[string]bool{}}
	for _, r := range cfg.Routes {
		p.routes = append(p.routes, compileRoute(r))
	}
	for _, pool := range cfg.Pools {
		p.pools[pool.Name] = true
	}
	for _, m := range cfg.Models {
		if m.Small {
			p.small = append(p.small, m.Name)
		}
	}
	p.sideFrom = make([]bool, len(p.routes)+1)
	for i := len(p.routes) - 1; i >= 0; i-- {
		p.sideFrom[i] = p.sideFrom[i+1] || p.routes[i].side
	}
	for _, r := range p.routes {
		p.readsSystem = p.readsSystem || r.when.readsSystem()
	}
	p.moveDown = cfg.Session != nil && cfg.Session.MoveDown == policy.MoveDownNewInstruction
	for _, o := range opts {
		o(p)
	}
	if p.ctrl == nil && cfg.Control != nil && cfg.Control.Share != nil {
		p.ctrl = NewController(ControlOptionsFor(cfg.Control.Share))
	}
	return p
}

// ReadsSystem reports whether a route reads the system prompt
// (system_contains), so the router reads its whole text only then.
func (p *Policy) ReadsSystem() bool { return p.readsSystem }

// Routes returns the route names in order.
func (p *Policy) Routes() []string {
	out := make([]string, len(p.routes))
	for i, r := range p.routes {
		out[i] = r.name
	}
	return out
}

type evalState struct {
	req   *Request
	small []string
	// held are the conditions that held so far (explain only).
	held     []string
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
//
// A side request's decision is never kept: it does nothing then.
func (p *Policy) Escalate(session string, d Decision, pools []string) {
	if p.sessions == nil || session == "" || len(pools) == 0 || d.Side {
		return
	}
	d.Pools = append([]string(nil), pools...)
	d.Matched, d.Skipped, d.Sticky, d.Why, d.SessionReason = nil, nil, false, nil, ""
	p.sessions.Replace(session, d)
}

// Decide evaluates the routes in order for req; the first match wins. With
// explain, Matched, Skipped and Why record the reasons, and nothing is
// stored.
//
// A session's kept decision is reused while it lives unless the request's
// own decision is stronger (see SessionMovedUp), which then replaces it,
// or a side route decides the request, which is then routed on its own.
// To know that, only the routes above the kept one, and side routes, are
// evaluated: the routes below it are not (nor their classifier conditions).
func (p *Policy) Decide(req *Request, classify ClassifyFunc, explain bool) Decision {
	keptAt := -1 // the kept decision's route index, -1 for none
	var kept Decision
	hasSession := p.sessions != nil && req.Session != ""
	if hasSession {
		// The store outlives reloads: a kept decision counts only while its
		// route and every pool it names still exist.
		if d, ok := p.sessions.Get(req.Session); ok {
			if i := p.routeIndex(d.Route); i >= 0 && p.stillValid(d) {
				keptAt, kept = i, d
			} else if !explain {
				p.sessions.Delete(req.Session) // decide afresh, and keep that
			}
		}
	}
	// At a new instruction (with move_down: new_instruction) every route
	// is evaluated, as for a new session; otherwise only those that could
	// move the session up, and side routes.
	fresh := keptAt >= 0 && p.moveDown && req.Turn == TurnInstruction
	st := evalState{req: req, classify: classify, explain: explain, ctrl: p.ctrl, small: p.small}
	var d Decision
	for i, r := range p.routes {
		if keptAt >= 0 && !fresh && i >= keptAt && !p.sideFrom[i] {
			break // nothing below can be stronger, or a side route
		}
		st.autoPassed = false
		st.held = st.held[:0]
		ok, reason := st.match(r.when)
		if !ok {
			if explain {
				d.Skipped = append(d.Skipped, Skip{Route: r.name, Reason: reason})
			}
			continue
		}
		if fresh && !r.side && r.sticky && i > keptAt {
			return p.moveDownTo(req, r, i, kept, &st, &d, explain)
		}
		if keptAt >= 0 && !r.side && (!r.sticky || i >= keptAt) {
			// Not a stronger route (sticky: false never moves a session).
			if explain {
				d.Matched = append(d.Matched, r.name)
				d.Route = r.name
			}
			break
		}
		d.Route = r.name
		if explain {
			d.Matched = append(d.Matched, r.name)
			d.Why = st.heldList()
		}
		key := req.Session
		if !r.sticky || r.side {
			key = "" // decided afresh per request: drawn at random
		}
		p.target(&d, r, key, &st, explain)
		if hasSession {
			p.noteSession(req.Session, &d, r, kept, keptAt >= 0, explain)
		}
		return d
	}
	if keptAt < 0 {
		// Validation guarantees a catch-all last route; reaching here means
		// the policy was built from an unvalidated config.
		panic("policy: no route matched; the config was not validated")
	}
	kept.Sticky, kept.Session = true, SessionKept
	if explain {
		kept.Matched, kept.Skipped = d.Matched, d.Skipped
		switch {
		case d.Route == "":
			kept.SessionReason = fmt.Sprintf("the session keeps route %q: no route above it matched", kept.Route)
		case d.Route == kept.Route:
			kept.SessionReason = fmt.Sprintf("the session keeps route %q: the request matches it again", kept.Route)
		case p.routeIndex(d.Route) < keptAt:
			kept.SessionReason = fmt.Sprintf("the session keeps route %q: route %q matched, but it is sticky: false", kept.Route, d.Route)
		default:
			kept.SessionReason = fmt.Sprintf("the session keeps route %q: route %q matched, below it", kept.Route, d.Route)
		}
		switch {
		case req.Turn == TurnToolResult && p.moveDown:
			kept.SessionReason += "; a turn that returns tool output never moves a session down (it is inside the task's tool loop)"
		case req.Turn == TurnInstruction && !p.moveDown:
			kept.SessionReason += "; session.move_down is never"
		}
		if kept.Matched == nil || kept.Matched[len(kept.Matched)-1] != kept.Route {
			kept.Matched = append(kept.Matched, kept.Route)
		}
	} else if p.ctrl != nil {
		p.ctrl.ObserveDecision(kept.Pools[0] == p.ctrl.Pool(), false)
	}
	return kept
}

// target fills d with route r's pools (a split drawn by key, at random
// for ""), spill, side and class, and tells the share controller.
func (p *Policy) target(d *Decision, r *route, key string, st *evalState, explain bool) {
	target := r.to
	if len(r.split) > 0 {
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
	d.Side = r.side
	if st.done {
		d.Classified, d.Class, d.Scores = true, st.cls.Label, st.cls.Scores
	}
	if p.ctrl != nil && !explain {
		p.ctrl.ObserveDecision(target == p.ctrl.Pool(), st.autoPassed)
	}
}

// moveDownTo decides req by route r (at index i), weaker than the kept
// decision: a new instruction, judged on its own evidence, moves its
// session down to r. d holds what explain gathered so far.
func (p *Policy) moveDownTo(req *Request, r *route, i int, kept Decision, st *evalState, d *Decision, explain bool) Decision {
	d.Route = r.name
	if explain {
		d.Matched = append(d.Matched, r.name)
		d.Why = st.heldList()
	}
	p.target(d, r, req.Session, st, explain)
	d.Session = SessionMovedDown
	if explain {
		d.SessionReason = fmt.Sprintf("a new instruction from the user, decided on its own evidence, takes route %q, below the session's kept route %q: the session moves down to it (session.move_down: new_instruction)", r.name, kept.Route)
		return *d
	}
	keep := *d
	keep.Matched, keep.Skipped, keep.Why, keep.SessionReason = nil, nil, nil, ""
	p.sessions.Replace(req.Session, keep)
	return *d
}

// noteSession records what d, decided by r, does to the session's kept
// decision (had says one was kept), and stores it unless explaining.
func (p *Policy) noteSession(session string, d *Decision, r *route, kept Decision, had, explain bool) {
	switch {
	case r.side:
		d.Session = SessionSide
		if explain {
			d.SessionReason = fmt.Sprintf("route %q is a side route: the request is routed on its own", r.name)
			if had {
				d.SessionReason += fmt.Sprintf(" and the session keeps route %q", kept.Route)
			} else {
				d.SessionReason += " and the session keeps no decision"
			}
		}
		return
	case had:
		d.Session = SessionMovedUp
		if explain {
			d.SessionReason = fmt.Sprintf("route %q is above the session's kept route %q: the session moves up to it", r.name, kept.Route)
		}
	case !r.sticky:
		d.Session = SessionNotKept
		if explain {
			d.SessionReason = fmt.Sprintf("route %q is sticky: false: its decision is not kept", r.name)
		}
		return
	default:
		d.Session = SessionNew
		if explain {
			d.SessionReason = fmt.Sprintf("the session's first decision: route %q is kept", r.name)
		}
	}
	// Explaining never stores: it must not change what later requests get.
	if explain {
		return
	}
	keep := *d
	keep.Matched, keep.Skipped, keep.Why, keep.SessionReason = nil, nil, nil, ""
	at := p.routeIndex(r.name)
	// Concurrent turns of one session race here; the store keeps the
	// stronger of what they decided, never the later one.
	p.sessions.Raise(session, keep, func(k Decision) bool {
		i := p.routeIndex(k.Route)
		return i < 0 || i > at || !p.stillValid(k)
	})
}

// routeIndex is the index of the route called name, -1 when there is none.
func (p *Policy) routeIndex(name string) int {
	for i, r := range p.routes {
		if r.name == name {
			return i
		}
	}
	return -1
}

// stillValid reports whether every pool d names still exists.
func (p *Policy) stillValid(d Decision) bool {
	for _, name := range d.Pools {
		if !p.pools[name] {
			return false
		}
	}
	return d.Spill == nil || p.pools[d.Spill.To]
}

// pick chooses a split's pool by weight: at random, or for a session by
// a hash of its id, so that every instance picks the same pool for it.
func (p *Policy) pick(split policy.Split, session string) string {
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
	mark := len(s.held)
	ok, reason := s.matchAll(w)
	if !ok {
		s.held = s.held[:mark] // an alternative that failed explains nothing
	}
	return ok, reason
}

// heldList is a copy of held, nil when empty.
func (s *evalState) heldList() []string {
	if len(s.held) == 0 {
		return nil
	}
	return slices.Clone(s.held)
}

// hold records a condition that held (explain only).
func (s *evalState) hold(what func() string) {
	if s.explain {
		s.held = append(s.held, what())
	}
}

// small reports whether model is one of the models: entries marked small.
func (s *evalState) isSmall(model string) (bool, string) {
	for _, pat := range s.small {
		if ok, _ := path.Match(pat, model); ok || pat == model {
			return true, pat
		}
	}
	return false, ""
}

func (s *evalState) matchAll(w *cond) (bool, string) {
	if ok, why := s.matchFeatures(w); !ok {
		return false, why
	}
	if ok, why := s.matchLogic(w); !ok {
		return false, why
	}
	return s.matchClass(w)
}

// matchFeatures checks the conditions on what the request says of itself:
// model, stream, tools, messages, prompt and answer sizes, the client's
// small model and the system prompt.
func (s *evalState) matchFeatures(w *cond) (bool, string) {
	req := s.req
	if len(w.model) > 0 && !w.model.Has(req.Model) {
		return false, s.why(func() string { return fmt.Sprintf("model %q not in %v", req.Model, []string(w.model)) })
	} else if len(w.model) > 0 {
		s.hold(func() string { return fmt.Sprintf("model %q", req.Model) })
	}
	if w.stream != nil && *w.stream != req.Stream {
		return false, s.why(func() string { return fmt.Sprintf("stream is %t", req.Stream) })
	} else if w.stream != nil {
		s.hold(func() string { return fmt.Sprintf("stream is %t", req.Stream) })
	}
	if w.tools != nil && !w.tools.Match(float64(req.Tools)) {
		return false, s.why(func() string { return fmt.Sprintf("tools %d not %s", req.Tools, w.tools) })
	} else if w.tools != nil {
		s.hold(func() string { return fmt.Sprintf("tools %d %s", req.Tools, w.tools) })
	}
	if w.messages != nil && !w.messages.Match(float64(req.Messages)) {
		return false, s.why(func() string { return fmt.Sprintf("messages %d not %s", req.Messages, w.messages) })
	} else if w.messages != nil {
		s.hold(func() string { return fmt.Sprintf("messages %d %s", req.Messages, w.messages) })
	}
	if w.promptTokens != nil && !w.promptTokens.Match(float64(req.PromptTokens)) {
		return false, s.why(func() string { return fmt.Sprintf("prompt_tokens %d not %s", req.PromptTokens, w.promptTokens) })
	} else if w.promptTokens != nil {
		s.hold(func() string { return fmt.Sprintf("prompt_tokens %d %s", req.PromptTokens, w.promptTokens) })
	}
	if w.maxTokens != nil {
		v, shown := math.Inf(1), "unset"
		if req.MaxTokens > 0 {
			v, shown = float64(req.MaxTokens), strconv.Itoa(req.MaxTokens)
		}
		if !w.maxTokens.Match(v) {
			return false, s.why(func() string { return fmt.Sprintf("max_tokens %s not %s", shown, w.maxTokens) })
		}
		s.hold(func() string { return fmt.Sprintf("max_tokens %s %s", shown, w.maxTokens) })
	}
	if w.smallModel != nil {
		small, pat := s.isSmall(req.Model)
		if small != *w.smallModel {
			if small {
				return false, s.why(func() string { return fmt.Sprintf("model %q is a small model (%q)", req.Model, pat) })
			}
			return false, s.why(func() string { return fmt.Sprintf("model %q is not a small model", req.Model) })
		}
		s.hold(func() string {
			if small {
				return fmt.Sprintf("model %q is the client's small model (models: %q)", req.Model, pat)
			}
			return fmt.Sprintf("model %q is not a small model", req.Model)
		})
	}
	if ok, why := s.matchTrajectory(w); !ok {
		return false, why
	}
	if len(w.systemContains) > 0 {
		found := ""
		for _, f := range w.systemContains {
			if strings.Contains(req.System, f) {
				found = f
				break
			}
		}
		if found == "" {
			return false, s.why(func() string {
				return fmt.Sprintf("system prompt (%d bytes) contains none of system_contains", len(req.System))
			})
		}
		s.hold(func() string { return fmt.Sprintf("system prompt contains %q", found) })
	}
	return true, ""
}

// matchTrajectory checks the conditions on the agent's trajectory: a
// failed tool result, a repeated identical call.
func (s *evalState) matchTrajectory(w *cond) (bool, string) {
	req := s.req
	if ok, why := s.flag(w.toolError, req.ToolError != "",
		func() string {
			return fmt.Sprintf("tool_error: the latest tool result reads as a failure (%s)", req.ToolError)
		},
		func() string { return "tool_error: no failed tool result in this turn" }); !ok {
		return false, why
	}
	return s.flag(w.repeated, req.RepeatedCall != "",
		func() string {
			return fmt.Sprintf("repeated_call: the latest call to %q repeats an earlier one with identical arguments", req.RepeatedCall)
		},
		func() string { return "repeated_call: the latest call repeats none of the last eight" })
}

// flag checks a true/false condition (nil: none) against what the
// request has; yes and no say it either way, for explain.
func (s *evalState) flag(want *bool, has bool, yes, no func() string) (bool, string) {
	if want == nil {
		return true, ""
	}
	said := no
	if has {
		said = yes
	}
	if has != *want {
		return false, s.why(said)
	}
	s.hold(said)
	return true, ""
}

// matchLogic checks headers, keys and the conditions made of others (not,
// any), the classifier's parts of which run after the cheap ones.
func (s *evalState) matchLogic(w *cond) (bool, string) {
	req := s.req
	for _, h := range w.header {
		got := req.Header.Get(h.name)
		if !h.values.Has(got) {
			return false, s.why(func() string { return fmt.Sprintf("header %s is %q, want %v", h.name, got, []string(h.values)) })
		}
		s.hold(func() string { return fmt.Sprintf("header %s is %q", h.name, got) })
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
	return true, ""
}

// matchClass checks the classifier's conditions, last, so a rule that fails
// on a cheap condition never triggers a classifier call.
func (s *evalState) matchClass(w *cond) (bool, string) {
	if len(w.class) > 0 {
		c := s.class()
		if !w.class.Has(c.Label) {
			return false, s.why(func() string { return fmt.Sprintf("class is %q, want %v", c.Label, []string(w.class)) })
		}
		s.hold(func() string { return fmt.Sprintf("class is %q", c.Label) })
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
					s.ctrl.ObserveScore(v)
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
			s.hold(func() string {
				if cmp.Auto != "" {
					return fmt.Sprintf("score[%s] %s %s (auto = %s)", label, strconv.FormatFloat(v, 'f', 3, 64), cmp, strconv.FormatFloat(auto, 'f', 3, 64))
				}
				return fmt.Sprintf("score[%s] %s %s", label, strconv.FormatFloat(v, 'f', 3, 64), cmp)
			})
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
