package routing

import (
	"slices"

	"github.com/switchyard/switchyard/policy"
)

// route is a compiled policy.Route: its own copies of what the config
// says, so a Policy shares nothing with the Config it was built from, and
// what each request would recompute (the order of score labels and headers, whether a
// condition needs the classifier) is computed once.
type route struct {
	name     string
	when     *cond
	to       string
	split    policy.Split
	fallback []string
	spill    *policy.Spill
	// sticky is false for sticky: false (the decision is not kept).
	sticky bool
	// side: the route's requests are side requests (Route.Side).
	side bool
}

// cond is a compiled policy.When.
type cond struct {
	class, model, key                        policy.StringList
	tools, messages, promptTokens, maxTokens *policy.NumCmp
	stream, smallModel, toolError, repeated  *bool
	systemContains                           policy.StringList
	score                                    []scoreCond // by label
	header                                   []headerCond
	any                                      []*cond
	not                                      *cond
	// classify: this condition or one under it reads the classifier.
	classify bool
}

type scoreCond struct {
	label string
	cmp   *policy.NumCmp
}

type headerCond struct {
	name   string
	values policy.StringList
}

func compileRoute(r *policy.Route) *route {
	out := &route{
		name: r.Name, when: compileWhen(r.When), to: r.To,
		split: slices.Clone(r.Split), fallback: slices.Clone(r.Fallback),
		sticky: r.Sticky, side: r.Side,
	}
	if r.Spill != nil {
		s := *r.Spill
		out.spill = &s
	}
	return out
}

// compileWhen returns nil for a condition that always holds.
func compileWhen(w *policy.When) *cond {
	if w.Empty() {
		return nil
	}
	c := &cond{
		class: slices.Clone(w.Class), model: slices.Clone(w.Model), key: slices.Clone(w.Key),
		tools: cloneCmp(w.Tools), messages: cloneCmp(w.Messages), promptTokens: cloneCmp(w.PromptTokens),
		maxTokens: cloneCmp(w.MaxTokens), systemContains: slices.Clone(w.SystemContains),
		not: compileWhen(w.Not),
	}
	if w.Stream != nil {
		s := *w.Stream
		c.stream = &s
	}
	if w.SmallModel != nil {
		s := *w.SmallModel
		c.smallModel = &s
	}
	if w.ToolError != nil {
		s := *w.ToolError
		c.toolError = &s
	}
	if w.RepeatedCall != nil {
		s := *w.RepeatedCall
		c.repeated = &s
	}
	for _, label := range sortedKeys(w.Score) {
		c.score = append(c.score, scoreCond{label: label, cmp: cloneCmp(w.Score[label])})
	}
	for _, name := range sortedKeys(w.Header) {
		c.header = append(c.header, headerCond{name: name, values: slices.Clone(w.Header[name])})
	}
	c.classify = len(c.class) > 0 || len(c.score) > 0 || c.not.needsClassifier()
	for _, a := range w.Any {
		sub := compileWhen(a)
		if sub == nil {
			sub = &cond{} // validate refuses an empty alternative; it would always hold
		}
		c.any = append(c.any, sub)
		c.classify = c.classify || sub.classify
	}
	return c
}

func cloneCmp(c *policy.NumCmp) *policy.NumCmp {
	if c == nil {
		return nil
	}
	out := *c
	return &out
}

// readsSystem reports whether c or a condition under it reads the system
// prompt.
func (c *cond) readsSystem() bool {
	if c == nil {
		return false
	}
	if len(c.systemContains) > 0 || c.not.readsSystem() {
		return true
	}
	for _, a := range c.any {
		if a.readsSystem() {
			return true
		}
	}
	return false
}

func (c *cond) needsClassifier() bool { return c != nil && c.classify }
