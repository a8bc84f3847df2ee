package router

import (
	"context"
	"crypto/sha256"
	"net/http"
	"strconv"
	"time"

	"github.com/switchyard/switchyard/router/internal/features"

	"github.com/switchyard/switchyard/router/internal/wire"

	"github.com/switchyard/switchyard/classifier"
	"github.com/switchyard/switchyard/policy"
	"github.com/tidwall/gjson"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
)

// decide evaluates the policy, classifying lazily.
func (g *Gateway) decide(ctx context.Context, r *http.Request, x *exchange, explain bool) policy.Decision {
	s := x.snap
	info := x.info
	ctx, span := g.startSpan(ctx, "switchyard.route")
	defer span.End()
	key := ""
	if x.key != nil {
		key = x.key.name
	}
	var preq *policy.Request
	var in classifier.Input
	preq, in, x.sess.id = policyRequest(s, r, key, info)
	x.sess.set, x.sess.key = true, preq.Session
	d := s.Policy.Decide(preq, func() policy.Classification {
		if x.classify.force != "" {
			// explain --class: the class stands in for the classifier's
			// answer; everything else is decided as serving decides.
			return policy.Classification{Label: x.classify.force, Scores: map[string]float64{x.classify.force: 1}}
		}
		// The classifier's call waits for its pool's slots in this
		// request's tenant's turn among the other classifier calls.
		name, weight := tenantOf(x, r, s.Config.Server.Trusted)
		return g.classify(withTenant(ctx, name, weight), x, in)
	}, explain)
	if d.Sticky && d.Classified && s.classifier != nil {
		s.classifier.CountSticky(d.Class)
	}
	if span.IsRecording() {
		span.SetAttributes(attribute.String("switchyard.route", d.Route), attribute.StringSlice("switchyard.pools", d.Pools))
	}
	if !explain && g.opts.ShadowPath != "" {
		g.shadowDecide(ctx, x, d, preq, in)
	}
	return d
}

// policyRequest is what the policy and the classifier see of a request,
// and its session id. With a session, a conversation is decided on its
// opening alone, so every turn, on any instance, reaches the decision its
// first turn did; its decision is kept per API key and model name, so a
// session id cannot carry one key's (or model's) route to another.
func policyRequest(s *Snapshot, r *http.Request, key string, info *wire.Info) (*policy.Request, classifier.Input, string) {
	preq := &policy.Request{
		Model: info.Model, Stream: info.Stream, Tools: info.Tools, Messages: info.Messages,
		PromptTokens: info.PromptTokens, MaxTokens: info.MaxTokens, Header: r.Header, Key: key,
	}
	id, open, in := sessionID(s, r, info)
	if id == "" {
		in = features.ClassifierInput(info)
	}
	preq.System = in.System
	// The classifier reads the turn itself, a session's too: what its
	// last message is, how far into the loop, its sizes.
	if in.Last, in.Steps = features.TurnOf(info); in.Last != "" {
		in.PromptTokens, in.MaxTokens = info.PromptTokens, info.MaxTokens
	}
	if id == "" {
		return preq, in, ""
	}
	preq.Session = id + key + "\x00" + info.Model
	preq.Messages, preq.PromptTokens = open.Messages, open.PromptTokens
	return preq, in, id
}

// sessionHeaders are the session ids real agents send without being
// asked: Codex's session-id and Claude Code's x-claude-code-session-id.
var sessionHeaders = [...]string{"session-id", "x-claude-code-session-id"}

// sessionID is a fixed-size digest of the request's session id, "" when
// it has none (or session: is not configured). The id is, in order: the
// configured session header; an id agents send on their own (the
// sessionHeaders, then the body's prompt_cache_key); the body's user field
// with session.from_user; and with session.implicit, the conversation's
// opening. Ids are client input of any length; hashing them keeps every
// session key the same small size, and the same on every instance.
//
// With an id it also returns the conversation's opening and the classifier
// input read from it, computed once.
func sessionID(s *Snapshot, r *http.Request, info *wire.Info) (string, features.Opening, classifier.Input) {
	se := s.Config.Session
	if se == nil {
		return "", features.Opening{}, classifier.Input{}
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
	if id == "" && !se.Implicit {
		return "", features.Opening{}, classifier.Input{}
	}
	open, in := features.OpeningOf(info)
	if id != "" {
		sum := sha256.Sum256([]byte("id\x00" + id))
		return string(sum[:16]), open, in
	}
	h := sha256.New()
	h.Write([]byte("opening\x00"))
	for _, raw := range open.Raw {
		h.Write([]byte(raw))
		h.Write([]byte{0})
	}
	h.Write([]byte(info.RawTools.Raw))
	return string(h.Sum(nil)[:16]), open, in
}

func (g *Gateway) classify(ctx context.Context, x *exchange, in classifier.Input) policy.Classification {
	c := x.snap.classifier
	if c == nil {
		return policy.Classification{}
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
	return policy.Classification{Label: res.Label, Scores: res.Scores, Fallback: res.Fallback()}
}

// affinityKey groups requests sharing a prompt prefix: the session id when
// there is one, else a hash of the leading depth messages.
func affinityKey(x *exchange, r *http.Request, depth int) string {
	if !x.sess.set { // a request no policy decided (a pinned pool)
		x.sess.id, _, _ = sessionID(x.snap, r, x.info)
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
