package examples_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// promtoolBinary finds promtool (Debian's prometheus package has it);
// missing, the test says so and is skipped, except under CI.
func promtoolBinary(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("promtool"); err == nil {
		return p
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("promtool not found; CI must install it (apt-get install prometheus)")
	}
	fmt.Fprintln(os.Stderr, "examples: promtool not found (apt-get install prometheus): skipping the alert and dashboard unit tests")
	t.Skip("promtool not found; install it (apt-get install prometheus) to run this test")
	return ""
}

// TestAlertRulesUnitTests runs examples/prometheus/alerts_test.yml: every
// example alert fires on data that should page (the classifier's breaker
// open included) and stays quiet on ordinary noise, with two gateway
// instances.
func TestAlertRulesUnitTests(t *testing.T) {
	bin := promtoolBinary(t)
	out, err := exec.Command(bin, "test", "rules", filepath.Join(filepath.Dir(alertsPath), "alerts_test.yml")).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}

// panelSeries are two gateway instances' series, identical but for one
// replica that gw-b sees down: whatever sums a per-instance gauge, or
// sums what every instance scrapes from the same vLLM, is off by the
// number of instances, and the expectations below catch it. Rates, chosen
// to be exact in binary: qwen (the large pool) 0.75 req/s answered and
// 0.25 req/s 502 per instance, minicpm 1 req/s. Quantiles are written as
// the doubles PromQL computes.
var panelSeries = []struct{ series, values string }{
	{`switchyard_requests_total{pool="minicpm",route="default",code="200",class="simple"}`, "0+15x80"},
	{`switchyard_requests_total{pool="qwen",route="complex",code="200",class="complex"}`, "0+11.25x80"},
	{`switchyard_requests_total{pool="qwen",route="complex",code="502",class="complex"}`, "0+3.75x80"},
	{`switchyard_replica_healthy{pool="minicpm",replica="a"}`, "1x80"},
	{`switchyard_replica_healthy{pool="minicpm",replica="b"}`, "1x80"},
	{`switchyard_replica_healthy{pool="qwen",replica="c"}`, "1x80"},
	{`switchyard_replica_inflight{pool="minicpm",replica="a"}`, "2x80"},
	{`switchyard_replica_inflight{pool="minicpm",replica="b"}`, "1x80"},
	{`switchyard_replica_inflight{pool="qwen",replica="c"}`, "3x80"},
	{`switchyard_replica_queue{pool="minicpm",replica="a"}`, "5x80"},
	{`switchyard_replica_queue{pool="qwen",replica="c"}`, "7x80"},
	{`switchyard_replica_ejections_total{pool="minicpm",replica="b"}`, "1x80"},
	{`switchyard_replica_scrape_up{pool="minicpm",replica="a"}`, "1x80"},
	{`switchyard_route_inflight{route="default"}`, "4x80"},
	{`switchyard_route_inflight{route="complex"}`, "1x80"},
	{`switchyard_classifier_requests_total{label="simple",result="ok"}`, "0+7.5x80"},
	{`switchyard_classifier_requests_total{label="complex",result="cache_hit"}`, "0+3.75x80"},
	{`switchyard_classifier_requests_total{label="complex",result="circuit_open"}`, "0+3.75x80"},
	{`switchyard_tokens_total{pool="minicpm",kind="completion"}`, "0+150x80"},
	{`switchyard_upstream_retries_total{pool="qwen",reason="status_5xx"}`, "0+3.75x80"},
	{`switchyard_fallbacks_total{from="qwen",to="minicpm",reason="fallback"}`, "0+1.875x80"},
	{`switchyard_config_reloads_total{result="ok"}`, "1x80"},
	{`switchyard_config_generation`, "3x80"},
	{`switchyard_build_info{version="v1",goversion="go1"}`, "1x80"},
	// Half of minicpm's requests, TTFTs and queue waits within 0.1 s, the
	// rest within 1 s; every classification within 0.1 s.
	{`switchyard_request_duration_seconds_bucket{pool="minicpm",le="0.1"}`, "0+7.5x80"},
	{`switchyard_request_duration_seconds_bucket{pool="minicpm",le="1"}`, "0+15x80"},
	{`switchyard_request_duration_seconds_bucket{pool="minicpm",le="+Inf"}`, "0+15x80"},
	{`switchyard_time_to_first_token_seconds_bucket{pool="minicpm",le="0.1"}`, "0+7.5x80"},
	{`switchyard_time_to_first_token_seconds_bucket{pool="minicpm",le="1"}`, "0+15x80"},
	{`switchyard_time_to_first_token_seconds_bucket{pool="minicpm",le="+Inf"}`, "0+15x80"},
	{`switchyard_queue_wait_seconds_bucket{pool="minicpm",le="0.1"}`, "0+7.5x80"},
	{`switchyard_queue_wait_seconds_bucket{pool="minicpm",le="1"}`, "0+15x80"},
	{`switchyard_queue_wait_seconds_bucket{pool="minicpm",le="+Inf"}`, "0+15x80"},
	{`switchyard_classifier_duration_seconds_bucket{le="0.1"}`, "0+15x80"},
	{`switchyard_classifier_duration_seconds_bucket{le="+Inf"}`, "0+15x80"},
	{`switchyard_classifier_duration_seconds_count`, "0+15x80"},
	// A quarter of minicpm's judged turns went badly, none of qwen's.
	{`switchyard_turn_outcomes_total{pool="minicpm",route="default",outcome="ok"}`, "0+11.25x80"},
	{`switchyard_turn_outcomes_total{pool="minicpm",route="default",outcome="tool_error"}`, "0+3.75x80"},
	{`switchyard_turn_outcomes_total{pool="qwen",route="complex",outcome="ok"}`, "0+15x80"},
}

// panelWant is what each dashboard query must show on panelSeries, over
// both instances: label set → value ("" for a query that must be empty).
var panelWant = map[string]map[string]string{
	// Rates add up over instances.
	`sum by (pool) (rate(switchyard_requests_total{pool=~".*"}[1m]))`:                                                                                   {`{pool="minicpm"}`: "2", `{pool="qwen"}`: "2"},
	`sum by (pool) (rate(switchyard_requests_total{pool=~".*"}[1m])) / ignoring (pool) group_left sum(rate(switchyard_requests_total[1m]))`:             {`{pool="minicpm"}`: "0.5", `{pool="qwen"}`: "0.5"},
	`sum(rate(switchyard_requests_total{pool="qwen"}[5m])) / sum(rate(switchyard_requests_total[5m]))`:                                                  {`{}`: "0.5"},
	`sum by (route) (rate(switchyard_requests_total{pool=~".*"}[1m]))`:                                                                                  {`{route="default"}`: "2", `{route="complex"}`: "2"},
	`sum by (pool) (rate(switchyard_requests_total{pool=~".*",code=~"5..|429"}[1m]))`:                                                                   {`{pool="qwen"}`: "0.5"},
	`sum by (pool) (rate(switchyard_requests_total{pool=~".*",code=~"5..|429"}[1m])) / sum by (pool) (rate(switchyard_requests_total{pool=~".*"}[1m]))`: {`{pool="qwen"}`: "0.25"},
	`sum by (code) (rate(switchyard_requests_total{pool=~".*"}[1m]))`:                                                                                   {`{code="200"}`: "3.5", `{code="502"}`: "0.5"},
	`sum by (route) (switchyard_route_inflight)`:                                                                                                        {`{route="default"}`: "8", `{route="complex"}`: "2"},
	`sum by (class) (rate(switchyard_requests_total{pool=~".*"}[1m]))`:                                                                                  {`{class="simple"}`: "2", `{class="complex"}`: "2"},
	`histogram_quantile(0.5, sum by (pool, le) (rate(switchyard_request_duration_seconds_bucket{pool=~".*"}[1m])))`:                                     {`{pool="minicpm"}`: "0.1"},
	`histogram_quantile(0.95, sum by (pool, le) (rate(switchyard_request_duration_seconds_bucket{pool=~".*"}[1m])))`:                                    {`{pool="minicpm"}`: "0.9099999999999999"},
	`histogram_quantile(0.99, sum by (pool, le) (rate(switchyard_request_duration_seconds_bucket{pool=~".*"}[1m])))`:                                    {`{pool="minicpm"}`: "0.982"},
	`histogram_quantile(0.5, sum by (pool, le) (rate(switchyard_time_to_first_token_seconds_bucket{pool=~".*"}[1m])))`:                                  {`{pool="minicpm"}`: "0.1"},
	`histogram_quantile(0.99, sum by (pool, le) (rate(switchyard_time_to_first_token_seconds_bucket{pool=~".*"}[1m])))`:                                 {`{pool="minicpm"}`: "0.982"},
	`histogram_quantile(0.5, sum by (pool, le) (rate(switchyard_queue_wait_seconds_bucket{pool=~".*"}[1m])))`:                                           {`{pool="minicpm"}`: "0.1"},
	`histogram_quantile(0.99, sum by (pool, le) (rate(switchyard_queue_wait_seconds_bucket{pool=~".*"}[1m])))`:                                          {`{pool="minicpm"}`: "0.982"},
	`histogram_quantile(0.5, sum by (le) (rate(switchyard_classifier_duration_seconds_bucket[1m])))`:                                                    {`{}`: "0.05"},
	`histogram_quantile(0.99, sum by (le) (rate(switchyard_classifier_duration_seconds_bucket[1m])))`:                                                   {`{}`: "0.099"},
	`sum by (result) (rate(switchyard_classifier_requests_total[1m]))`:                                                                                  {`{result="ok"}`: "1", `{result="cache_hit"}`: "0.5", `{result="circuit_open"}`: "0.5"},
	`sum by (label) (rate(switchyard_classifier_requests_total[1m]))`:                                                                                   {`{label="simple"}`: "1", `{label="complex"}`: "1"},
	`sum(rate(switchyard_classifier_requests_total{result="cache_hit"}[1m])) / sum(rate(switchyard_classifier_requests_total{result!="sticky"}[1m]))`:   {`{}`: "0.25"},
	`sum(rate(switchyard_classifier_requests_total{result=~"timeout|error|circuit_open"}[1m])) / sum(rate(switchyard_classifier_requests_total[1m]))`:   {`{}`: "0.25"},
	// One classifier call (cache miss) a second per instance, two
	// requests a second per instance.
	`sum(rate(switchyard_classifier_duration_seconds_count[1m])) / sum(rate(switchyard_requests_total{route!="direct"}[1m]))`: {`{}`: "0.5"},
	// Turn outcomes: shares per pool, and rates that add up over instances.
	`(sum by (pool) (rate(switchyard_turn_outcomes_total{pool=~".*",outcome!="ok"}[1m])) or 0 * sum by (pool) (rate(switchyard_turn_outcomes_total{pool=~".*"}[1m]))) / sum by (pool) (rate(switchyard_turn_outcomes_total{pool=~".*"}[1m]))`: {`{pool="minicpm"}`: "0.25", `{pool="qwen"}`: "0"},
	`sum by (pool, outcome) (rate(switchyard_turn_outcomes_total{pool=~".*"}[1m]))`: {`{pool="minicpm",outcome="ok"}`: "1.5", `{pool="minicpm",outcome="tool_error"}`: "0.5", `{pool="qwen",outcome="ok"}`: "2"},
	// Down when any instance sees it down (one line per replica, not per
	// instance).
	`min by (pool, replica) (switchyard_replica_healthy{pool=~".*"})`: {`{pool="minicpm",replica="a"}`: "1", `{pool="minicpm",replica="b"}`: "0", `{pool="qwen",replica="c"}`: "1"},
	// A replica counts once, healthy when some instance sees it so.
	`sum by (pool) (max by (pool, replica) (switchyard_replica_healthy{pool=~".*"}))`: {`{pool="minicpm"}`: "2", `{pool="qwen"}`: "1"},
	// Switchyard's own in-flight requests add up over instances; the vLLM
	// queue is the replica's own, the same for every instance.
	`sum by (pool, replica) (switchyard_replica_inflight{pool=~".*"})`:                      {`{pool="minicpm",replica="a"}`: "4", `{pool="minicpm",replica="b"}`: "2", `{pool="qwen",replica="c"}`: "6"},
	`max by (pool, replica) (switchyard_replica_queue{pool=~".*"})`:                         {`{pool="minicpm",replica="a"}`: "5", `{pool="qwen",replica="c"}`: "7"},
	`sum by (pool, replica) (increase(switchyard_replica_ejections_total{pool=~".*"}[1m]))`: {`{pool="minicpm",replica="b"}`: "0"},
	`switchyard_replica_scrape_up{pool=~".*"} == 0`:                                         {},
	`sum by (pool, kind) (rate(switchyard_tokens_total{pool=~".*"}[1m]))`:                   {`{pool="minicpm",kind="completion"}`: "20"},
	`sum by (pool, reason) (rate(switchyard_upstream_retries_total{pool=~".*"}[1m]))`:       {`{pool="qwen",reason="status_5xx"}`: "0.5"},
	`sum by (from, to, reason) (rate(switchyard_fallbacks_total[1m]))`:                      {`{from="qwen",to="minicpm",reason="fallback"}`: "0.25"},
	`sum by (result) (increase(switchyard_config_reloads_total[5m]))`:                       {`{result="ok"}`: "0"},
	`max by (instance) (switchyard_config_generation)`:                                      {`{instance="gw-a:9090"}`: "3", `{instance="gw-b:9090"}`: "3"},
	`switchyard_build_info`: {
		`switchyard_build_info{instance="gw-a:9090",version="v1",goversion="go1"}`: "1",
		`switchyard_build_info{instance="gw-b:9090",version="v1",goversion="go1"}`: "1"},
}

// TestDashboardPanelsOnRecordedSeries evaluates every query of the example
// dashboard (template variables as Grafana substitutes them by default) on
// recorded series of two gateway instances, with promtool, against the
// value each panel must show. A query without an expectation here fails:
// a new panel is proved like the others.
func TestDashboardPanelsOnRecordedSeries(t *testing.T) {
	bin := promtoolBinary(t)
	var b strings.Builder
	b.WriteString("evaluation_interval: 15s\ntests:\n  - interval: 15s\n    input_series:\n")
	for _, inst := range []string{"gw-a:9090", "gw-b:9090"} {
		for _, s := range panelSeries {
			series, values := s.series, s.values
			if series == `switchyard_replica_healthy{pool="minicpm",replica="b"}` && inst == "gw-b:9090" {
				values = "0x80" // gw-b sees b down
			}
			fmt.Fprintf(&b, "      - series: '%s'\n        values: '%s'\n", withInstance(series, inst), values)
		}
	}
	b.WriteString("    promql_expr_test:\n")
	seen := map[string]bool{}
	for _, e := range dashboardExprs(t) {
		if seen[e.expr] {
			continue
		}
		seen[e.expr] = true
		want, ok := panelWant[e.expr]
		if !ok {
			t.Errorf("%s: no expected values for %s (add them to panelWant)", e.where, e.expr)
			continue
		}
		fmt.Fprintf(&b, "      - expr: '%s'\n        eval_time: 15m\n        exp_samples:\n", strings.ReplaceAll(e.expr, "'", "''"))
		keys := make([]string, 0, len(want))
		for k := range want {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "          - labels: '%s'\n            value: %s\n", k, want[k])
		}
		if len(want) == 0 {
			b.WriteString("          []\n")
		}
	}
	for e := range panelWant {
		if !seen[e] {
			t.Errorf("panelWant has %s, which no panel queries", e)
		}
	}
	path := filepath.Join(t.TempDir(), "panels_test.yml")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(b.String(), "exp_samples:\n          []\n", "exp_samples: []\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "test", "rules", path).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}

// withInstance adds an instance label to a series selector.
func withInstance(series, inst string) string {
	if i := strings.IndexByte(series, '{'); i >= 0 {
		return series[:i+1] + `instance="` + inst + `",` + series[i+1:]
	}
	return series + `{instance="` + inst + `"}`
}
