package router_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/tidwall/gjson"

	"github.com/switchyard/switchyard/internal/polltest"
	"github.com/switchyard/switchyard/policy"
	"github.com/switchyard/switchyard/pools"
	"github.com/switchyard/switchyard/router"
	"github.com/switchyard/switchyard/vllmsim"
)

const classifierYAML = `
version: 1
pools:
  qwen:
    model: Qwen/Qwen3.8-Flash-Next
    health: {disabled: true}
    replicas: [{name: qwen-a, url: "{{qwen}}"}]
  minicpm:
    model: openbmb/MiniCPM5-2B
    health: {disabled: true}
    replicas: [{name: minicpm-a, url: "{{minicpm}}"}]
classifier:
  kind: model
  pool: minicpm
  labels: [simple, {complex: "multi-step reasoning, code"}]
  timeout: 2s
  on_error: complex
models:
  - {name: auto, route: policy}
session:
  header: X-Session-Id
  ttl: 1m
  implicit: false
routes:
  - name: pinned
    when: {model: pinned}
    to: qwen
  - name: tool-heavy
    when: {tools: {gte: 4}}
    to: qwen
  - name: complex
    when: {class: complex}
    to: qwen
    fallback: [minicpm]
  - name: coin
    when: {header: {X-Coin: "yes"}}
    split: {qwen: 50, minicpm: 50}
  - name: default
    to: minicpm
`

// classifierCalls counts the constrained-choice requests a replica received.
func classifierCalls(r *replica) int {
	n := 0
	for _, b := range r.Bodies() {
		if strings.Contains(string(b), `"structured_outputs"`) {
			n++
		}
	}
	return n
}

func setupClassifier(t *testing.T) (*gateway, *replica, *replica) {
	t.Helper()
	q := startReplica(t, fast("Qwen/Qwen3.8-Flash-Next"))
	m := startReplica(t, fast("openbmb/MiniCPM5-2B"), vllmsim.WithChooser(vllmsim.DefaultChooser))
	cfg := loadConfig(t, strings.Replace(classifierYAML, "{name: auto, route: policy}", "{name: auto, route: policy}\n  - {name: pinned, route: policy}", 1),
		map[string]string{"qwen": q.Srv.URL, "minicpm": m.Srv.URL}, nil)
	return startGateway(t, cfg), q, m
}

func chatBody(content string, extra string) string {
	b, _ := json.Marshal(content)
	return `{"model":"auto","max_tokens":4,"messages":[{"role":"user","content":` + string(b) + `}]` + extra + `}`
}

func TestClassifierRouting(t *testing.T) {
	gw, _, m := setupClassifier(t)
	url := gw.API.URL + "/v1/chat/completions"

	resp, _ := post(t, url, chatBody("Prove step by step that the algorithm terminates, and analyze its complexity.", ""), nil)
	if got := [3]string{resp.Header.Get("X-Switchyard-Route"), resp.Header.Get("X-Switchyard-Pool"), resp.Header.Get("X-Switchyard-Class")}; got != [3]string{"complex", "qwen", "complex"} {
		t.Errorf("hard request: route/pool/class %v", got)
	}
	resp, _ = post(t, url, chatBody("What's the capital of Portugal?", ""), nil)
	if got := [3]string{resp.Header.Get("X-Switchyard-Route"), resp.Header.Get("X-Switchyard-Pool"), resp.Header.Get("X-Switchyard-Class")}; got != [3]string{"default", "minicpm", "simple"} {
		t.Errorf("easy request: route/pool/class %v", got)
	}
	if n := classifierCalls(m); n != 2 {
		t.Fatalf("classifier calls %d, want 2", n)
	}

	t.Run("cache hit", func(t *testing.T) {
		post(t, url, chatBody("What's the capital of Portugal?", ""), nil)
		if n := classifierCalls(m); n != 2 {
			t.Errorf("classifier calls %d after a repeated request, want still 2", n)
		}
		if v := gw.MetricValue(t, "switchyard_classifier_requests_total", map[string]string{"label": "simple", "result": "cache_hit"}); v != 1 {
			t.Errorf("cache_hit counter %v, want 1", v)
		}
	})

	t.Run("lazy: earlier rules never classify", func(t *testing.T) {
		before := classifierCalls(m)
		tools := `,"tools":[` + strings.Repeat(`{"type":"function","function":{"name":"f","parameters":{"type":"object"}}},`, 3) +
			`{"type":"function","function":{"name":"g","parameters":{"type":"object"}}}]`
		resp, _ := post(t, url, chatBody("unique question number one", tools), nil)
		if resp.Header.Get("X-Switchyard-Route") != "tool-heavy" || resp.Header.Get("X-Switchyard-Class") != "" {
			t.Errorf("route %q class %q", resp.Header.Get("X-Switchyard-Route"), resp.Header.Get("X-Switchyard-Class"))
		}
		b := strings.Replace(chatBody("unique question number two", ""), `"auto"`, `"pinned"`, 1)
		resp, _ = post(t, url, b, nil)
		if resp.Header.Get("X-Switchyard-Route") != "pinned" {
			t.Errorf("pinned route %q", resp.Header.Get("X-Switchyard-Route"))
		}
		post(t, url, strings.Replace(chatBody("unique question number three", ""), `"auto"`, `"minicpm"`, 1), nil)
		if n := classifierCalls(m) - before; n != 0 {
			t.Errorf("%d classifier calls for requests decided before any class rule", n)
		}
	})

	t.Run("sticky session across a split", func(t *testing.T) {
		pools := map[string]int{}
		for i := range 20 {
			h := map[string]string{"X-Session-Id": "agent-42", "X-Coin": "yes"}
			resp, _ := post(t, url, chatBody("hello again "+strings.Repeat("!", i), ""), h)
			pools[resp.Header.Get("X-Switchyard-Pool")]++
		}
		if len(pools) != 1 {
			t.Errorf("one session went to several pools: %v", pools)
		}
	})
}

func TestClassifierPoolDownUsesOnError(t *testing.T) {
	q := startReplica(t, fast("Qwen/Qwen3.8-Flash-Next"))
	cfg := loadConfig(t, classifierYAML, map[string]string{"qwen": q.Srv.URL, "minicpm": refusedURL(t)}, nil)
	gw := startGateway(t, cfg)
	resp, body := post(t, gw.API.URL+"/v1/chat/completions", chatBody("hi there", ""), nil)
	if resp.StatusCode != 200 || resp.Header.Get("X-Switchyard-Class") != "complex" || resp.Header.Get("X-Switchyard-Pool") != "qwen" {
		t.Fatalf("status %d class %q pool %q: %s", resp.StatusCode, resp.Header.Get("X-Switchyard-Class"), resp.Header.Get("X-Switchyard-Pool"), body)
	}
}

const reloadYAML = `
version: 1
pools:
  qwen:
    model: Qwen/Qwen3.8-Flash-Next
    health: {disabled: true}
    replicas: [{name: qwen-a, url: "QWEN"}]
  minicpm:
    model: openbmb/MiniCPM5-2B
    health: {disabled: true}
    replicas: [{name: minicpm-a, url: "MINICPM"}]
routes:
  - name: main
    to: TARGET
`

func TestReload(t *testing.T) {
	q := startReplica(t, vllmsim.Profile{Model: "Qwen/Qwen3.8-Flash-Next", DecodeTPS: 50, DefaultMaxTokens: 20})
	m := startReplica(t, fast("openbmb/MiniCPM5-2B"))
	render := func(target string) string {
		return strings.NewReplacer("QWEN", q.Srv.URL, "MINICPM", m.Srv.URL, "TARGET", target).Replace(reloadYAML)
	}
	gw, path := fileGateway(t, render("qwen"))
	url := gw.API.URL + "/v1/chat/completions"
	qwenBefore := gw.G.Snapshot().Pool("qwen").Replicas()[0].Endpoint

	// A stream that starts before the reload finishes on the old route.
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"model":"auto","stream":true,"messages":[{"role":"user","content":"long"}]}`))
	streamResp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer streamResp.Body.Close()
	if streamResp.Header.Get("X-Switchyard-Pool") != "qwen" {
		t.Fatalf("stream pool %q", streamResp.Header.Get("X-Switchyard-Pool"))
	}

	writeFile(t, path, render("minicpm"))
	resp, body := post(t, gw.Admin.URL+"/admin/reload", "", nil)
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"generation": 2`) {
		t.Fatalf("reload: %d %s", resp.StatusCode, body)
	}
	resp, _ = post(t, url, chatBody("after reload", ""), nil)
	if resp.Header.Get("X-Switchyard-Pool") != "minicpm" {
		t.Errorf("after reload, pool %q, want minicpm", resp.Header.Get("X-Switchyard-Pool"))
	}
	rest, err := io.ReadAll(streamResp.Body)
	if err != nil || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Errorf("the stream begun before the reload did not complete: %v\n%s", err, rest)
	}
	if gw.G.Snapshot().Pool("qwen").Replicas()[0].Endpoint != qwenBefore {
		t.Error("a kept replica got a new endpoint (its in-flight counts and health were lost)")
	}

	t.Run("invalid file keeps the running config", func(t *testing.T) {
		writeFile(t, path, render("minicpm")+"  - name: broken\n    to: nowhere\n")
		resp, body := post(t, gw.Admin.URL+"/admin/reload", "", nil)
		if resp.StatusCode != 400 || !strings.Contains(string(body), `switchyard.yaml:`) || !strings.Contains(string(body), `\"nowhere\" is not defined`) {
			t.Fatalf("reload of a bad file: %d %s", resp.StatusCode, body)
		}
		if gen := gw.G.Snapshot().Generation; gen != 2 {
			t.Errorf("generation %d after a refused reload, want 2", gen)
		}
		if resp, _ := post(t, url, chatBody("still serving", ""), nil); resp.StatusCode != 200 || resp.Header.Get("X-Switchyard-Pool") != "minicpm" {
			t.Errorf("after a refused reload: %d pool %q", resp.StatusCode, resp.Header.Get("X-Switchyard-Pool"))
		}
		if v := gw.MetricValue(t, "switchyard_config_reloads_total", map[string]string{"result": "error"}); v != 1 {
			t.Errorf("reload errors counted %v, want 1", v)
		}
	})
}

func TestReloadUnderLoadLosesNothing(t *testing.T) {
	q := startReplica(t, fast("Qwen/Qwen3.8-Flash-Next"))
	m := startReplica(t, fast("openbmb/MiniCPM5-2B"))
	render := func(target string) string {
		return strings.NewReplacer("QWEN", q.Srv.URL, "MINICPM", m.Srv.URL, "TARGET", target).Replace(reloadYAML)
	}
	gw, path := fileGateway(t, render("qwen"))
	l := startLoad(t, gw.API.URL, 4, true)
	for i := range 100 {
		reloadFile(t, gw, path, render([]string{"qwen", "minicpm"}[i%2]))
	}
	l.check(t)
	if l.ok.Load() == 0 {
		t.Error("no request succeeded across 100 reloads")
	}
	if gen := gw.G.Snapshot().Generation; gen != 101 {
		t.Errorf("generation %d, want 101", gen)
	}
}

// TestExplain: explain says which route, pool and replica a request would
// get and why, and classifies with the model when no class is given,
// showing scores to 3 decimals (the simulator's 0.8+0.05 came out as
// 0.8500000000000001). explain --class decides through the same path as
// serving, so a sticky split session is named the pool serving picks
// (before, explain built its own policy request without the session and
// could name the other pool); it reads Responses and Messages bodies too
// (before: "missing required parameter: 'messages'").
func TestExplain(t *testing.T) {
	gw, _, _ := setupClassifier(t)
	resp, body := post(t, gw.Admin.URL+"/admin/explain?class=complex", chatBody("anything", ""), nil)
	if resp.StatusCode != 200 {
		t.Fatalf("explain: %d %s", resp.StatusCode, body)
	}
	var e router.Explanation
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatal(err)
	}
	want := router.Explanation{
		Route: "complex", Pool: "qwen", Replica: "qwen-a", Class: "complex", Scores: map[string]float64{"complex": 1},
		Matched: []string{"complex"}, Fallback: []string{"minicpm"}, Why: []string{`class is "complex"`},
		// The balancer's stages for the one replica: a candidate, its
		// score, picked.
		Replicas: []pools.ReplicaScore{{Replica: "qwen-a", Score: new(0.0), Why: "requests in flight; fewest wins, ties at random", Picked: true}},
		// What the turn is, and the text the classifier reads of it.
		Turn: "instruction",
		ClassifierInput: "Turns: 1 (user instructions: 1)\nLast message: a new instruction from the user\nPrompt: under 1k tokens\n" +
			"Answer budget: under 1k tokens\nTools: none\nCurrent instruction:\nanything\n",
	}
	skipped := e.Skipped
	e.Skipped = nil
	if d := cmp.Diff(want, e); d != "" {
		t.Errorf("explain (-want +got):\n%s", d)
	}
	if len(skipped) != 2 || skipped[0].Route != "pinned" || skipped[1].Route != "tool-heavy" || skipped[1].Reason == "" {
		t.Errorf("skipped %+v", skipped)
	}
	// Explaining classifies with the model when no class is given.
	resp, body = post(t, gw.Admin.URL+"/admin/explain", chatBody("What time is it?", ""), nil)
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"class": "simple"`) || !strings.Contains(string(body), `"route": "default"`) {
		t.Errorf("explain with classifier: %d %s", resp.StatusCode, body)
	}
	resp, body = post(t, gw.Admin.URL+"/admin/explain", chatBody("Prove that the algorithm terminates.", ""), nil)
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"complex": 0.85,`) || strings.Contains(string(body), "0000000") {
		t.Errorf("scores not rounded: %d %s", resp.StatusCode, body)
	}
	for i := range 12 {
		h := map[string]string{"X-Coin": "yes", "X-Session-Id": fmt.Sprint("session-", i)}
		resp, _ := post(t, gw.API.URL+"/v1/chat/completions", chatBody("What is the capital of Portugal?", ""), h)
		served := resp.Header.Get("X-Switchyard-Pool")
		resp, b := post(t, gw.Admin.URL+"/admin/explain?class=simple", chatBody("What is the capital of Portugal?", ""), h)
		if resp.StatusCode != 200 || gjson.GetBytes(b, "pool").Str != served || served == "" {
			t.Errorf("session %d: served on %q, explain says %s", i, served, b)
		}
	}
	for _, c := range []struct{ api, body string }{
		{"", `{"model":"auto","input":"Prove step by step that the algorithm terminates."}`},
		{"responses", `{"model":"auto","input":[{"role":"user","content":"hi"}]}`},
		{"", `{"model":"auto","max_tokens":5,"system":"Be brief.","messages":[{"role":"user","content":"hi"}]}`},
		{"messages", `{"model":"auto","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`},
	} {
		resp, b := post(t, gw.Admin.URL+"/admin/explain?api="+c.api, c.body, nil)
		if resp.StatusCode != 200 || gjson.GetBytes(b, "pool").Str == "" {
			t.Errorf("explain api=%q %s: %d %s", c.api, c.body, resp.StatusCode, b)
		}
	}
	if resp, b := post(t, gw.Admin.URL+"/admin/explain?api=bogus", chatBody("hi", ""), nil); resp.StatusCode != 400 || !strings.Contains(string(b), "unknown API") {
		t.Errorf("api=bogus: %d %s", resp.StatusCode, b)
	}
}

func TestAdminEndpoints(t *testing.T) {
	q := startReplica(t, fast("Qwen/Qwen3.8-Flash-Next"))
	m := startReplica(t, fast("openbmb/MiniCPM5-2B"))
	cfg := loadConfig(t, `
version: 1
server:
  api_keys: [{name: ops, key_env: OPS_KEY}]
pools:
  qwen: {model: Qwen/Qwen3.8-Flash-Next, api_key_env: VLLM_KEY, health: {disabled: true}, replicas: [{name: q, url: "{{qwen}}"}]}
  minicpm: {model: openbmb/MiniCPM5-2B, health: {disabled: true}, replicas: [{name: m, url: "{{minicpm}}"}]}
routes:
  - name: default
    to: minicpm
`, map[string]string{"qwen": q.Srv.URL, "minicpm": m.Srv.URL}, map[string]string{"OPS_KEY": "sk-very-secret", "VLLM_KEY": "vllm-secret"})
	gw := startGateway(t, cfg)
	admin := func(path string) (int, string) {
		resp, b := get(t, gw.Admin.URL+path, nil)
		return resp.StatusCode, string(b)
	}
	code, conf := admin("/admin/config")
	if code != 200 || strings.Contains(conf, "sk-very-secret") || strings.Contains(conf, "vllm-secret") || !strings.Contains(conf, "key_env: OPS_KEY") {
		t.Errorf("/admin/config: %d\n%s", code, conf)
	}
	// The body after the generation line is the running config: it
	// validates and decodes to the same config.
	rendered, ok := strings.CutPrefix(conf, "# generation 1\n")
	reg := router.LoadOptions()
	reg.SkipEnv = true
	again, err := policy.Load("admin.yaml", []byte(rendered), reg)
	if !ok || err != nil {
		t.Fatalf("/admin/config does not validate: %v\n%s", err, conf)
	}
	if d := cmp.Diff(cfg, again, cmpopts.IgnoreFields(policy.Config{}, "File"), cmpopts.IgnoreUnexported(policy.Config{}), cmpopts.IgnoreTypes(policy.Secret(""))); d != "" {
		t.Errorf("/admin/config decodes to another config (-running +served):\n%s", d)
	}
	code, pools := admin("/admin/pools")
	if code != 200 || !strings.Contains(pools, `"name": "minicpm"`) || !strings.Contains(pools, `"healthy": true`) {
		t.Errorf("/admin/pools: %d\n%s", code, pools)
	}
	code, metrics := admin("/metrics")
	for _, name := range []string{"switchyard_config_generation 1", "go_goroutines", "switchyard_replica_healthy{pool=\"qwen\",replica=\"q\"} 1"} {
		if !strings.Contains(metrics, name) {
			t.Errorf("/metrics (%d) lacks %q", code, name)
		}
	}
	// The replica gets the pool's own key, never the client's.
	resp, _ := post(t, gw.API.URL+"/v1/chat/completions", strings.Replace(chatBody("x", ""), `"auto"`, `"qwen"`, 1), map[string]string{"Authorization": "Bearer sk-very-secret"})
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if got := q.LastHeader().Get("Authorization"); got != "Bearer vllm-secret" {
		t.Errorf("replica saw Authorization %q", got)
	}
}

func TestReloadKeepsClassifierCache(t *testing.T) {
	q := startReplica(t, fast("Qwen/Qwen3.8-Flash-Next"))
	m := startReplica(t, fast("openbmb/MiniCPM5-2B"), vllmsim.WithChooser(vllmsim.DefaultChooser))
	text := strings.NewReplacer("{{qwen}}", q.Srv.URL, "{{minicpm}}", m.Srv.URL).Replace(classifierYAML)
	gw, path := fileGateway(t, text)
	url := gw.API.URL + "/v1/chat/completions"
	post(t, url, chatBody("What's the capital of Portugal?", ""), nil)
	// A reload that changes only the routes keeps the classifier's cache.
	reloadFile(t, gw, path, strings.Replace(text, "name: coin", "name: coin-renamed", 1))
	post(t, url, chatBody("What's the capital of Portugal?", ""), nil)
	if n := classifierCalls(m); n != 1 {
		t.Errorf("classifier calls %d across an unrelated reload, want 1 (cache kept)", n)
	}
	// Changing the classifier builds a new one.
	reloadFile(t, gw, path, strings.Replace(text, "timeout: 2s", "timeout: 3s", 1))
	post(t, url, chatBody("What's the capital of Portugal?", ""), nil)
	if n := classifierCalls(m); n != 2 {
		t.Errorf("classifier calls %d after changing the classifier, want 2", n)
	}
}

// TestAdminJSONStyle: every JSON the admin API serves uses snake_case keys
// (no Go field names) and writes <, > and & as they are, so reasons read
// as written.
func TestAdminJSONStyle(t *testing.T) {
	q := startReplica(t, fast("Qwen/Qwen3.8-Flash-Next"))
	m := startReplica(t, fast("openbmb/MiniCPM5-2B"))
	gw := startGateway(t, loadConfig(t, `
version: 1
topology: {fabric: switch, nodes: [n1, n2], partitions: [{name: all, nodes: [n1, n2]}]}
pools:
  qwen: {model: Qwen/Qwen3.8-Flash-Next, health: {disabled: true}, replicas: [{name: q, url: "{{qwen}}", nodes: [n1]}]}
  minicpm: {model: openbmb/MiniCPM5-2B, health: {disabled: true}, replicas: [{name: m, url: "{{minicpm}}", nodes: [n2]}]}
routes:
  - name: long
    when: {prompt_tokens: {gt: 100000}}
    to: qwen
  - name: default
    to: minicpm
    spill: {to: qwen, when_queue_over: 8}
`, map[string]string{"qwen": q.Srv.URL, "minicpm": m.Srv.URL}, nil))
	snake := regexp.MustCompile(`^[a-z0-9_]+$`)
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				if !snake.MatchString(k) && !strings.HasSuffix(path, ".scores") {
					t.Errorf("key %s.%s is not snake_case", path, k)
				}
				walk(path+"."+k, e)
			}
		case []any:
			for _, e := range v {
				walk(path+"[]", e)
			}
		}
	}
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/admin/pools", ""},
		{"POST", "/admin/explain?class=simple", chatBody("hi", "")},
		{"GET", "/readyz", ""},
	} {
		_, b := request(t, c.method, gw.Admin.URL+c.path, c.body, nil)
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("%s: %v\n%s", c.path, err, b)
		}
		walk(c.path, v)
		if bytes.Contains(b, []byte(`\u003e`)) || bytes.Contains(b, []byte(`\u003c`)) || bytes.Contains(b, []byte(`\u0026`)) {
			t.Errorf("%s escapes HTML characters:\n%s", c.path, b)
		}
		if c.path == "/admin/explain?class=simple" && (!strings.Contains(string(b), `"when_queue_over": 8`) || !strings.Contains(string(b), "> 100000")) {
			t.Errorf("explain: %s", b)
		}
		if c.path == "/admin/pools" && !strings.Contains(string(b), `"fabric": "switch"`) {
			t.Errorf("pools: %s", b)
		}
	}
}

// TestAdminGuard: server.admin_token_env and admin_token_metrics reach the
// admin listener: the admin API and /metrics need the token, the probes
// stay open (the guard's rules, cross-origin calls included, are
// admin.TestGuard's).
func TestAdminGuard(t *testing.T) {
	m := startReplica(t, fast("m"))
	gw := oneReplicaGateway(t, m.Srv.URL, "", "{admin_token_env: ADMIN_TOKEN, admin_token_metrics: true}", map[string]string{"ADMIN_TOKEN": "adm-secret"})
	good := map[string]string{"Authorization": "Bearer adm-secret"}
	for _, c := range []struct {
		method, path string
		h            map[string]string
		want         int
	}{
		{"GET", "/admin/pools", nil, 401},
		{"GET", "/admin/pools", good, 200},
		{"GET", "/metrics", nil, 401},
		{"GET", "/metrics", good, 200},
		{"GET", "/healthz", nil, 200},
		{"GET", "/readyz", nil, 200},
		{"POST", "/admin/explain", nil, 401},
		{"POST", "/admin/explain", good, 200},
	} {
		if resp, _ := request(t, c.method, gw.Admin.URL+c.path, chatBody("hi", ""), c.h); resp.StatusCode != c.want {
			t.Errorf("%s %s %v: %d, want %d", c.method, c.path, c.h, resp.StatusCode, c.want)
		}
	}
}

// TestClassifierBreaker: a failing classifier pool is called at most
// breaker.failures times while every request keeps being served (with the
// on_error label); explain says the classifier failed; the classifier's
// own tokens are counted once it answers again.
func TestClassifierBreaker(t *testing.T) {
	q := startReplica(t, fast("Qwen/Qwen3.8-Flash-Next"))
	m := startReplica(t, fast("openbmb/MiniCPM5-2B"), vllmsim.WithChooser(vllmsim.DefaultChooser))
	m.Sim.SetFaults(vllmsim.Faults{FailPercent: 100, FailStatus: 500})
	yaml := strings.Replace(classifierYAML, "  on_error: complex\n", "  on_error: complex\n  breaker: {failures: 3, cooldown: 1h}\n  cache: {size: 0}\n", 1)
	yaml = strings.Replace(yaml, "model: openbmb/MiniCPM5-2B\n    health: {disabled: true}", "model: openbmb/MiniCPM5-2B\n    retries: 0\n    outlier: {consecutive_5xx: 0}\n    health: {disabled: true}", 1)
	gw := startGateway(t, loadConfig(t, yaml, map[string]string{"qwen": q.Srv.URL, "minicpm": m.Srv.URL}, nil))
	for i := range 20 {
		resp, b := post(t, gw.API.URL+"/v1/chat/completions", chatBody(fmt.Sprint("What is ", i, "?"), ""), nil)
		if resp.StatusCode != 200 || resp.Header.Get("X-Switchyard-Class") != "complex" {
			t.Fatalf("request %d: %d class %q %s", i, resp.StatusCode, resp.Header.Get("X-Switchyard-Class"), b)
		}
	}
	if n := classifierCalls(m); n != 3 {
		t.Errorf("the failing classifier pool was called %d times for 20 requests, want 3", n)
	}
	if v := gw.MetricValue(t, "switchyard_classifier_circuit_open", nil); v != 1 {
		t.Errorf("circuit gauge %v", v)
	}
	if v := gw.MetricValue(t, "switchyard_classifier_requests_total", map[string]string{"result": "circuit_open"}); v != 17 {
		t.Errorf("circuit_open count %v, want 17", v)
	}
	if !strings.Contains(gw.Logs.String(), "classifier circuit opened") {
		t.Errorf("no log line for the opening")
	}
	resp, b := post(t, gw.Admin.URL+"/admin/explain", chatBody("hi", ""), nil)
	if resp.StatusCode != 200 || gjson.GetBytes(b, "classifier.result").Str != "circuit_open" || !gjson.GetBytes(b, "classifier.fallback").Bool() {
		t.Errorf("explain: %d %s", resp.StatusCode, b)
	}
	if resp, b := post(t, gw.Admin.URL+"/admin/explain?class=bogus", chatBody("hi", ""), nil); resp.StatusCode != 400 || !strings.Contains(string(b), "not a label") {
		t.Errorf("explain with a bogus class: %d %s", resp.StatusCode, b)
	}
}

// TestClassifierTokensCounted: the classifier's own calls' tokens are in a
// series of their own, not in the client traffic's.
func TestClassifierTokensCounted(t *testing.T) {
	gw, _, m := setupClassifier(t)
	post(t, gw.API.URL+"/v1/chat/completions", chatBody("What's the capital of Portugal?", ""), nil)
	if classifierCalls(m) != 1 {
		t.Fatalf("classifier calls %d", classifierCalls(m))
	}
	if p := gw.MetricValue(t, "switchyard_classifier_tokens_total", map[string]string{"kind": "prompt"}); p <= 0 {
		t.Errorf("classifier prompt tokens %v", p)
	}
	if c := gw.MetricValue(t, "switchyard_classifier_tokens_total", map[string]string{"kind": "completion"}); c != 1 {
		t.Errorf("classifier completion tokens %v, want 1 (one label)", c)
	}
}

// TestShareControlAdmin: control.share's state is in /admin/control and
// the metrics, and the controller survives a reload that keeps its
// settings (its threshold, moved by traffic, stays).
func TestShareControlAdmin(t *testing.T) {
	q := startReplica(t, fast("Qwen/Qwen3.8-Flash-Next"))
	m := startReplica(t, fast("openbmb/MiniCPM5-2B"), vllmsim.WithChooser(vllmsim.DefaultChooser))
	text := strings.NewReplacer("{{qwen}}", q.Srv.URL, "{{minicpm}}", m.Srv.URL).Replace(classifierYAML)
	text = strings.Replace(text, "  - name: complex\n    when: {class: complex}", "  - name: complex\n    when: {score: {complex: {gte: auto}}}", 1)
	text = strings.Replace(text, "routes:\n", "control:\n  share: {pool: qwen, target: 0.3, window: 1s}\nroutes:\n", 1)
	// The controller ticks (on a decision) when window/30 has passed on
	// the gateway's clock, which the test moves: no tick runs between the
	// reads below.
	var (
		mu  sync.Mutex
		now = time.Unix(1e9, 0)
	)
	gw, path := fileGateway(t, text, func(o *router.Options) {
		o.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	})
	for i := range 40 {
		q := "What is the capital of country " + fmt.Sprint(i) + "?"
		if i%3 == 0 {
			q = "Prove step by step that the algorithm " + fmt.Sprint(i) + " terminates."
		}
		post(t, gw.API.URL+"/v1/chat/completions", chatBody(q, ""), nil)
		mu.Lock()
		now = now.Add(40 * time.Millisecond)
		mu.Unlock()
	}
	getControl := func() []byte {
		_, b := get(t, gw.Admin.URL+"/admin/control", nil)
		return b
	}
	b := getControl()
	if !gjson.GetBytes(b, "enabled").Bool() || gjson.GetBytes(b, "share.pool").Str != "qwen" || gjson.GetBytes(b, "share.target").Float() != 0.3 ||
		gjson.GetBytes(b, "share.decisions_in_window").Float() <= 0 {
		t.Errorf("/admin/control: %s", b)
	}
	thr := gjson.GetBytes(b, "share.threshold").Float()
	if thr == 0.5 {
		t.Errorf("threshold still at its start, 0.5, after 40 requests: the reload below would prove nothing")
	}
	if got := gw.MetricValue(t, "switchyard_control_threshold", map[string]string{"pool": "qwen"}); got != thr {
		t.Errorf("threshold metric %v, /admin/control %v", got, thr)
	}
	if got := gw.MetricValue(t, "switchyard_control_target", map[string]string{"pool": "qwen"}); got != 0.3 {
		t.Errorf("target metric %v", got)
	}
	reloadFile(t, gw, path, strings.Replace(text, "name: coin", "name: coin-renamed", 1))
	if after := gjson.GetBytes(getControl(), "share.threshold").Float(); after != thr {
		t.Errorf("threshold %v after a reload that kept the controller's settings, want %v", after, thr)
	}
}

// TestShadowPolicy: a shadow policy that differs from the live one in one
// route shows exactly that route's requests as disagreements, and changes
// nothing the requests get.
func TestShadowPolicy(t *testing.T) {
	q := startReplica(t, fast("Qwen/Qwen3.8-Flash-Next"))
	m := startReplica(t, fast("openbmb/MiniCPM5-2B"), vllmsim.WithChooser(vllmsim.DefaultChooser))
	text := strings.NewReplacer("{{qwen}}", q.Srv.URL, "{{minicpm}}", m.Srv.URL).Replace(classifierYAML)
	shadow := filepath.Join(t.TempDir(), "shadow.yaml")
	writeFile(t, shadow, strings.Replace(text, "    when: {tools: {gte: 4}}\n    to: qwen", "    when: {tools: {gte: 4}}\n    to: minicpm", 1))
	gw, _ := fileGateway(t, text, func(o *router.Options) { o.ShadowPath = shadow })
	tools := `,"tools":[` + strings.Repeat(`{"type":"function","function":{"name":"f","parameters":{"type":"object"}}},`, 3) +
		`{"type":"function","function":{"name":"g","parameters":{"type":"object"}}}]`
	var pools []string
	for i := range 10 {
		body := chatBody(fmt.Sprint("What is the capital of country ", i, "?"), "")
		switch {
		case i < 3:
			body = chatBody(fmt.Sprint("Book trip ", i), tools)
		case i < 5:
			body = chatBody(fmt.Sprint("Prove step by step that algorithm ", i, " terminates."), "")
		}
		resp, b := post(t, gw.API.URL+"/v1/chat/completions", body, nil)
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
		pools = append(pools, resp.Header.Get("X-Switchyard-Pool"))
	}
	// The live policy decided: tool-heavy requests went to qwen.
	if pools[0] != "qwen" || pools[1] != "qwen" || pools[2] != "qwen" {
		t.Errorf("live pools %v: the shadow changed the live routing", pools)
	}
	var b []byte
	polltest.Eventually(t, 5*time.Second, "ten shadow decisions", func() bool {
		_, b = get(t, gw.Admin.URL+"/admin/shadow", nil)
		return gjson.GetBytes(b, "decisions").Int() == 10
	})
	if got := gjson.GetBytes(b, "agreement").Float(); got != 0.7 {
		t.Errorf("agreement %v, want 0.7: %s", got, b)
	}
	dis := 0
	gjson.GetBytes(b, "pairs").ForEach(func(_, p gjson.Result) bool {
		if p.Get("live").Str != p.Get("shadow").Str {
			dis++
			if p.Get("live").Str != "qwen" || p.Get("shadow").Str != "minicpm" || p.Get("count").Int() != 3 {
				t.Errorf("disagreement %s, want qwen→minicpm ×3", p.Raw)
			}
		}
		return true
	})
	if dis != 1 {
		t.Errorf("%d kinds of disagreement, want 1: %s", dis, b)
	}
	if got := gw.MetricValue(t, "switchyard_shadow_decisions_total", map[string]string{"live_pool": "qwen", "shadow_pool": "minicpm"}); got != 3 {
		t.Errorf("metric qwen→minicpm %v, want 3", got)
	}
}

// TestShadowRefused: a shadow file the shadow package refuses (see
// shadow.TestNewRefuses) fails the gateway's start, naming why.
func TestShadowRefused(t *testing.T) {
	text := strings.NewReplacer("{{qwen}}", "http://127.0.0.1:1", "{{minicpm}}", "http://127.0.0.1:2").Replace(classifierYAML)
	path := filepath.Join(t.TempDir(), "shadow.yaml")
	writeFile(t, path, strings.Replace(text, "labels: [simple, {complex:", "labels: [easy, {complex:", 1))
	_, err := router.New(loadConfig(t, text, nil, nil), router.Options{Logger: slog.New(slog.DiscardHandler), ShadowPath: path, Passive: true})
	if err == nil || !strings.Contains(err.Error(), "shadow policy: ") || !strings.Contains(err.Error(), "classifier labels [easy complex] differ") {
		t.Errorf("%v, want the shadow refused", err)
	}
}
