package router

import (
	"context"
	"crypto/sha256"
	"net/http"
	"strconv"
	"strings"

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
	preq := &policy.Request{
		Model: info.Model, Stream: info.Stream, Tools: info.Tools, Messages: info.Messages,
		PromptTokens: info.PromptTokens, Header: r.Header,
	}
	if x.key != nil {
		preq.Key = x.key.name
	}
	if id := sessionID(s, r, info); id != "" {
		// A session's decision is kept per API key and model name, so a
		// session id cannot carry one key's (or model's) route to another.
		preq.Session = id + preq.Key + "\x00" + info.Model
	}
	d := s.Policy.Decide(preq, func() policy.Classification { return g.classify(ctx, x) }, explain)
	if d.Sticky && d.Classified && s.classifier != nil {
		s.classifier.CountSticky(d.Class)
	}
	if span.IsRecording() {
		span.SetAttributes(attribute.String("switchyard.route", d.Route), attribute.StringSlice("switchyard.pools", d.Pools))
	}
	return d
}

// sessionID is a fixed-size digest of the configured session header's
// value (else, with session.from_user, of the body's user field), "" when
// there is none. Ids are client input of any length; hashing them keeps
// every session key the same small size in the session store and the
// affinity ranking, and is the same on every instance.
func sessionID(s *Snapshot, r *http.Request, info *reqInfo) string {
	se := s.Config.Session
	if se == nil {
		return ""
	}
	id := ""
	if se.Header != "" {
		id = r.Header.Get(se.Header)
	}
	if id == "" && se.FromUser {
		id = info.User
	}
	if id == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(id))
	return string(sum[:16])
}

func (g *Gateway) classify(ctx context.Context, x *exchange) policy.Classification {
	c := x.snap.classifier
	if c == nil {
		return policy.Classification{}
	}
	ctx, span := g.startSpan(ctx, "switchyard.classify")
	defer span.End()
	res := c.Classify(ctx, classifierInput(x.info))
	span.SetAttributes(attribute.String("switchyard.class", res.Label), attribute.String("switchyard.classifier.result", res.Outcome))
	if res.Err != nil {
		span.SetStatus(codes.Error, res.Err.Error())
		g.log.Warn("classifier failed; using on_error label", "request_id", x.id, "label", res.Label, "result", res.Outcome, "error", res.Err.Error())
	}
	return policy.Classification{Label: res.Label, Scores: res.Scores}
}

// classifierInput reads what the classifier looks at from the body fields.
func classifierInput(info *reqInfo) classifier.Input {
	in := classifier.Input{Turns: info.Messages}
	if info.prompt.Exists() {
		if info.prompt.Type == gjson.String {
			in.Prompt = info.prompt.Str
		} else {
			in.Prompt = info.prompt.Get("0").String()
		}
		return in
	}
	info.messages.ForEach(func(_, m gjson.Result) bool {
		switch m.Get("role").Str {
		case "system", "developer":
			if in.System == "" {
				in.System = contentText(m.Get("content"))
			}
		case "user":
			in.LastUser = contentText(m.Get("content"))
		}
		return true
	})
	info.tools.ForEach(func(_, t gjson.Result) bool {
		in.Tools = append(in.Tools, t.Get("function.name").String())
		return true
	})
	return in
}

// contentText returns a message content's text: the string, or the text
// parts of a content array joined.
func contentText(c gjson.Result) string {
	if c.Type == gjson.String {
		return c.Str
	}
	var sb strings.Builder
	c.ForEach(func(_, part gjson.Result) bool {
		if t := part.Get("text"); t.Exists() {
			if sb.Len() > 0 {
				sb.WriteByte('\n')
			}
			sb.WriteString(t.String())
		}
		return true
	})
	return sb.String()
}

// affinityKey groups requests sharing a prompt prefix: the session id when
// there is one, else a hash of the leading depth messages.
func affinityKey(x *exchange, r *http.Request, depth int) string {
	if id := sessionID(x.snap, r, x.info); id != "" {
		return "s:" + id
	}
	var h uint64 = 14695981039346656037
	n := 0
	src := x.info.messages
	if !src.Exists() {
		src = x.info.prompt
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
