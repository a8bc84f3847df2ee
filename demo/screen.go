package demo

import (
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/switchyard/switchyard/router"
)

// window is how far back the live view's rates, shares and latencies look:
// long enough that shares do not jump from second to second.
const window = 10 * time.Second

// lineEvery is how often the live view writes a line when its output is
// not a terminal.
const lineEvery = 5 * time.Second

// maxEvents is how many recent events (a killed replica, a failed request)
// the terminal view keeps on screen.
const maxEvents = 6

// screen is the demo's live view. On a terminal it is one table, redrawn
// in place under the banner; elsewhere (a pipe, a log file) it is one line
// every lineEvery.
type screen struct {
	w        io.Writer
	terminal bool
	// width is the terminal's width: each line is cut to it, so that the
	// table takes exactly as many rows as it has lines and redraws in
	// place.
	width int
	rec   *Recorder
	g     *router.Gateway
	// drawn is how many lines the last table took (terminal).
	drawn    int
	lastLine time.Time
	events   []event
	// seen is how many results have been looked at for failures.
	seen int
}

// event is one line under "events": when (into the run) and what.
type event struct {
	at, msg string
}

// event notes something the operator should see, at t into the run.
func (s *screen) event(t time.Duration, msg string) {
	e := event{at: fmt.Sprintf("%5s", t.Round(time.Second)), msg: msg}
	if !s.terminal {
		fmt.Fprintf(s.w, "%s  %s\n", e.at, e.msg)
		return
	}
	s.events = append(s.events, e)
	if len(s.events) > maxEvents {
		s.events = s.events[len(s.events)-maxEvents:]
	}
}

// tick updates the view at now.
func (s *screen) tick(now time.Time) {
	all := s.rec.All()
	elapsed := now.Sub(s.rec.started)
	for _, r := range all[s.seen:] {
		if r.Err != "" || r.Status != 200 {
			s.event(r.At.Sub(s.rec.started), "failed: "+describe(r))
		}
	}
	s.seen = len(all)
	var recent []Result
	for _, r := range all {
		if now.Sub(r.At) <= window {
			recent = append(recent, r)
		}
	}
	span := min(window, max(elapsed, time.Second))
	if !s.terminal {
		if now.Sub(s.lastLine) < lineEvery {
			return
		}
		s.lastLine = now
		fmt.Fprintln(s.w, s.line(elapsed, recent, span))
		return
	}
	table := fitWidth(s.table(elapsed, recent, span), s.width)
	if s.drawn > 0 {
		// Back to the table's first line, first column (the tty may have
		// echoed "^C" under the table, moving the cursor right); clear below.
		fmt.Fprintf(s.w, "\r\x1b[%dA\x1b[J", s.drawn)
	}
	fmt.Fprint(s.w, table)
	s.drawn = strings.Count(table, "\n")
}

// defaultWidth is the width of a terminal whose width is not known.
const defaultWidth = 120

// fitWidth cuts every line of text to width runes (0: defaultWidth).
func fitWidth(text string, width int) string {
	if width <= 0 {
		width = defaultWidth
	}
	lines := strings.SplitAfter(text, "\n")
	for i, l := range lines {
		body := strings.TrimSuffix(l, "\n")
		if r := []rune(body); len(r) > width-1 {
			lines[i] = string(r[:width-2]) + "…" + l[len(body):]
		}
	}
	return strings.Join(lines, "")
}

// describe is one failed request for a person: its API, kind and why.
func describe(r Result) string {
	how := "request"
	if r.Stream {
		how = "stream"
	}
	why := strings.Join(strings.Fields(r.Err), " ")
	if why == "" {
		why = fmt.Sprintf("status %d", r.Status)
	} else if r.Status != 0 && r.Status != 200 {
		why = fmt.Sprintf("status %d: %s", r.Status, why)
	}
	if len(why) > 160 {
		why = why[:160] + "…"
	}
	return fmt.Sprintf("%s %s %s (pool %s): %s", orDash(r.API), r.Kind, how, orDash(r.Pool), why)
}

// line is the one-line view: rate, errors, pool shares, replicas not up.
func (s *screen) line(elapsed time.Duration, rs []Result, span time.Duration) string {
	errs := 0
	for _, r := range rs {
		if r.Err != "" || r.Status != 200 {
			errs++
		}
	}
	down := []string{}
	for _, r := range s.replicas() {
		if r.state != "up" {
			down = append(down, r.name+" "+r.state)
		}
	}
	d := "all replicas up"
	if len(down) > 0 {
		d = "not up: " + strings.Join(down, ", ")
	}
	return fmt.Sprintf("t=%-5s %6.1f req/s  errors %d  pools: %s  %s", elapsed.Round(time.Second),
		float64(len(rs))/span.Seconds(), errs, shares(groupBy(rs, func(r Result) string { return r.Pool }), len(rs)), d)
}

// table is the terminal view.
func (s *screen) table(elapsed time.Duration, rs []Result, span time.Duration) string {
	var b strings.Builder
	errs := 0
	for _, r := range rs {
		if r.Err != "" || r.Status != 200 {
			errs++
		}
	}
	fmt.Fprintf(&b, "t=%-6s %6.1f req/s over the last %s   errors %d   classifier cache hits %s\n",
		elapsed.Round(time.Second), float64(len(rs))/span.Seconds(), span.Round(time.Second), errs, cacheHitRate(s.g.Registry()))
	fmt.Fprintf(&b, "  %-10s %6s %7s %9s %9s %9s %9s %6s\n", "pool", "share", "req/s", "p50", "p99", "ttft p50", "ttft p99", "errors")
	byPool := groupBy(rs, func(r Result) string { return r.Pool })
	pools := sortedKeys(byPool)
	for _, pool := range pools {
		prs := byPool[pool]
		lat, ttft := latencies(prs)
		fmt.Fprintf(&b, "  %-10s %5.0f%% %7.1f %9s %9s %9s %9s %6d\n", orDash(pool), 100*float64(len(prs))/float64(max(len(rs), 1)),
			float64(len(prs))/span.Seconds(), pct(lat, 0.5), pct(lat, 0.99), pct(ttft, 0.5), pct(ttft, 0.99), failures(prs))
	}
	fmt.Fprintf(&b, "  %-10s %6s", "api", "share")
	for _, pool := range pools {
		fmt.Fprintf(&b, " %9s", orDash(pool))
	}
	b.WriteString("\n")
	byAPI := groupBy(rs, func(r Result) string { return r.API })
	for _, api := range sortedKeys(byAPI) {
		ars := byAPI[api]
		fmt.Fprintf(&b, "  %-10s %5.0f%%", orDash(api), 100*float64(len(ars))/float64(max(len(rs), 1)))
		in := groupBy(ars, func(r Result) string { return r.Pool })
		for _, pool := range pools {
			fmt.Fprintf(&b, " %8.0f%%", 100*float64(len(in[pool]))/float64(max(len(ars), 1)))
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "  routes   %s\n", shares(groupBy(rs, func(r Result) string { return r.Route }), len(rs)))
	var reps []string
	replicas := s.replicas()
	for _, r := range replicas {
		reps = append(reps, fmt.Sprintf("%s %s %d", r.name, r.state, r.inflight))
	}
	// Long lines are wrapped, not cut, so that every word can be read on
	// an 80-column terminal; the continuation lines hang under the text.
	width := s.width
	if width <= 0 {
		width = defaultWidth
	}
	b.WriteString(wrap("  replicas (state, in flight)  ", reps, " │ ", width))
	if legend := stateLegend(replicas); legend != "" {
		b.WriteString(wrap("  ", strings.Fields(legend), " ", width))
	}
	b.WriteString("  events")
	if len(s.events) == 0 {
		b.WriteString("   none\n")
	} else {
		b.WriteString("\n")
		for _, e := range s.events {
			b.WriteString(wrap("    "+e.at+"  ", strings.Fields(e.msg), " ", width))
		}
	}
	return b.String()
}

// wrap writes first and then parts joined by sep, breaking lines between
// parts so that no line is wider than width-1 runes (the last column is
// left free, as fitWidth does); continuation lines are indented as wide as
// first. A part too long for a line of its own is left for fitWidth to cut.
func wrap(first string, parts []string, sep string, width int) string {
	indent := strings.Repeat(" ", utf8.RuneCountInString(first))
	var b strings.Builder
	b.WriteString(first)
	n := utf8.RuneCountInString(first)
	for i, p := range parts {
		pn := utf8.RuneCountInString(p)
		switch {
		case i == 0:
		case n+utf8.RuneCountInString(sep)+pn <= width-1:
			b.WriteString(sep)
			n += utf8.RuneCountInString(sep)
		default:
			b.WriteString("\n" + indent)
			n = len(indent)
		}
		b.WriteString(p)
		n += pn
	}
	b.WriteString("\n")
	return b.String()
}

// stateWords explains each replica state the table shows but "up".
var stateWords = []struct{ state, means string }{
	{"probing", "new, no requests until its first health probe passes"},
	{"EJECTED", "out of rotation after repeated errors, until its ejection ends"},
	{"DOWN", "failing its health probes (or refusing the pool's key or model), no requests until they pass"},
}

// stateLegend explains the states of replicas that are not up, once each,
// or is "" when every replica is up.
func stateLegend(reps []replicaLine) string {
	var parts []string
	for _, w := range stateWords {
		for _, r := range reps {
			if r.state == w.state {
				parts = append(parts, w.state+": "+w.means)
				break
			}
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "(" + strings.Join(parts, "; ") + ")"
}

type replicaLine struct {
	name, state string
	inflight    int64
}

// replicas are every replica of the running config, in config order.
func (s *screen) replicas() []replicaLine {
	snap := s.g.Snapshot()
	now := time.Now()
	var out []replicaLine
	for _, p := range snap.Config.Pools {
		for _, r := range snap.Pool(p.Name).Replicas() {
			state := "up"
			switch {
			case r.Probing():
				state = "probing"
			case r.Ejected(now):
				state = "EJECTED"
			case !r.Available(now):
				state = "DOWN"
			}
			out = append(out, replicaLine{r.Name, state, r.Inflight()})
		}
	}
	return out
}

func failures(rs []Result) int {
	n := 0
	for _, r := range rs {
		if r.Err != "" || r.Status != 200 {
			n++
		}
	}
	return n
}
