package demo

import (
	"strings"
	"testing"
	"time"
)

// TestSummaryClassLegend: the "-" among the summary's classes is explained
// right under them, and only when it is there.
func TestSummaryClassLegend(t *testing.T) {
	for _, tc := range []struct {
		name    string
		byClass map[string]int
		legend  bool
	}{
		{"with -", map[string]int{"simple": 5, "-": 3}, true},
		{"without -", map[string]int{"simple": 5, "complex": 3}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			PrintSummary(&b, Summary{Requests: 8, Duration: time.Second, ByClass: tc.byClass})
			text := b.String()
			classes := strings.Index(text, "  classes: ")
			legend := strings.Index(text, ClassLegend)
			if tc.legend != (legend >= 0) || (legend >= 0 && legend < classes) {
				t.Errorf("legend at %d, classes at %d (want a legend: %v):\n%s", legend, classes, tc.legend, text)
			}
		})
	}
}
