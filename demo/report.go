package demo

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/switchyard/switchyard/classifier"
)

// Recorder collects load results for the live table and the summary.
type Recorder struct {
	mu      sync.Mutex
	total   []Result
	started time.Time
}

// NewRecorder starts a recorder.
func NewRecorder() *Recorder { return &Recorder{started: time.Now()} }

// Add records a result; safe for concurrent use.
func (r *Recorder) Add(res Result) {
	r.mu.Lock()
	r.total = append(r.total, res)
	r.mu.Unlock()
}

// All returns every result so far.
func (r *Recorder) All() []Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.total)
}

// Summary is the outcome of a load run.
type Summary struct {
	Requests   int
	Errors     int
	Duration   time.Duration
	ByPool     map[string]int
	ByRoute    map[string]int
	ByClass    map[string]int
	FirstError string
	// Failed describes each failed request (its API, kind, pool and
	// why), up to maxFailed.
	Failed []string
	// APIs is each client API's share and its split over the pools.
	APIs string
}

// apiSplit is each API's share of rs and, in brackets, its pool split:
// "chat 60% [minicpm 77% qwen 23%] · …".
func apiSplit(rs []Result) string {
	byAPI := groupBy(rs, func(r Result) string { return r.API })
	var parts []string
	for _, api := range sortedKeys(byAPI) {
		in := byAPI[api]
		parts = append(parts, fmt.Sprintf("%s %.0f%% [%s]", orDash(api), 100*float64(len(in))/float64(max(len(rs), 1)),
			shares(groupBy(in, func(r Result) string { return r.Pool }), len(in))))
	}
	return strings.Join(parts, " · ")
}

// Summarize aggregates every result.
func (r *Recorder) Summarize() Summary {
	all := r.All()
	s := Summary{Requests: len(all), Duration: time.Since(r.started),
		ByPool: map[string]int{}, ByRoute: map[string]int{}, ByClass: map[string]int{}}
	for _, res := range all {
		if res.Err != "" || res.Status != 200 {
			s.Errors++
			if s.FirstError == "" {
				s.FirstError = fmt.Sprintf("status %d: %s", res.Status, res.Err)
			}
			if len(s.Failed) < maxFailed {
				s.Failed = append(s.Failed, describe(res))
			}
		}
		s.ByPool[orDash(res.Pool)]++
		s.ByRoute[orDash(res.Route)]++
		s.ByClass[orDash(res.Class)]++
	}
	s.APIs = apiSplit(all)
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// maxFailed bounds the failed requests the summary lists.
const maxFailed = 10

// ClassLegend explains the "-" among the summary's classes, under them
// (the live table has no classes, so the banner does not explain it): the
// gateway sets X-Switchyard-Class only when the classifier decided the
// route, so a request that matched a rule before any class condition
// (side: a client's own small model) or that named a pool has no class.
const ClassLegend = `(class -: no classifier call was needed: a rule matched before any class condition, or the model named a pool)`

// PrintSummary writes the end-of-run summary.
func PrintSummary(w io.Writer, s Summary) {
	fmt.Fprintf(w, "\n══ summary: %d requests in %s (%.1f req/s), %d errors ══\n", s.Requests, s.Duration.Round(100*time.Millisecond),
		float64(s.Requests)/max(s.Duration.Seconds(), 0.001), s.Errors)
	fmt.Fprintf(w, "  pools:   %s\n", countShares(s.ByPool, s.Requests))
	fmt.Fprintf(w, "  routes:  %s\n", countShares(s.ByRoute, s.Requests))
	fmt.Fprintf(w, "  classes: %s\n", countShares(s.ByClass, s.Requests))
	fmt.Fprintf(w, "  apis:    %s\n", s.APIs)
	if s.ByClass["-"] > 0 {
		fmt.Fprintln(w, "  "+ClassLegend)
	}
	for _, f := range s.Failed {
		fmt.Fprintf(w, "  failed: %s\n", f)
	}
	if s.Errors > len(s.Failed) {
		fmt.Fprintf(w, "  … and %d more failed\n", s.Errors-len(s.Failed))
	}
}

func groupBy(rs []Result, key func(Result) string) map[string][]Result {
	out := map[string][]Result{}
	for _, r := range rs {
		out[key(r)] = append(out[key(r)], r)
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func shares(m map[string][]Result, total int) string {
	counts := map[string]int{}
	for k, v := range m {
		counts[k] = len(v)
	}
	return countShares(counts, total)
}

func countShares(m map[string]int, total int) string {
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s %.0f%%", orDash(k), 100*float64(m[k])/float64(max(total, 1))))
	}
	return strings.Join(parts, "  ")
}

func latencies(rs []Result) (lat, ttft []time.Duration) {
	for _, r := range rs {
		if r.Err != "" {
			continue
		}
		lat = append(lat, r.Latency)
		if r.TTFT > 0 {
			ttft = append(ttft, r.TTFT)
		}
	}
	slices.Sort(lat)
	slices.Sort(ttft)
	return lat, ttft
}

func pct(sorted []time.Duration, q float64) string {
	if len(sorted) == 0 {
		return "-"
	}
	d := sorted[min(int(q*float64(len(sorted))), len(sorted)-1)]
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d.Microseconds())
	case d < time.Second:
		return fmt.Sprintf("%.1fms", float64(d.Microseconds())/1000)
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}

// cacheHitRate reads the classifier counters from the registry: the share
// of classifications that asked the cache and found their answer there
// (classifier.CacheHitRate, the status page's and the dashboard's
// definition).
func cacheHitRate(reg prometheus.Gatherer) string {
	fams, err := reg.Gather()
	if err != nil {
		return "-"
	}
	results := map[string]float64{}
	for _, f := range fams {
		if f.GetName() != "switchyard_classifier_requests_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" {
					results[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	rate, ok := classifier.CacheHitRate(results)
	if !ok {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*rate)
}
