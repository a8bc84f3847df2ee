package router_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestMetricsAfterScriptedTraffic checks exact counter values after known
// traffic, and that token totals equal the simulator's own usage counts.
func TestMetricsAfterScriptedTraffic(t *testing.T) {
	gw, q, m := setupClassifier(t)
	url := gw.API.URL + "/v1/chat/completions"
	hard := chatBody("Prove step by step that the loop terminates.", "")
	easy := chatBody("What's the capital of Spain?", "")
	script := []struct {
		body  string
		times int
	}{
		{easy, 3},
		{strings.Replace(easy, `"model"`, `"stream":true,"model"`, 1), 2},
		{strings.Replace(easy, `"model"`, `"stream":true,"stream_options":{"include_usage":true},"model"`, 1), 2},
		{hard, 2},
		{strings.Replace(hard, `"model"`, `"stream":true,"model"`, 1), 1},
		{strings.Replace(easy, `"auto"`, `"gpt-unknown"`, 1), 2},
		{`{"model":"auto","messages":"nope"}`, 1},
	}
	for _, s := range script {
		for range s.times {
			post(t, url, s.body, nil)
		}
	}
	got := map[string]float64{}
	for _, series := range []map[string]string{
		{"route": "default", "pool": "minicpm", "class": "simple", "code": "200"},
		{"route": "complex", "pool": "qwen", "class": "complex", "code": "200"},
		{"route": "none", "pool": "none", "class": "none", "code": "404"},
		{"route": "none", "pool": "none", "class": "none", "code": "400"},
	} {
		got[series["route"]+"/"+series["code"]] = metricValue(t, gw, "switchyard_requests_total", series)
	}
	want := map[string]float64{"default/200": 7, "complex/200": 3, "none/404": 2, "none/400": 1}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("switchyard_requests_total (-want +got):\n%s", d)
	}
	// Tokens: the simulators' own counts of what they served to clients
	// (the classifier's calls on minicpm are not client traffic).
	qs, ms := q.Sim.Stats(), m.Sim.Stats()
	tokens := map[string]float64{
		"qwen/prompt":        metricValue(t, gw, "switchyard_tokens_total", map[string]string{"pool": "qwen", "kind": "prompt"}),
		"qwen/completion":    metricValue(t, gw, "switchyard_tokens_total", map[string]string{"pool": "qwen", "kind": "completion"}),
		"minicpm/completion": metricValue(t, gw, "switchyard_tokens_total", map[string]string{"pool": "minicpm", "kind": "completion"}),
	}
	if tokens["qwen/prompt"] != float64(qs.PromptTokens) || tokens["qwen/completion"] != float64(qs.CompletionTokens) {
		t.Errorf("qwen tokens %v, simulator served prompt %d completion %d", tokens, qs.PromptTokens, qs.CompletionTokens)
	}
	// 7 client requests of max_tokens 4 on minicpm, stream or not, with or
	// without the client asking for usage.
	if tokens["minicpm/completion"] != 7*4 {
		t.Errorf("minicpm completion tokens %v, want 28 (simulator total incl. classifier calls: %d)", tokens["minicpm/completion"], ms.CompletionTokens)
	}
	if n := metricValue(t, gw, "switchyard_time_to_first_token_seconds", map[string]string{"pool": "minicpm"}); n != 4 {
		t.Errorf("TTFT observations for minicpm %v, want 4 (one per stream)", n)
	}
	if n := metricValue(t, gw, "switchyard_request_duration_seconds", map[string]string{"pool": "qwen"}); n != 3 {
		t.Errorf("duration observations for qwen %v, want 3", n)
	}
}
