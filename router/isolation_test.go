package router_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/switchyard/switchyard/internal/polltest"
	"github.com/switchyard/switchyard/router"
	"github.com/switchyard/switchyard/vllmsim"
)

// isolationYAML is a one-pool gateway with a short body timeout.
const isolationYAML = `
version: 1
server:
  body_timeout: 1s
  max_connections: 4
  admin_max_connections: 2
pools:
  p: {model: m, health: {disabled: true}, replicas: [{name: a, url: "{{m}}"}]}
routes:
  - name: default
    to: p
`

// rawRequest writes head (lines without their CRLFs) to addr and returns
// the connection and a reader of it.
func rawRequest(t *testing.T, addr string, head ...string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, strings.Join(head, "\r\n")+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	return c, bufio.NewReader(c)
}

// closedWithin reads c until it ends and reports whether that happened
// before d (a generous bound: the server closes after body_timeout, 1s).
func closedWithin(c net.Conn, br *bufio.Reader, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, br)
	return err == nil // EOF: the server closed; a timeout is an error
}

// TestUnreadBodyIsBounded: a request that announces a body it never sends
// holds its connection at most server.body_timeout, on every route and on
// the admin listener, with or without a key. Before the fix, routes that
// never read a body held such a connection forever (net/http's discard of
// the unread body after the handler had no deadline).
func TestUnreadBodyIsBounded(t *testing.T) {
	m := startReplica(t, fast("m"))
	gw := startGateway(t, loadConfig(t, isolationYAML, map[string]string{"m": m.Srv.URL}, nil))
	api, admin := strings.TrimPrefix(gw.API.URL, "http://"), strings.TrimPrefix(gw.Admin.URL, "http://")
	for _, c := range []struct{ addr, method, path string }{
		{api, "GET", "/v1/models"}, {api, "GET", "/healthz"}, {api, "GET", "/readyz"}, {api, "HEAD", "/"},
		{api, "GET", "/no/such/path"}, {api, "PUT", "/v1/chat/completions"}, {api, "POST", "/v1/chat/completions"},
		{api, "GET", "/v1/responses/resp_x"},
		{admin, "GET", "/metrics"}, {admin, "GET", "/admin/pools"}, {admin, "GET", "/healthz"}, {admin, "POST", "/admin/reload"},
		{admin, "GET", "/nothing"},
	} {
		t.Run(c.method+c.path, func(t *testing.T) {
			t.Parallel()
			conn, br := rawRequest(t, c.addr, c.method+" "+c.path+" HTTP/1.1", "Host: x", "Content-Type: application/json", "Content-Length: 100000")
			if !closedWithin(conn, br, 15*time.Second) {
				t.Errorf("%s %s on %s: the connection with an unsent body was still open after 15s (body_timeout 1s)", c.method, c.path, c.addr)
			}
		})
	}
}

// TestRequestBodyEncodingRefused: a gzip-encoded body is refused with 415
// in the endpoint's API shape and never reaches the replica.
func TestRequestBodyEncodingRefused(t *testing.T) {
	m := startReplica(t, fast("m"))
	gw := startGateway(t, loadConfig(t, isolationYAML, map[string]string{"m": m.Srv.URL}, nil))
	for _, c := range []struct{ path, shape string }{
		{"/v1/chat/completions", `"error":{"message"`}, {"/v1/messages", `"type":"error"`},
	} {
		resp, b := post(t, gw.API.URL+c.path, `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, map[string]string{"Content-Encoding": "gzip"})
		if resp.StatusCode != http.StatusUnsupportedMediaType || !strings.Contains(string(b), c.shape) {
			t.Errorf("%s: %d %s", c.path, resp.StatusCode, b)
		}
	}
	if n := m.Count(); n != 0 {
		t.Errorf("the replica got %d requests", n)
	}
}

// TestChunkedRequestCloses: a chunked request (net/http drops a
// Content-Length sent beside it) is answered and its connection closed.
func TestChunkedRequestCloses(t *testing.T) {
	m := startReplica(t, fast("m"))
	gw := startGateway(t, loadConfig(t, isolationYAML, map[string]string{"m": m.Srv.URL}, nil))
	body := `{"model":"m","max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`
	conn, br := rawRequest(t, strings.TrimPrefix(gw.API.URL, "http://"), "POST /v1/chat/completions HTTP/1.1", "Host: x",
		"Content-Type: application/json", "Transfer-Encoding: chunked", "Content-Length: 5")
	fmt.Fprintf(conn, "%x\r\n%s\r\n0\r\n\r\n", len(body), body)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != 200 || !resp.Close {
		t.Fatalf("chunked request: %d close=%t", resp.StatusCode, resp.Close)
	}
	if !closedWithin(conn, br, 10*time.Second) {
		t.Error("the connection stayed open")
	}
}

// TestEchoesAreBounded: a 4 MiB model name comes back cut in the error and
// the access line.
func TestEchoesAreBounded(t *testing.T) {
	m := startReplica(t, fast("m"))
	gw := startGateway(t, loadConfig(t, isolationYAML, map[string]string{"m": m.Srv.URL}, nil))
	name := strings.Repeat("x", 4<<20)
	resp, b := post(t, gw.API.URL+"/v1/embeddings", `{"model":"`+name+`","input":"a"}`, nil)
	if resp.StatusCode != 404 || len(b) > 2048 || !strings.Contains(string(b), "more bytes]") {
		t.Errorf("error for a 4 MiB model name: %d, %d bytes", resp.StatusCode, len(b))
	}
	polltest.Eventually(t, 5*time.Second, "the access line", func() bool { return strings.Contains(gw.Logs.String(), `"status":404`) })
	for _, line := range strings.Split(gw.Logs.String(), "\n") {
		if len(line) > 4096 {
			t.Errorf("a log line of %d bytes", len(line))
		}
	}
}

// TestClassifierBreakerIgnoresRequestFaults: one key's requests cannot open
// the classifier's breaker for everyone. Tool names are cut to the
// classifier's input bound (before the fix, three 20 KB names overflowed
// the classifier model's context and five such requests opened the
// breaker), and a classification the pool refuses with 4xx because of the
// request (here: a long turn with max_input_chars raised past the model's
// context) gets on_error's label without telling the breaker.
func TestClassifierBreakerIgnoresRequestFaults(t *testing.T) {
	q := startReplica(t, fast("Qwen/Qwen3.8-Flash-Next"))
	m := startReplica(t, fast("openbmb/MiniCPM5-2B"), vllmsim.WithChooser(vllmsim.DefaultChooser))
	yaml := strings.Replace(classifierYAML, "  on_error: complex\n", "  on_error: complex\n  max_input_chars: 40000\n  breaker: {failures: 3, cooldown: 1h}\n  cache: {size: 0}\n", 1)
	gw := startGateway(t, loadConfig(t, yaml, map[string]string{"qwen": q.Srv.URL, "minicpm": m.Srv.URL}, nil))
	url := gw.API.URL + "/v1/chat/completions"
	var tools []string
	for i := range 3 {
		tools = append(tools, fmt.Sprintf(`{"type":"function","function":{"name":"t%d%s"}}`, i, strings.Repeat("x", 20<<10)))
	}
	longNames := `,"tools":[` + strings.Join(tools, ",") + `]`
	for i := range 8 {
		// The replica may refuse the request itself for its length (400);
		// what counts is the classification before it.
		resp, b := post(t, url, chatBody(fmt.Sprint("hi ", i), longNames), nil)
		if resp.StatusCode != 200 && resp.StatusCode != 400 {
			t.Fatalf("long tool names %d: %d %s", i, resp.StatusCode, b)
		}
	}
	if v := gw.MetricValue(t, "switchyard_classifier_requests_total", map[string]string{"label": "simple", "result": "ok"}) +
		gw.MetricValue(t, "switchyard_classifier_requests_total", map[string]string{"label": "complex", "result": "ok"}); v != 8 {
		t.Errorf("requests with long tool names classified ok %v times, want 8 (names cut to the input bound)", v)
	}
	long := strings.Repeat("word ", 6000) // 30 KB: past the classifier model's 4096 tokens
	for i := range 8 {
		resp, b := post(t, url, chatBody(fmt.Sprint(i, long), ""), nil)
		if resp.StatusCode >= 500 || resp.Header.Get("X-Switchyard-Class") != "complex" {
			t.Fatalf("overlong turn %d: %d class %q %s", i, resp.StatusCode, resp.Header.Get("X-Switchyard-Class"), b)
		}
	}
	if v := gw.MetricValue(t, "switchyard_classifier_requests_total", map[string]string{"label": "complex", "result": "refused"}); v != 8 {
		t.Errorf("refused classifications %v, want 8", v)
	}
	if v := gw.MetricValue(t, "switchyard_classifier_circuit_open", nil); v != 0 {
		t.Fatalf("the breaker opened on request-caused failures")
	}
	// Another key's ordinary request is still classified.
	resp, _ := post(t, url, chatBody("What is the capital of Portugal?", ""), nil)
	if resp.StatusCode != 200 || resp.Header.Get("X-Switchyard-Class") != "simple" {
		t.Errorf("an ordinary request after the attack: %d class %q", resp.StatusCode, resp.Header.Get("X-Switchyard-Class"))
	}
}

// TestPoisonRequestEjectsNoReplica: a request that every replica answers
// with the same 500, or the same 503 (the input, not the replicas: each
// serves other requests), stops once no untried replica is left within
// its retries (here all three) and counts against none (issue 31, item
// 6); before the fix each try counted in its replica's consecutive-5xx
// streak and such requests ejected replicas that served everyone else.
func TestPoisonRequestEjectsNoReplica(t *testing.T) {
	for _, status := range []int{503, 500} {
		urls := map[string]string{}
		var reps []*replica
		for _, n := range []string{"a", "b", "c"} {
			r := startReplica(t, fast("m"))
			r.Sim.SetFaults(vllmsim.Faults{PoisonText: "POISON", FailStatus: status})
			urls[n] = r.Srv.URL
			reps = append(reps, r)
		}
		gw := startGateway(t, loadConfig(t, `
version: 1
pools:
  p:
    model: m
    balance: round_robin
    retries: 2
    outlier: {consecutive_5xx: 2}
    health: {disabled: true}
    replicas: [{name: a, url: "{{a}}"}, {name: b, url: "{{b}}"}, {name: c, url: "{{c}}"}]
routes:
  - name: default
    to: p
`, urls, nil))
		url := gw.API.URL + "/v1/chat/completions"
		for i := range 6 {
			resp, _ := post(t, url, `{"model":"m","max_tokens":3,"messages":[{"role":"user","content":"POISON `+fmt.Sprint(i)+`"}]}`, nil)
			if resp.StatusCode < 500 {
				t.Fatalf("%d: poison request %d: %d", status, i, resp.StatusCode)
			}
		}
		total := 0
		for _, r := range reps {
			total += r.Count()
		}
		if total != 18 {
			t.Errorf("%d: 6 poison requests reached replicas %d times, want 18 (every replica, within retries 2)", status, total)
		}
		if v := gw.MetricValue(t, "switchyard_poison_requests_total", map[string]string{"pool": "p"}); v != 6 {
			t.Errorf("%d: poison requests counted %v, want 6", status, v)
		}
		for _, n := range []string{"a", "b", "c"} {
			if v := gw.MetricValue(t, "switchyard_replica_ejections_total", map[string]string{"pool": "p", "replica": n}); v != 0 {
				t.Errorf("%d: replica %s ejected by poison requests", status, n)
			}
		}
		if status != 500 {
			continue
		}
		// A replica that fails alone is still held to account.
		reps[0].Sim.SetFaults(vllmsim.Faults{FailPercent: 100, FailStatus: 503})
		for i := range 6 {
			if resp, b := post(t, url, `{"model":"m","max_tokens":3,"messages":[{"role":"user","content":"fine `+fmt.Sprint(i)+`"}]}`, nil); resp.StatusCode != 200 {
				t.Fatalf("request %d with one failing replica: %d %s", i, resp.StatusCode, b)
			}
		}
		if v := gw.MetricValue(t, "switchyard_replica_ejections_total", map[string]string{"pool": "p", "replica": "a"}); v < 1 {
			t.Errorf("the failing replica was not ejected (%v)", v)
		}
	}
}

// TestStoredResponsesBelongToKeys: a stored response's id works only with
// the key that made it. Before the fix, key B could GET, continue, cancel
// and delete key A's stored response by its id.
func TestStoredResponsesBelongToKeys(t *testing.T) {
	m := startReplica(t, fast("m"))
	gw := oneReplicaGateway(t, m.Srv.URL, "", "{api_keys: [{name: a, key_env: KEY_A}, {name: b, key_env: KEY_B}]}",
		map[string]string{"KEY_A": "key-a-secret", "KEY_B": "key-b-secret"})
	as := func(key string) map[string]string { return map[string]string{"Authorization": "Bearer " + key} }
	resp, b := post(t, gw.API.URL+"/v1/responses", `{"model":"m","input":"hello","max_output_tokens":4}`, as("key-a-secret"))
	id := gjson.GetBytes(b, "id").Str
	if resp.StatusCode != 200 || !strings.HasPrefix(id, "resp_sy") {
		t.Fatalf("create: %d %s", resp.StatusCode, b)
	}
	do := func(method, path, body, key string) (int, []byte) {
		resp, out := request(t, method, gw.API.URL+path, body, as(key))
		return resp.StatusCode, out
	}
	before := m.Count()
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/v1/responses/" + id, ""},
		{"DELETE", "/v1/responses/" + id, ""},
		{"POST", "/v1/responses/" + id + "/cancel", ""},
		{"POST", "/v1/responses", `{"model":"m","input":"more","previous_response_id":"` + id + `"}`},
	} {
		code, out := do(c.method, c.path, c.body, "key-b-secret")
		if code != 404 || gjson.GetBytes(out, "error.code").Str != "response_not_found" {
			t.Errorf("key b %s %s: %d %s", c.method, c.path, code, out)
		}
	}
	// Forged and path-climbing ids never reach the replica either.
	for _, bad := range []string{id[:len(id)-1] + "x", "resp_sy" + id[7:19] + "0000000000000000_..", ".."} {
		if code, out := do("GET", "/v1/responses/"+bad, "", "key-a-secret"); code != 404 {
			t.Errorf("GET %q: %d %s", bad, code, out)
		}
	}
	if n := m.Count(); n != before {
		t.Errorf("the replica got %d requests for other keys' and forged ids", n-before)
	}
	if code, out := do("GET", "/v1/responses/"+id, "", "key-a-secret"); code != 200 || gjson.GetBytes(out, "id").Str != id {
		t.Errorf("key a GET its own: %d %s", code, out)
	}
	if code, out := do("POST", "/v1/responses", `{"model":"m","input":"more","max_output_tokens":4,"previous_response_id":"`+id+`"}`, "key-a-secret"); code != 200 {
		t.Errorf("key a continues its own: %d %s", code, out)
	}
}

// TestDeepClassifierAnswerRefused: a classifier answer nesting JSON deeper
// than the bound is never parsed (eight such answers took the gateway to
// 949 MiB before the fix); the request gets on_error's label.
func TestDeepClassifierAnswerRefused(t *testing.T) {
	deep := `{"choices":[{"message":{"content":` + strings.Repeat("[", 1_000_000) + strings.Repeat("]", 1_000_000) + `}}]}`
	cls := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, deep)
	}))
	t.Cleanup(cls.Close)
	q := startReplica(t, fast("Qwen/Qwen3.8-Flash-Next"))
	yaml := strings.Replace(classifierYAML, "  on_error: complex\n", "  on_error: complex\n  cache: {size: 0}\n", 1)
	yaml = strings.Replace(yaml, "model: openbmb/MiniCPM5-2B\n    health: {disabled: true}", "model: openbmb/MiniCPM5-2B\n    retries: 0\n    health: {disabled: true}", 1)
	gw := startGateway(t, loadConfig(t, yaml, map[string]string{"qwen": q.Srv.URL, "minicpm": cls.URL}, nil))
	for i := range 4 {
		resp, b := post(t, gw.API.URL+"/v1/chat/completions", chatBody(fmt.Sprint("hi ", i), ""), nil)
		if resp.StatusCode != 200 || resp.Header.Get("X-Switchyard-Class") != "complex" {
			t.Fatalf("%d class %q %s", resp.StatusCode, resp.Header.Get("X-Switchyard-Class"), b)
		}
	}
	if v := gw.MetricValue(t, "switchyard_classifier_requests_total", map[string]string{"label": "complex", "result": "error"}); v != 4 {
		t.Errorf("classifier errors %v, want 4", v)
	}
}

// TestAdminShowsProbing: a replica whose vLLM is still loading (/health
// 503) is "probing" in /admin/pools and takes no request; once a probe
// passes it is "healthy".
func TestAdminShowsProbing(t *testing.T) {
	good, loading := startReplica(t, fast("m")), startReplica(t, fast("m"))
	loading.Sim.SetFaults(vllmsim.Faults{Unhealthy: true})
	gw := startGateway(t, loadConfig(t, `
version: 1
pools:
  p:
    model: m
    balance: round_robin
    health: {interval: 20ms, timeout: 1s}
    replicas: [{name: good, url: "{{good}}"}, {name: loading, url: "{{loading}}"}]
routes:
  - name: default
    to: p
`, map[string]string{"good": good.Srv.URL, "loading": loading.Srv.URL}, nil))
	if v := adminReplicaView(t, gw, "p", "loading"); v.State != "probing" || v.Healthy {
		t.Fatalf("a loading replica: %+v", v)
	}
	for i := range 6 {
		if resp, b := post(t, gw.API.URL+"/v1/chat/completions", `{"model":"m","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`, nil); resp.StatusCode != 200 || resp.Header.Get("X-Switchyard-Replica") != "good" {
			t.Fatalf("request %d: %d %s on %q", i, resp.StatusCode, b, resp.Header.Get("X-Switchyard-Replica"))
		}
	}
	loading.Sim.SetFaults(vllmsim.Faults{})
	polltest.Eventually(t, 10*time.Second, "the replica to be admitted", func() bool { return adminReplicaView(t, gw, "p", "loading").State == "healthy" })
}

// TestUnknownModelHint: an agent's default model name gets 404 with a hint
// for the client, and the operator is told the one-line fix, once a
// minute at most.
func TestUnknownModelHint(t *testing.T) {
	m := startReplica(t, fast("m"))
	now := time.Unix(1e9, 0)
	var mu sync.Mutex
	gw := startGateway(t, loadConfig(t, isolationYAML, map[string]string{"m": m.Srv.URL}, nil), func(o *router.Options) {
		o.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	})
	hints := func() int { return strings.Count(gw.Logs.String(), `route: policy}]`) }
	for range 3 {
		if resp, _ := post(t, gw.API.URL+"/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`, nil); resp.StatusCode != 404 {
			t.Fatalf("%d", resp.StatusCode)
		}
	}
	if n := hints(); n != 1 {
		t.Errorf("%d hints for 3 requests within a minute, want 1", n)
	}
	mu.Lock()
	now = now.Add(61 * time.Second)
	mu.Unlock()
	post(t, gw.API.URL+"/v1/chat/completions", `{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"hi"}]}`, nil)
	if n := hints(); n != 2 {
		t.Errorf("%d hints after a minute, want 2", n)
	}
}

// TestPoisonClassificationSparesTheBreaker: a classification that both
// classifier replicas answer 500 for is the request's fault: it gets
// on_error's label and never opens the breaker (review finding).
func TestPoisonClassificationSparesTheBreaker(t *testing.T) {
	q := startReplica(t, fast("Qwen/Qwen3.8-Flash-Next"))
	m1 := startReplica(t, fast("openbmb/MiniCPM5-2B"), vllmsim.WithChooser(vllmsim.DefaultChooser))
	m2 := startReplica(t, fast("openbmb/MiniCPM5-2B"), vllmsim.WithChooser(vllmsim.DefaultChooser))
	for _, m := range []*replica{m1, m2} {
		m.Sim.SetFaults(vllmsim.Faults{PoisonText: "POISON", FailStatus: 500})
	}
	yaml := strings.Replace(classifierYAML, "  on_error: complex\n", "  on_error: complex\n  breaker: {failures: 2, cooldown: 1h}\n  cache: {size: 0}\n", 1)
	yaml = strings.Replace(yaml, `replicas: [{name: minicpm-a, url: "{{minicpm}}"}]`, `balance: round_robin
    replicas: [{name: minicpm-a, url: "{{minicpm}}"}, {name: minicpm-b, url: "{{minicpm2}}"}]`, 1)
	gw := startGateway(t, loadConfig(t, yaml, map[string]string{"qwen": q.Srv.URL, "minicpm": m1.Srv.URL, "minicpm2": m2.Srv.URL}, nil))
	for i := range 5 {
		resp, _ := post(t, gw.API.URL+"/v1/chat/completions", chatBody(fmt.Sprint("POISON ", i), ""), nil)
		if resp.Header.Get("X-Switchyard-Class") != "complex" {
			t.Fatalf("poison %d: class %q", i, resp.Header.Get("X-Switchyard-Class"))
		}
	}
	if v := gw.MetricValue(t, "switchyard_classifier_circuit_open", nil); v != 0 {
		t.Fatal("poison classifications opened the breaker")
	}
	if v := gw.MetricValue(t, "switchyard_classifier_requests_total", map[string]string{"label": "complex", "result": "refused"}); v != 5 {
		t.Errorf("refused classifications %v, want 5", v)
	}
}

// TestCountTokensForRoutedNames: count_tokens for a policy-routed name
// (auto, a pattern, a claude-* name) is answered by the pool the request
// would be routed to, without a classifier call (before: 400, and Claude
// Code 2.1.197 replaced each /context call with a generation).
func TestCountTokensForRoutedNames(t *testing.T) {
	gw, _, m := setupClassifier(t)
	calls := classifierCalls(m)
	for _, body := range []string{
		`{"model":"auto","messages":[{"role":"user","content":"hello there, how are you?"}]}`,
		`{"model":"auto","messages":[{"role":"user","content":"Prove step by step that the algorithm terminates."}]}`,
	} {
		resp, b := post(t, gw.API.URL+"/v1/messages/count_tokens", body, map[string]string{"anthropic-version": "2023-06-01"})
		if resp.StatusCode != 200 || gjson.GetBytes(b, "input_tokens").Int() <= 0 || resp.Header.Get("X-Switchyard-Pool") == "" {
			t.Errorf("count_tokens for auto: %d pool %q %s", resp.StatusCode, resp.Header.Get("X-Switchyard-Pool"), b)
		}
	}
	if n := classifierCalls(m); n != calls {
		t.Errorf("count_tokens called the classifier %d times", n-calls)
	}
}

// chainGateway runs pools small and big of model m on the replicas at s
// and b, the route's chain small then big; small and big are more
// settings of each pool, more more of the config.
func chainGateway(t *testing.T, s, b, small, big, more string) *gateway {
	t.Helper()
	return startGateway(t, loadConfig(t, `
version: 1
pools:
  small: {model: m, `+small+`health: {disabled: true}, replicas: [{name: s, url: "{{s}}"}]}
  big: {model: m, `+big+`health: {disabled: true}, replicas: [{name: b, url: "{{b}}"}]}
`+more+`
routes:
  - name: default
    to: small
    fallback: [big]
`, map[string]string{"s": s, "b": b}, nil))
}

// TestContextOverflowMovesUp: a request that cannot fit the small pool's
// context goes to the next pool of its chain, whether the gateway's
// estimate says so (max_model_len) or the replica's 400 does; before, the
// replica's 400 ("maximum context length") reached the client although a
// larger pool was in the chain.
func TestContextOverflowMovesUp(t *testing.T) {
	small := startReplica(t, vllmsim.Profile{Model: "m", DefaultMaxTokens: 8, MaxModelLen: 4096})
	big := startReplica(t, vllmsim.Profile{Model: "m", DefaultMaxTokens: 8, MaxModelLen: 65536})
	for _, c := range []struct{ name, smallExtra string }{
		{"estimate", "max_model_len: 4096, "},
		{"replica's 400", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			gw := chainGateway(t, small.Srv.URL, big.Srv.URL, c.smallExtra, "", "")
			long := strings.Repeat("word ", 5000) // about 6,000 tokens
			for _, stream := range []bool{false, true} {
				body := fmt.Sprintf(`{"model":"small","stream":%t,"max_tokens":8,"messages":[{"role":"user","content":%q}]}`, stream, long)
				body = strings.Replace(body, `"model":"small"`, `"model":"auto"`, 1)
				resp, b := post(t, gw.API.URL+"/v1/chat/completions", body, nil)
				if resp.StatusCode != 200 || resp.Header.Get("X-Switchyard-Pool") != "big" {
					t.Fatalf("stream %t: %d pool %q %.300s", stream, resp.StatusCode, resp.Header.Get("X-Switchyard-Pool"), b)
				}
			}
			if v := gw.MetricValue(t, "switchyard_fallbacks_total", map[string]string{"from": "small", "to": "big", "reason": "context_length"}); v != 2 {
				t.Errorf("context_length fallbacks %v, want 2", v)
			}
			// A prompt that fits stays on the small pool.
			if resp, _ := post(t, gw.API.URL+"/v1/chat/completions", `{"model":"auto","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`, nil); resp.Header.Get("X-Switchyard-Pool") != "small" {
				t.Errorf("a short prompt went to %q", resp.Header.Get("X-Switchyard-Pool"))
			}
		})
	}
}

// TestSessionEscalatesAndStays: a session whose prompt outgrew the small
// pool moves to the larger one and stays there for its later turns, even a
// short one that would fit (it never moves back down).
func TestSessionEscalatesAndStays(t *testing.T) {
	small := startReplica(t, vllmsim.Profile{Model: "m", DefaultMaxTokens: 8, MaxModelLen: 4096})
	big := startReplica(t, vllmsim.Profile{Model: "m", DefaultMaxTokens: 8, MaxModelLen: 65536})
	gw := chainGateway(t, small.Srv.URL, big.Srv.URL, "", "", "session: {header: X-Session-Id, ttl: 1m, implicit: false}")
	h := map[string]string{"X-Session-Id": "agent-1"}
	short := `{"model":"auto","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`
	if resp, _ := post(t, gw.API.URL+"/v1/chat/completions", short, h); resp.Header.Get("X-Switchyard-Pool") != "small" {
		t.Fatalf("the first turn went to %q", resp.Header.Get("X-Switchyard-Pool"))
	}
	long := fmt.Sprintf(`{"model":"auto","max_tokens":8,"messages":[{"role":"user","content":%q}]}`, strings.Repeat("word ", 5000))
	if resp, b := post(t, gw.API.URL+"/v1/chat/completions", long, h); resp.StatusCode != 200 || resp.Header.Get("X-Switchyard-Pool") != "big" {
		t.Fatalf("the long turn: %d %q %.200s", resp.StatusCode, resp.Header.Get("X-Switchyard-Pool"), b)
	}
	before := small.Count()
	if resp, _ := post(t, gw.API.URL+"/v1/chat/completions", short, h); resp.Header.Get("X-Switchyard-Pool") != "big" {
		t.Errorf("a later short turn went back to %q", resp.Header.Get("X-Switchyard-Pool"))
	}
	if small.Count() != before {
		t.Errorf("the small pool was asked again")
	}
	// Another session is not moved.
	if resp, _ := post(t, gw.API.URL+"/v1/chat/completions", short, map[string]string{"X-Session-Id": "agent-2"}); resp.Header.Get("X-Switchyard-Pool") != "small" {
		t.Errorf("another session went to %q", resp.Header.Get("X-Switchyard-Pool"))
	}
}

// TestExplainShowsContextSkips: explain names the pools a request would
// skip because it cannot fit their context.
func TestExplainShowsContextSkips(t *testing.T) {
	small := startReplica(t, vllmsim.Profile{Model: "m", DefaultMaxTokens: 8, MaxModelLen: 4096})
	gw := chainGateway(t, small.Srv.URL, small.Srv.URL, "max_model_len: 4096, ", "", "")
	long := fmt.Sprintf(`{"model":"auto","messages":[{"role":"user","content":%q}]}`, strings.Repeat("word ", 5000))
	resp, b := post(t, gw.Admin.URL+"/admin/explain", long, nil)
	if resp.StatusCode != 200 || gjson.GetBytes(b, "context_skips.0").Str != "small" {
		t.Errorf("%d %s", resp.StatusCode, b)
	}
	resp, b = post(t, gw.Admin.URL+"/admin/explain", `{"model":"auto","messages":[{"role":"user","content":"hi"}]}`, nil)
	if resp.StatusCode != 200 || gjson.GetBytes(b, "context_skips").Exists() {
		t.Errorf("a short prompt: %d %s", resp.StatusCode, b)
	}
}

// TestContextTokenize: where the estimate is too close to a pool's
// context to decide, the pool's /tokenize does. JSON-escaped text makes
// the estimate three times the real count: the tokenizer keeps such a
// prompt on the small pool, which the estimate alone would have skipped;
// a prompt the tokenizer finds too long moves up; one clearly over the
// context moves up without a call; and a pool whose /tokenize fails
// leaves the estimate to decide. (The band's rules, the body of each API
// and which replica counts: router/internal/tokenize.)
func TestContextTokenize(t *testing.T) {
	small := startReplica(t, vllmsim.Profile{Model: "m", DefaultMaxTokens: 8, MaxModelLen: 8192})
	big := startReplica(t, vllmsim.Profile{Model: "m", DefaultMaxTokens: 8, MaxModelLen: 131072})
	var mu sync.Mutex
	var tokenized [][]byte
	recording := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/tokenize" {
			b, _ := io.ReadAll(r.Body)
			mu.Lock()
			tokenized = append(tokenized, b)
			mu.Unlock()
			r.Body = io.NopCloser(bytes.NewReader(b))
		}
		small.Srv.Config.Handler.ServeHTTP(w, r)
	}))
	t.Cleanup(recording.Close)
	noTokenize := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/tokenize" {
			http.NotFound(w, r)
			return
		}
		small.Srv.Config.Handler.ServeHTTP(w, r)
	}))
	t.Cleanup(noTokenize.Close)
	for _, c := range []struct {
		name, smallURL, body string
		pool, result         string
	}{
		// 5,000 "\u00e9": 30,000 bytes of JSON (an estimate of 7,500
		// tokens, 8,524 with the minimal answer: over 8,192) that are
		// 10,000 bytes of text, 2,500 of the simulator's tokens.
		{"escaped text fits", recording.URL, strings.Repeat(`\u00e9`, 5000), "small", "fits"},
		{"too long", recording.URL, strings.Repeat("a", 30000), "big", "too_long"},
		{"clearly over", recording.URL, strings.Repeat("a", 60000), "big", ""},
		{"tokenize fails", noTokenize.URL, strings.Repeat(`\u00e9`, 5000), "big", "error"},
	} {
		t.Run(c.name, func(t *testing.T) {
			gw := chainGateway(t, c.smallURL, big.Srv.URL, "max_model_len: 8192, ", "max_model_len: 131072, ", "")
			mu.Lock()
			before := len(tokenized)
			mu.Unlock()
			resp, b := post(t, gw.API.URL+"/v1/chat/completions", `{"model":"auto","max_tokens":8,"messages":[{"role":"user","content":"`+c.body+`"}]}`, nil)
			if resp.StatusCode != 200 || resp.Header.Get("X-Switchyard-Pool") != c.pool {
				t.Fatalf("%d on pool %q, want %q: %.300s", resp.StatusCode, resp.Header.Get("X-Switchyard-Pool"), c.pool, b)
			}
			for _, r := range []string{"fits", "too_long", "error"} {
				want := 0.0
				if r == c.result {
					want = 1
				}
				if got := gw.MetricValue(t, "switchyard_context_tokenize_total", map[string]string{"pool": "small", "result": r}); got != want {
					t.Errorf("tokenize %s: %v, want %v", r, got, want)
				}
			}
			mu.Lock()
			calls := tokenized[before:]
			mu.Unlock()
			switch {
			case c.result == "fits" || c.result == "too_long":
				if len(calls) != 1 || !gjson.GetBytes(calls[0], "add_generation_prompt").Bool() || gjson.GetBytes(calls[0], "model").Str != "m" ||
					!gjson.GetBytes(calls[0], "messages.0.content").Exists() {
					t.Errorf("the /tokenize requests: %.300q", calls)
				}
			case c.result == "":
				if len(calls) != 0 {
					t.Errorf("%d /tokenize calls for a prompt clearly over the context", len(calls))
				}
			}
		})
	}
}
