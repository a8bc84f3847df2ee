package router

import (
	"context"
	"crypto/sha256"
	"hash/maphash"
	"net/http"
	"strconv"
	"time"

	"github.com/switchyard/switchyard/router/internal/outcomes"

	"github.com/switchyard/switchyard/router/internal/features"

	"github.com/switchyard/switchyard/router/internal/wire"

	"github.com/switchyard/switchyard/classifier"
	"github.com/switchyard/switchyard/policy"
	"github.com/switchyard/switchyard/policy/routing"
	"github.com/tidwall/gjson"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
)

// decide evaluates the policy, classifying lazily.
func (g *Gateway) decide(ctx context.Context, r *http.Request, x *exchange, explain bool) routing.Decision {
	s := x.snap
	info := x.info
	ctx, span := g.startSpan(ctx, "switchyard.route")
	defer span.End()
	key := ""
	if x.key != nil {
		key = x.key.Name
	}
	var preq *routing.Request
	var in classifier.Input
	preq, in, x.sess.id = policyRequest(s, r, key, info)
	x.sess.set, x.sess.key = true, preq.Session
	x.sess.turn, x.sess.toolError, x.sess.repeated = preq.Turn, preq.ToolError, preq.RepeatedCall
	d := s.Policy.Decide(preq, func() routing.Classification {
		if x.classify.force != "" {
			// explain --class: the class stands in for the classifier's
			// answer; everything else is decided as serving decides.
			return routing.Classification{Label: x.classify.force, Scores: map[string]float64{x.classify.force: 1}}
		}
		// The classifier's call waits for its pool's slots in this
		// request's tenant's turn among the other classifier calls.
		name, weight := tenantOf(x, r, s.Config.Server.Trusted)
		return g.classify(classifier.WithTenant(ctx, name, weight), x, in)
	}, explain)
	x.sess.outcome = d.Session
	if explain && s.classifier != nil && s.classifier.Kind() == "model" {
		x.classify.explained = classifier.Summary(in, inputLimit(s))
	}
	if !explain {
		x.sess.instruction = g.judgePrevious(s, preq, in, d)
	}
	// sticky counts a session's class reused without asking the
	// classifier: a decision that asked it (for a route above the kept
	// one) is already counted once, by its result.
	if d.Sticky && d.Classified && s.classifier != nil && x.classify.res.Outcome == "" {
		s.classifier.CountSticky(d.Class)
	}
	if span.IsRecording() {
		span.SetAttributes(attribute.String("switchyard.route", d.Route), attribute.StringSlice("switchyard.pools", d.Pools))
	}
	if sh := g.shadow.Load(); !explain && sh != nil {
		sh.Decide(ctx, d, preq, x.classify.res, s.classifier, in)
	}
	return d
}

// policyRequest is what the policy and the classifier see of a request,
// and its session id. Every turn is judged on its own evidence: the
// policy reads the request's own sizes and its trajectory (a failed tool
// result, a repeated call), the classifier the current instruction and
// the latest tool results, with the task's opening as context. Its
// session's decision is kept per API key and model name, so a session id
// cannot carry one key's (or model's) route to another.
func policyRequest(s *Snapshot, r *http.Request, key string, info *wire.Info) (*routing.Request, classifier.Input, string) {
	turn := features.Read(info, inputLimit(s))
	in := turn.Input
	preq := &routing.Request{
		Model: info.Model, Stream: info.Stream, Tools: info.Tools, Messages: info.Messages,
		PromptTokens: info.PromptTokens, MaxTokens: info.MaxTokens, Header: r.Header, Key: key,
		Turn: in.Last, ToolError: turn.ToolError, RepeatedCall: turn.RepeatedCall,
	}
	if s.Policy.ReadsSystem() {
		preq.System = features.SystemText(info)
	}
	id := sessionID(s, r, info, &turn)
	if id == "" {
		return preq, in, ""
	}
	preq.Session = id + key + "\x00" + info.Model
	return preq, in, id
}

// inputLimit is the classifier's max_input_chars, the size of the texts
// read from a request (the default when there is no classifier).
func inputLimit(s *Snapshot) int {
	if c := s.Config.Classifier; c != nil && c.MaxInputChars > 0 {
		return c.MaxInputChars
	}
	return policy.DefaultMaxInputChars
}

// sessionHeaders are the session ids real agents send without being
// asked: Codex's session-id, Claude Code's x-claude-code-session-id,
// OpenCode's and Kilo Code's x-session-id and x-session-affinity.
var sessionHeaders = [...]string{"session-id", "x-claude-code-session-id", "x-session-id", "x-session-affinity"}

// sessionID is a fixed-size digest of the request's session id, "" when
// it has none (or session: is not configured). The id is, in order: the
// configured session header; an id agents send on their own (the
// sessionHeaders, then the body's prompt_cache_key); the body's user field
// with session.from_user; and with session.implicit, the conversation's
// canonical opening (turn.OpeningKey: boilerplate, dates and cache hints
// removed, so an agent's own edits of its opening keep its session). Ids
// are client input of any length; hashing them keeps every session key
// the same small size, and the same on every instance. turn may be nil:
// it is then read when needed.
func sessionID(s *Snapshot, r *http.Request, info *wire.Info, turn *features.Turn) string {
	se := s.Config.Session
	if se == nil {
		return ""
	}
	id := ""
	if se.Header != "" {
		id = r.Header.Get(se.Header)
	}
	for _, h := range sessionHeaders {
		if id == "" {
			id = r.Header.Get(h)
		}
	}
	if id == "" {
		id = info.CacheKey
	}
	if id == "" && se.FromUser {
		id = info.User
	}
	if id != "" {
		sum := sha256.Sum256([]byte("id\x00" + id))
		return string(sum[:16])
	}
	if !se.Implicit {
		return ""
	}
	if turn == nil {
		t := features.Read(info, inputLimit(s))
		turn = &t
	}
	k := turn.OpeningKey()
	return string(k[:])
}

// instructionSeed keys the instruction hashes the outcome tracker
// compares (within this process).
var instructionSeed = maphash.MakeSeed()

// judgePrevious counts how the session's previous answered turn went,
// from what this turn shows (a side request is no turn of the session),
// and returns the hash of this turn's new instruction (0: none), kept
// with it when it is answered.
func (g *Gateway) judgePrevious(s *Snapshot, preq *routing.Request, in classifier.Input, d routing.Decision) uint64 {
	if s.outcomes == nil || preq.Session == "" || d.Side {
		return 0
	}
	var instr uint64
	if preq.Turn == routing.TurnInstruction {
		instr = maphash.String(instructionSeed, in.LastUser) | 1 // never 0
	}
	s.outcomes.Next(preq.Session, outcomes.Next{
		ToolError: preq.ToolError != "", RepeatedCall: preq.RepeatedCall != "",
		MovedUp: d.Session == routing.SessionMovedUp, Instruction: instr,
	})
	return instr
}

func (g *Gateway) classify(ctx context.Context, x *exchange, in classifier.Input) routing.Classification {
	c := x.snap.classifier
	if c == nil {
		return routing.Classification{}
	}
	ctx, span := g.startSpan(ctx, "switchyard.classify")
	defer span.End()
	began := time.Now()
	res := c.Classify(ctx, in)
	x.access.classify += time.Since(began)
	x.access.classified = true
	if span.IsRecording() {
		if res.Label != "" {
			span.SetAttributes(attribute.String("switchyard.class", res.Label))
		}
		if res.Outcome != "" {
			span.SetAttributes(attribute.String("switchyard.classifier.result", res.Outcome))
		}
	}
	x.classify.res = res
	if res.Err != nil {
		span.SetStatus(codes.Error, res.Err.Error())
		if res.Outcome != classifier.OutcomeCircuitOpen { // the breaker logs when it opens and closes
			g.log.Warn("classifier failed; using on_error label", "request_id", x.id, "label", res.Label, "result", res.Outcome, "error", res.Err.Error())
		}
	}
	return routing.Classification{Label: res.Label, Scores: res.Scores, Fallback: res.Fallback()}
}

// affinityKey groups requests sharing a prompt prefix: the session id when
// there is one, else a hash of the leading depth messages.
func affinityKey(x *exchange, r *http.Request, depth int) string {
	if !x.sess.set { // a request no policy decided (a pinned pool)
		x.sess.id = sessionID(x.snap, r, x.info, nil)
		x.sess.set = true
	}
	if x.sess.id != "" {
		return "s:" + x.sess.id
	}
	var h uint64 = 14695981039346656037
	n := 0
	src := x.info.RawMessages
	if !src.Exists() {
		src = x.info.RawPrompt
	}
	hash := func(raw string) {
		for i := 0; i < len(raw); i++ {
			h = (h ^ uint64(raw[i])) * 1099511628211
		}
	}
	if src.IsArray() {
		src.ForEach(func(_, m gjson.Result) bool {
			hash(m.Raw)
			n++
			return n < depth
		})
	} else {
		hash(src.Raw)
	}
	return "p:" + strconv.FormatUint(h, 16)
}
