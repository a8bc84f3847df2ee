package router_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/switchyard/switchyard/internal/polltest"
	"github.com/switchyard/switchyard/vllmsim"
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
		got[series["route"]+"/"+series["code"]] = gw.MetricValue(t, "switchyard_requests_total", series)
	}
	want := map[string]float64{"default/200": 7, "complex/200": 3, "none/404": 2, "none/400": 1}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("switchyard_requests_total (-want +got):\n%s", d)
	}
	// Tokens: the simulators' own counts of what they served to clients
	// (the classifier's calls on minicpm are not client traffic).
	qs, ms := q.Sim.Stats(), m.Sim.Stats()
	tokens := map[string]float64{
		"qwen/prompt":        gw.MetricValue(t, "switchyard_tokens_total", map[string]string{"pool": "qwen", "kind": "prompt"}),
		"qwen/completion":    gw.MetricValue(t, "switchyard_tokens_total", map[string]string{"pool": "qwen", "kind": "completion"}),
		"minicpm/completion": gw.MetricValue(t, "switchyard_tokens_total", map[string]string{"pool": "minicpm", "kind": "completion"}),
	}
	if tokens["qwen/prompt"] != float64(qs.PromptTokens) || tokens["qwen/completion"] != float64(qs.CompletionTokens) {
		t.Errorf("qwen tokens %v, simulator served prompt %d completion %d", tokens, qs.PromptTokens, qs.CompletionTokens)
	}
	// 7 client requests of max_tokens 4 on minicpm, stream or not, with or
	// without the client asking for usage.
	if tokens["minicpm/completion"] != 7*4 {
		t.Errorf("minicpm completion tokens %v, want 28 (simulator total incl. classifier calls: %d)", tokens["minicpm/completion"], ms.CompletionTokens)
	}
	if n := gw.MetricValue(t, "switchyard_time_to_first_token_seconds", map[string]string{"pool": "minicpm"}); n != 4 {
		t.Errorf("TTFT observations for minicpm %v, want 4 (one per stream)", n)
	}
	if n := gw.MetricValue(t, "switchyard_request_duration_seconds", map[string]string{"pool": "qwen"}); n != 3 {
		t.Errorf("duration observations for qwen %v, want 3", n)
	}
}

// TestPerKeyObservability: requests and tokens are counted per API key
// name, a request without a valid key as "none", and the access line names
// the key and the model the client asked for.
func TestPerKeyObservability(t *testing.T) {
	r := startReplica(t, vllmsim.Profile{Model: "m", DefaultMaxTokens: 5})
	gw := oneReplicaGateway(t, r.Srv.URL, "", "{api_keys: [{name: agents, key_env: K1}, {name: ci, key_env: K2}]}", map[string]string{"K1": "sk-agents", "K2": "sk-ci"})
	url := gw.API.URL + "/v1/chat/completions"
	body := `{"model":"auto","messages":[{"role":"user","content":"hi"}]}`
	for _, c := range []struct {
		key  string
		want int
	}{{"sk-agents", 200}, {"sk-agents", 200}, {"sk-ci", 200}, {"sk-wrong", 401}} {
		if resp, b := post(t, url, body, map[string]string{"Authorization": "Bearer " + c.key}); resp.StatusCode != c.want {
			t.Fatalf("key %s: %d %s", c.key, resp.StatusCode, b)
		}
	}
	polltest.Eventually(t, 5*time.Second, "the last request counted", func() bool {
		return gw.MetricValue(t, "switchyard_key_requests_total", map[string]string{"key": "none", "code": "401"}) == 1 &&
			strings.Count(gw.Logs.String(), `"msg":"request"`) == 4
	})
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"switchyard_key_requests_total", map[string]string{"key": "agents", "code": "200"}, 2},
		{"switchyard_key_requests_total", map[string]string{"key": "ci", "code": "200"}, 1},
		{"switchyard_key_requests_total", map[string]string{"key": "none", "code": "401"}, 1},
		{"switchyard_key_tokens_total", map[string]string{"key": "agents", "kind": "completion"}, 10},
		{"switchyard_key_tokens_total", map[string]string{"key": "ci", "kind": "completion"}, 5},
	} {
		if got := gw.MetricValue(t, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if logs := gw.Logs.String(); !strings.Contains(logs, `"key":"ci","model":"auto"`) {
		t.Errorf("the access line lacks the key and model: %s", logs)
	}
}
