package eval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/switchyard/switchyard/router"
)

// DefaultConcurrency is how many cases are classified at once by default.
const DefaultConcurrency = 8

// Options configures a run.
type Options struct {
	// Concurrency is how many cases are classified at once; 0 means
	// DefaultConcurrency. The classifier's own concurrency cap still
	// applies.
	Concurrency int
	// HardLabel is the class whose requests belong on the large pool: the
	// sweep's class and the projection's. "" means the classifier's last
	// label (labels go from the easiest to the hardest).
	HardLabel string
	// Progress, when set, receives progress lines for a run longer than a
	// second: each time another tenth of the cases is done, and at least
	// once a second, then once at the end.
	Progress io.Writer
	// Now is the progress clock; nil means time.Now.
	Now func() time.Time
}

// Run classifies and routes every case on g, concurrently, and reports.
// Only the classifier is called; no request reaches a replica. A
// classifier that cannot answer a case is not an error: the case takes
// on_error's label and is listed under the report's classifier failures.
// Run fails only when ctx ends first or the config has no classifier.
func Run(ctx context.Context, g *router.Gateway, cases []Case, o Options) (*Report, error) {
	cfg := g.Snapshot().Config
	if cfg.Classifier == nil {
		return nil, errors.New("the config has no classifier: nothing to evaluate")
	}
	labels := cfg.Classifier.Labels
	hard := o.HardLabel
	if hard == "" {
		hard = labels[len(labels)-1]
	}
	if !slices.Contains(labels, hard) {
		return nil, fmt.Errorf("hard label %q is not a class of the classifier (labels: %s)", hard, joinLabels(labels))
	}
	results, err := evaluate(ctx, g, cases, o)
	if err != nil {
		return nil, err
	}
	pools, err := targetPools(ctx, g, cases, labels[0], hard)
	if err != nil {
		return nil, err
	}
	return newReport(cfg, cases, results, hard, pools), nil
}

// evaluate runs the cases on o.Concurrency workers; results are in case
// order.
func evaluate(ctx context.Context, g *router.Gateway, cases []Case, o Options) ([]router.Evaluation, error) {
	workers := o.Concurrency
	if workers <= 0 {
		workers = DefaultConcurrency
	}
	workers = min(workers, len(cases))
	results := make([]router.Evaluation, len(cases))
	p := newProgress(o, len(cases))
	next := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				results[i] = g.Evaluate(ctx, cases[i].req)
				p.done(results[i].Err != nil)
			}
		}()
	}
feed:
	for i := range cases {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p.finish()
	return results, nil
}

// progress writes progress lines; its methods are safe for concurrent use.
type progress struct {
	mu          sync.Mutex
	w           io.Writer
	now         func() time.Time
	total       int
	n, failed   int
	start, last time.Time
	lastTenth   int
	printed     bool
}

func newProgress(o Options, total int) *progress {
	now := o.Now
	if now == nil {
		now = time.Now
	}
	t := now()
	return &progress{w: o.Progress, now: now, total: total, start: t, last: t}
}

// done counts a finished case and prints a line when one is due: the run
// has lasted a second, and another tenth of the cases is done or a
// second passed since the last line.
func (p *progress) done(failed bool) {
	if p.w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n++
	if failed {
		p.failed++
	}
	t := p.now()
	tenth := p.n * 10 / p.total
	if t.Sub(p.start) < time.Second || (tenth == p.lastTenth && t.Sub(p.last) < time.Second) || p.n == p.total {
		return
	}
	p.line(t, tenth)
}

// finish prints the last line when earlier lines were printed.
func (p *progress) finish() {
	if p.w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.printed {
		p.line(p.now(), 10)
	}
}

func (p *progress) line(t time.Time, tenth int) {
	p.last, p.lastTenth, p.printed = t, tenth, true
	fmt.Fprintf(p.w, "%d/%d cases (%d%%), %d classifier failures, %s\n", p.n, p.total, 100*p.n/p.total, p.failed,
		t.Sub(p.start).Round(100*time.Millisecond))
}

// targets are the pools the easiest and the hard class route to.
type targets struct {
	model        string // the model name the probe request used
	small, large string
}

// targetPools finds where the policy sends a plain one-turn request of the
// easiest class and one of the hard class, under the model name most
// policy-routed cases use (explain's path with the class given: no
// classifier call). Both are "" when no case is routed by the policy.
func targetPools(ctx context.Context, g *router.Gateway, cases []Case, easy, hard string) (targets, error) {
	count := map[string]int{}
	var t targets
	for _, c := range cases {
		if m := c.req.Model(); c.req.Routed() {
			count[m]++
			if count[m] > count[t.model] || count[m] == count[t.model] && m < t.model {
				t.model = m
			}
		}
	}
	if t.model == "" {
		return t, nil
	}
	for _, q := range []struct {
		class string
		pool  *string
	}{{easy, &t.small}, {hard, &t.large}} {
		model, _ := json.Marshal(t.model)
		body := fmt.Appendf(nil, `{"model":%s,"messages":[{"role":"user","content":"hi"}]}`, model)
		e, err := g.Explain(ctx, nil, body, q.class)
		if err != nil {
			return t, fmt.Errorf("where class %q goes: %w", q.class, err)
		}
		*q.pool = e.Pool
	}
	return t, nil
}
