package classifier_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/classifier"
)

func TestMetrics(t *testing.T) {
	// The replica answers by the last user message: "slow" never answers,
	// "junk" answers with no label, anything else is simple.
	tr := transportFunc(func(ctx context.Context, body []byte) ([]byte, error) {
		switch {
		case bytes.Contains(body, []byte(`Current instruction:\nslow`)):
			<-ctx.Done()
			return nil, ctx.Err()
		case bytes.Contains(body, []byte(`Current instruction:\njunk`)):
			return answer("banana"), nil
		}
		return answer("simple", top{"simple", 0.8}, top{"complex", 0.2}), nil
	})
	reg := prometheus.NewPedanticRegistry()
	c := newModel(t, tr, func(o *classifier.Options) {
		// The answers come at once; the timeout is the slack a loaded
		// machine gets to deliver them (the slow step waits it out).
		o.Timeout = 2 * time.Second
		o.Metrics = classifier.NewMetrics(reg)
	})

	steps := []struct {
		user, outcome string
	}{
		{"hello", classifier.OutcomeOK},
		{"hello", classifier.OutcomeCacheHit},
		{"hello", classifier.OutcomeCacheHit},
		{"junk", classifier.OutcomeError},
		{"junk", classifier.OutcomeError}, // failures are not cached
		{"slow", classifier.OutcomeTimeout},
		{"good morning", classifier.OutcomeOK},
	}
	for i, s := range steps {
		if r := c.Classify(context.Background(), classifier.Input{LastUser: s.user, Turns: 1}); r.Outcome != s.outcome {
			t.Fatalf("step %d (%q): outcome %q (%v), want %q", i, s.user, r.Outcome, r.Err, s.outcome)
		}
	}
	c.CountSticky("complex")

	// prometheus/testutil would need a module this repository does not
	// require (kylelemons/godebug), so the gathered values are compared here.
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	requests := map[string]float64{}
	counts := map[string]uint64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			switch f.GetName() {
			case "switchyard_classifier_requests_total":
				lv := map[string]string{}
				for _, l := range m.GetLabel() {
					lv[l.GetName()] = l.GetValue()
				}
				requests[lv["label"]+","+lv["result"]] = m.GetCounter().GetValue()
			case "switchyard_classifier_duration_seconds", "switchyard_classifier_confidence":
				counts[f.GetName()] = m.GetHistogram().GetSampleCount()
			}
		}
	}
	want := map[string]float64{ // label,result
		"simple,ok":        2,
		"simple,cache_hit": 2,
		"complex,error":    2,
		"complex,timeout":  1,
		"complex,sticky":   1,
	}
	if diff := cmp.Diff(want, requests); diff != "" {
		t.Errorf("switchyard_classifier_requests_total (-want +got):\n%s", diff)
	}
	// Durations count every classification that missed the cache; confidence
	// every successful one.
	if got := counts["switchyard_classifier_duration_seconds"]; got != 5 {
		t.Errorf("switchyard_classifier_duration_seconds count = %d, want 5", got)
	}
	if got := counts["switchyard_classifier_confidence"]; got != 2 {
		t.Errorf("switchyard_classifier_confidence count = %d, want 2", got)
	}
}
