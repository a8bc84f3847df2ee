package replay

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
)

// Change is a turn whose route differs between two policies.
type Change struct {
	Capture  string `json:"capture"`
	Line     int    `json:"line"`
	OldRoute string `json:"old_route"`
	OldPool  string `json:"old_pool"`
	NewRoute string `json:"new_route"`
	NewPool  string `json:"new_pool"`
}

// Shift is how far one capture's share of turns on a route or a pool
// moved between two policies.
type Shift struct {
	Capture string  `json:"capture"`
	Kind    string  `json:"kind"` // route or pool
	Name    string  `json:"name"`
	Old     float64 `json:"old"`
	New     float64 `json:"new"`
}

// Delta is New - Old.
func (s Shift) Delta() float64 { return s.New - s.Old }

// Compare lists the turns whose route changes from old to new (matched by
// capture and line) and every share of turns, per capture, on a route or
// a pool, that moved.
func Compare(old, new []Result) ([]Change, []Shift) {
	byCapture := map[string]Result{}
	for _, r := range old {
		byCapture[r.Capture] = r
	}
	var changes []Change
	var shifts []Shift
	for _, n := range new {
		o, ok := byCapture[n.Capture]
		if !ok {
			continue
		}
		oldTurn := map[int]Turn{}
		for _, t := range o.Turns {
			oldTurn[t.Line] = t
		}
		for _, t := range n.Turns {
			if ot, ok := oldTurn[t.Line]; ok && ot.Route != t.Route {
				changes = append(changes, Change{n.Capture, t.Line, ot.Route, ot.Pool, t.Route, t.Pool})
			}
		}
		shifts = append(shifts, shares(n.Capture, "route", o.ByRoute, o.Requests, n.ByRoute, n.Requests)...)
		shifts = append(shifts, shares(n.Capture, "pool", o.ByPool, o.Requests, n.ByPool, n.Requests)...)
	}
	return changes, shifts
}

func shares(capture, kind string, old map[string]int, oldN int, new map[string]int, newN int) []Shift {
	names := map[string]bool{}
	for k := range old {
		names[k] = true
	}
	for k := range new {
		names[k] = true
	}
	var out []Shift
	for _, name := range slices.Sorted(maps.Keys(names)) {
		s := Shift{capture, kind, name, float64(old[name]) / float64(max(oldN, 1)), float64(new[name]) / float64(max(newN, 1))}
		if s.Delta() != 0 {
			out = append(out, s)
		}
	}
	return out
}

// Exceeds reports whether the comparison breaks the gate: with maxChange
// 0, any turn that changes route; otherwise any share that moved by more
// than maxChange.
func Exceeds(changes []Change, shifts []Shift, maxChange float64) bool {
	if maxChange == 0 {
		return len(changes) > 0
	}
	for _, s := range shifts {
		if math.Abs(s.Delta()) > maxChange+1e-9 {
			return true
		}
	}
	return false
}

// WriteTable prints results as a table: a row for each capture and a
// total.
func WriteTable(w io.Writer, results []Result) {
	pools := map[string]bool{}
	for _, r := range results {
		for p := range r.ByPool {
			pools[p] = true
		}
	}
	names := slices.Sorted(maps.Keys(pools))
	head := []string{fmt.Sprintf("%-20s", "capture"), fmt.Sprintf("%8s", "requests")}
	for _, p := range names {
		head = append(head, fmt.Sprintf("%12s", p+" req"), fmt.Sprintf("%12s", p+" tok"))
	}
	head = append(head, fmt.Sprintf("%10s", "side"), fmt.Sprintf("%9s", "cls/turn"), fmt.Sprintf("%18s", "sessions new/up/dn"),
		fmt.Sprintf("%10s", "bad turns"), fmt.Sprintf("%8s", "cls load"), " gain")
	fmt.Fprintln(w, strings.Join(head, " "))
	total := Result{Capture: "total", ByPool: map[string]int{}, TokensByPool: map[string]int{}, Sessions: map[string]int{}, Outcomes: map[string]int{}}
	for _, r := range results {
		writeRow(w, r, names)
		total.Requests += r.Requests
		total.PromptTokens += r.PromptTokens
		total.Side += r.Side
		total.ClassifierCalls += r.ClassifierCalls
		for k, v := range r.ByPool {
			total.ByPool[k] += v
		}
		for k, v := range r.TokensByPool {
			total.TokensByPool[k] += v
		}
		for k, v := range r.Sessions {
			total.Sessions[k] += v
		}
		for k, v := range r.Outcomes {
			total.Outcomes[k] += v
		}
		total.Turns = append(total.Turns, r.Turns...)
	}
	if len(results) > 1 {
		total.Gain.Factor = -1 // a gain is a capture's: the total has none
		writeRow(w, total, names)
	}
}

func writeRow(w io.Writer, r Result, pools []string) {
	pct := func(n, of int) string { return fmt.Sprintf("%.0f%%", 100*float64(n)/float64(max(of, 1))) }
	row := []string{fmt.Sprintf("%-20s", r.Capture), fmt.Sprintf("%8d", r.Requests)}
	for _, p := range pools {
		row = append(row, fmt.Sprintf("%12s", pct(r.ByPool[p], r.Requests)), fmt.Sprintf("%12s", pct(r.TokensByPool[p], r.PromptTokens)))
	}
	judged, bad := 0, 0
	for o, n := range r.Outcomes {
		judged += n
		if o != "ok" {
			bad += n
		}
	}
	row = append(row, fmt.Sprintf("%10s", pct(r.Side, r.Requests)),
		fmt.Sprintf("%9.2f", float64(r.ClassifierCalls)/float64(max(r.Requests, 1))),
		fmt.Sprintf("%18s", fmt.Sprintf("%d/%d/%d", r.Sessions["new"], r.Sessions["moved_up"], r.Sessions["moved_down"])),
		fmt.Sprintf("%10s", fmt.Sprintf("%d of %d", bad, judged)))
	if r.Gain.Factor < 0 {
		row = append(row, fmt.Sprintf("%8s", "-"), " -")
	} else {
		row = append(row, fmt.Sprintf("%8s", pct(int(math.Round(1000*r.Gain.ClassifierShare)), 1000)),
			fmt.Sprintf(" %.2fx (%s-bound)", r.Gain.Factor, r.Gain.Bottleneck))
	}
	fmt.Fprintln(w, strings.Join(row, " "))
}

// WriteComparison prints the turns whose route changed and the shares
// that moved.
func WriteComparison(w io.Writer, changes []Change, shifts []Shift) {
	fmt.Fprintf(w, "\n%d turns change route\n", len(changes))
	for _, c := range changes {
		fmt.Fprintf(w, "  %s line %d: %s (%s) -> %s (%s)\n", c.Capture, c.Line, c.OldRoute, c.OldPool, c.NewRoute, c.NewPool)
	}
	if len(shifts) == 0 {
		return
	}
	fmt.Fprintf(w, "\nshare of turns, per capture\n")
	for _, s := range shifts {
		fmt.Fprintf(w, "  %-20s %-5s %-12s %5.1f%% -> %5.1f%% (%+.1f)\n", s.Capture, s.Kind, s.Name, 100*s.Old, 100*s.New, 100*s.Delta())
	}
}
