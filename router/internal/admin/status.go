package admin

import (
	"embed"
	"encoding/json"
	"io/fs"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// The status page: one page on the admin listener (GET /), its script and
// style, embedded in the binary. The page fetches /admin/status and
// nothing else; its Content-Security-Policy forbids any other origin.
//
//go:embed statuspage
var files embed.FS

// statusCSP lets the page load only its own files and talk only to the
// listener that served it.
const statusCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// asset serves one embedded file of the page.
func asset(name, contentType string) http.HandlerFunc {
	sub, _ := fs.Sub(files, "statuspage")
	body, err := fs.ReadFile(sub, name)
	if err != nil {
		panic("admin: status page file missing: " + name)
	}
	return func(w http.ResponseWriter, _ *http.Request) {
		h := w.Header()
		h.Set("Content-Type", contentType)
		h.Set("Content-Security-Policy", statusCSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Cache-Control", "no-cache")
		_, _ = w.Write(body)
	}
}

// statusDoc is GET /admin/status.
type statusDoc struct {
	Version    string         `json:"version"`
	Now        time.Time      `json:"now"`
	Started    time.Time      `json:"started"`
	Generation int64          `json:"generation"`
	LastReload *ReloadOutcome `json:"last_reload,omitempty"`
	// TokenRequired: the admin API needs a token (the page asks once).
	TokenRequired bool            `json:"token_required"`
	Split         SplitSeries     `json:"split"`
	Control       map[string]any  `json:"control,omitempty"`
	Pools         []PoolView      `json:"pools"`
	Classifier    *classifierStat `json:"classifier,omitempty"`
	Shadow        *ShadowSummary  `json:"shadow,omitempty"`
	Decisions     []*Decision     `json:"decisions"`
	// Figures are the page's numbers, each with one definition.
	Figures Figures `json:"figures"`
}

// classifierStat is the classifier's cumulative counters; the page turns
// them into rates between two polls.
type classifierStat struct {
	Kind        string             `json:"kind"`
	Results     map[string]float64 `json:"results"` // result → classifications
	DurationSum float64            `json:"duration_seconds_sum"`
	Calls       float64            `json:"calls"` // classifications that called the pool
	BreakerOpen bool               `json:"breaker_open"`
}

func (h *handler) status(w http.ResponseWriter, r *http.Request) {
	run := h.view.Running()
	now := h.Now()
	secs := statusSeconds
	if v := r.URL.Query().Get("seconds"); v != "" {
		// A page that already holds the history asks for the last few
		// seconds only.
		if n, err := parsePositive(v); err == nil && n < statusSeconds {
			secs = n
		}
	}
	doc := statusDoc{Version: h.Version, Now: now.UTC(), Started: h.Started.UTC(), Generation: run.Generation,
		LastReload: h.view.LastReload(), TokenRequired: run.Token != nil,
		Split: h.Ring.Series(now, secs), Pools: h.view.Pools(now), Decisions: h.Ring.Recent()}
	if state, ok := h.view.Control(); ok {
		doc.Control = map[string]any{"share": state}
	}
	doc.Shadow = h.view.Shadow()
	cur := gatherClassifier(h.Registry) // one gather for every view
	if run.Classifier != "" {
		doc.Classifier = &classifierStat{Kind: run.Classifier, Results: cur.Results, DurationSum: cur.DurationSum, Calls: cur.Calls, BreakerOpen: cur.BreakerOpen}
	}
	doc.Figures = h.figures(now, &cur, run.Classifier != "")
	// Compact: the page polls it every second (900 counts a series).
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(doc)
}

// ClassifierCounters are the classifier's cumulative counters at one
// moment: classifications by result, and the calls to its pool (those
// that missed the cache) with their summed duration.
type ClassifierCounters struct {
	At          time.Time
	Results     map[string]float64
	DurationSum float64
	Calls       float64
	// BreakerOpen: the classifier's circuit breaker is open.
	BreakerOpen bool
	// Outcomes are switchyard_turn_outcomes_total by pool and outcome.
	Outcomes map[string]map[string]float64
}

// gatherClassifier reads the classifier's counters from reg.
func gatherClassifier(reg prometheus.Gatherer) ClassifierCounters {
	c := ClassifierCounters{Results: map[string]float64{}, Outcomes: map[string]map[string]float64{}}
	fams, err := reg.Gather()
	if err != nil {
		return c
	}
	for _, f := range fams {
		switch f.GetName() {
		case "switchyard_classifier_requests_total":
			for _, m := range f.GetMetric() {
				c.Results[label(m.GetLabel(), "result")] += m.GetCounter().GetValue()
			}
		case "switchyard_classifier_duration_seconds":
			for _, m := range f.GetMetric() {
				c.DurationSum += m.GetHistogram().GetSampleSum()
				c.Calls += float64(m.GetHistogram().GetSampleCount())
			}
		case "switchyard_turn_outcomes_total":
			for _, m := range f.GetMetric() {
				pool := label(m.GetLabel(), "pool")
				if c.Outcomes[pool] == nil {
					c.Outcomes[pool] = map[string]float64{}
				}
				c.Outcomes[pool][label(m.GetLabel(), "outcome")] += m.GetCounter().GetValue()
			}
		case "switchyard_classifier_circuit_open":
			for _, m := range f.GetMetric() {
				c.BreakerOpen = m.GetGauge().GetValue() == 1
			}
		}
	}
	return c
}

// label is the value of the label name among ls ("" when absent).
func label(ls []*dto.LabelPair, name string) string {
	for _, l := range ls {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// parsePositive reads a positive decimal integer.
func parsePositive(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err == nil && n <= 0 {
		err = strconv.ErrRange
	}
	return n, err
}
