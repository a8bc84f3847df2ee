package router_test

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/polltest"
	"github.com/switchyard/switchyard/router"
	"github.com/switchyard/switchyard/vllmsim"
)

// holdReplica is a simulator behind a gate: a request whose body holds
// "HOLD" waits (holding its gateway slot) until release is called or its
// client leaves; held counts those waiting.
type holdReplica struct {
	Srv     *httptest.Server
	held    atomic.Int64
	served  atomic.Int64
	release func()
}

func startHoldReplica(t testing.TB, p vllmsim.Profile, opts ...vllmsim.Option) *holdReplica {
	t.Helper()
	sim := vllmsim.New(p, opts...)
	gate := make(chan struct{})
	var once sync.Once
	h := &holdReplica{release: func() { once.Do(func() { close(gate) }) }}
	h.Srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if bytes.Contains(body, []byte("HOLD")) {
			h.held.Add(1)
			select {
			case <-gate:
			case <-r.Context().Done():
			}
			h.held.Add(-1)
		}
		if r.Method == http.MethodPost {
			h.served.Add(1)
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		sim.ServeHTTP(w, r)
	}))
	t.Cleanup(h.Srv.Close)
	t.Cleanup(h.release)
	return h
}

// hog sends n requests that the replica holds to model (a pool name),
// each in its own goroutine; the returned func waits for them.
func hog(t *testing.T, url, model string, n int, header map[string]string) func() {
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := fmt.Sprintf(`{"model":%q,"max_tokens":4,"messages":[{"role":"user","content":"HOLD %d"}]}`, model, i)
			req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			for k, v := range header {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	return wg.Wait
}

// TestClassifierNotStarvedByTenant: a tenant that holds every slot of the
// classifier's pool with long requests cannot open the classifier's
// breaker for everyone (issue 31, item 3). Before the fix each
// classification waited in the pool's queue until the classifier's
// timeout, that counted as the pool failing, and three in a row opened the
// breaker: every tenant's auto traffic then got on_error's label. Now the
// wait never counts, and with classifier.reserved_slots the calls find a
// slot the tenant cannot take.
func TestClassifierNotStarvedByTenant(t *testing.T) {
	for _, tc := range []struct {
		name     string
		reserved string
		held     int64 // the slots the hog gets
	}{
		{name: "no reservation", reserved: "", held: 2},
		{name: "one reserved slot", reserved: "  reserved_slots: 1\n", held: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := startReplica(t, fast("Qwen/Qwen3.8-Flash-Next"))
			m := startHoldReplica(t, fast("openbmb/MiniCPM5-2B"), vllmsim.WithChooser(vllmsim.DefaultChooser))
			yaml := strings.Replace(classifierYAML, "    replicas: [{name: minicpm-a, url: \"{{minicpm}}\"}]\n",
				"    replicas: [{name: minicpm-a, url: \"{{minicpm}}\"}]\n    max_inflight: 2\n    queue_timeout: 1m\n", 1)
			yaml = strings.Replace(yaml, "  timeout: 2s\n  on_error: complex\n",
				"  timeout: 2s\n  on_error: complex\n  breaker: {failures: 3, cooldown: 1h}\n  cache: {size: 0}\n"+tc.reserved, 1)
			// The victims' own requests go to the other pool: what is
			// tested is their classification.
			yaml = strings.Replace(yaml, "  - name: default\n    to: minicpm\n", "  - name: default\n    to: qwen\n", 1)
			if tc.reserved == "" {
				// Calls that cannot get a slot end at the classifier's
				// timeout: keep it short so the case runs quickly.
				yaml = strings.Replace(yaml, "  timeout: 2s\n", "  timeout: 100ms\n", 1)
			}
			gw := startGateway(t, loadConfig(t, yaml, map[string]string{"qwen": q.Srv.URL, "minicpm": m.Srv.URL}, nil))
			url := gw.API.URL + "/v1/chat/completions"
			wait := hog(t, url, "minicpm", 3, nil)
			polltest.Eventually(t, 10*time.Second, "the hog to hold its slots", func() bool { return m.held.Load() == tc.held })

			for i := range 5 {
				resp, b := post(t, url, chatBody(fmt.Sprint("What is the capital of Portugal? ", i), ""), nil)
				if resp.StatusCode != 200 {
					t.Fatalf("victim request %d: %d %s", i, resp.StatusCode, b)
				}
				class := resp.Header.Get("X-Switchyard-Class")
				if tc.reserved != "" && class != "simple" {
					t.Errorf("victim request %d classified %q with a reserved slot, want simple", i, class)
				}
			}
			if v := gw.MetricValue(t, "switchyard_classifier_requests_total", map[string]string{"result": "circuit_open"}); v != 0 {
				t.Errorf("%v classifications refused by an open breaker: waiting for a slot counted as the pool failing", v)
			}
			if v := gw.MetricValue(t, "switchyard_classifier_circuit_open", nil); v != 0 {
				t.Errorf("the classifier breaker opened")
			}
			if got := m.held.Load(); got != tc.held {
				t.Errorf("the hog holds %d slots after the victims, want %d", got, tc.held)
			}
			m.release()
			wait()
			// Once the slots are free the classifier answers at once.
			resp, _ := post(t, url, chatBody("What is the capital of Spain?", ""), nil)
			if c := resp.Header.Get("X-Switchyard-Class"); c != "simple" {
				t.Errorf("after the hog: class %q, want simple", c)
			}
		})
	}
}

// TestKeyMaxInflight: api_keys[].max_inflight bounds what one key holds:
// a key with long requests gets 429 beyond its cap while another key's
// requests are answered at once (issue 31, item 4). Before the fix the
// hog held every slot of the pool and the victim waited in the queue.
func TestKeyMaxInflight(t *testing.T) {
	m := startHoldReplica(t, fast("m"))
	gw := oneReplicaGateway(t, m.Srv.URL, ", max_inflight: 3, queue_timeout: 1m", "{api_keys: [{name: hog, key_env: KEY_HOG, max_inflight: 2}, {name: victim, key_env: KEY_VICTIM}]}",
		map[string]string{"KEY_HOG": "hog-secret", "KEY_VICTIM": "victim-secret"})
	url := gw.API.URL + "/v1/chat/completions"
	hogKey := map[string]string{"Authorization": "Bearer hog-secret"}
	wait := hog(t, url, "p", 2, hogKey)
	polltest.Eventually(t, 10*time.Second, "the hog to hold two slots", func() bool { return m.held.Load() == 2 })
	resp, b := post(t, url, `{"model":"p","max_tokens":4,"messages":[{"role":"user","content":"HOLD more"}]}`, hogKey)
	if resp.StatusCode != 429 || !strings.Contains(string(b), "max_inflight") {
		t.Fatalf("the hog's third request: %d %s, want 429 naming max_inflight", resp.StatusCode, b)
	}
	for i := range 3 {
		resp, b := post(t, url, chatBody(fmt.Sprint("hello ", i), ""), map[string]string{"Authorization": "Bearer victim-secret"})
		if resp.StatusCode != 200 {
			t.Fatalf("victim request %d: %d %s", i, resp.StatusCode, b)
		}
	}
	m.release()
	wait()
	resp, b = post(t, url, `{"model":"p","max_tokens":4,"messages":[{"role":"user","content":"after"}]}`, hogKey)
	if resp.StatusCode != 200 {
		t.Fatalf("the hog after its requests ended: %d %s (its slots were not given back)", resp.StatusCode, b)
	}
}

// TestRequestLoop: a pool whose replica is the gateway itself (here under
// an address the config check cannot see through) makes one request go
// round once: the gateway refuses the request it had marked with 508,
// and the client gets one clear error (issue 31, item 2). Before the fix
// the request went round until connections or the client's patience ran
// out.
func TestRequestLoop(t *testing.T) {
	var h atomic.Value
	var hits atomic.Int64
	self := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			hits.Add(1)
		}
		h.Load().(http.Handler).ServeHTTP(w, r)
	}))
	defer self.Close()
	gw := oneReplicaGateway(t, self.URL, ", retries: 2", "")
	h.Store(gw.G.Handler())
	resp, b := post(t, self.URL+"/v1/chat/completions", `{"model":"p","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`, nil)
	if resp.StatusCode < 500 || !strings.Contains(string(b), "came back") {
		t.Fatalf("looped request: %d %s, want an error that names the loop", resp.StatusCode, b)
	}
	if n := hits.Load(); n != 2 {
		t.Errorf("the request passed through the gateway %d times, want 2 (one hop)", n)
	}
	if v := gw.MetricValue(t, "switchyard_request_loops_total", nil); v != 1 {
		t.Errorf("switchyard_request_loops_total %v, want 1", v)
	}
	t.Logf("client got %d %s", resp.StatusCode, b)
}

// TestSelfReplicaRefusedAtLoad: a listed replica that is the gateway's own
// listener is a config error naming the URL's place in the file.
func TestSelfReplicaRefusedAtLoad(t *testing.T) {
	cfg := loadConfig(t, `
version: 1
server: {listen: "0.0.0.0:18080"}
pools:
  p: {model: m, health: {disabled: true}, replicas: [{name: ok, url: "http://127.0.0.1:18081"}, {name: me, url: "http://localhost:18080"}]}
routes:
  - name: default
    to: p
`, nil, nil)
	_, err := router.New(cfg, router.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err == nil || !strings.Contains(err.Error(), `test.yaml:5:`) || !strings.Contains(err.Error(), `replica "me": url http://localhost:18080 is this gateway's own listener (server.listen 0.0.0.0:18080)`) {
		t.Fatalf("router.New: %v", err)
	}
	if strings.Contains(err.Error(), `"ok"`) {
		t.Errorf("the other replica was refused too: %v", err)
	}
}

// TestLongPrefillNotCounted: a stream whose first token outlasts
// first_token_timeout on a replica that answered another request within
// that time is the request's prefill, not the replica failing: it is not
// counted (issue 31, item 6); nor on an otherwise idle replica whose
// health probe passed within that time (issue 42: a long prefill on an
// idle pool ejected a healthy replica); on a replica that answered
// nothing, with no probe, it still is. The pool's clock is frozen, so
// "within" does not depend on how fast the machine runs; the first-token
// timer itself fires on its own.
func TestLongPrefillNotCounted(t *testing.T) {
	for _, tc := range []struct {
		name     string
		answered bool
		health   string
		counted  bool
	}{
		{"the replica answered another request", true, "{disabled: true}", false},
		{"the replica answered nothing", false, "{disabled: true}", true},
		{"the idle replica passed its probe", false, "{interval: 1h}", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sim := vllmsim.New(fast("m"))
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				if bytes.Contains(body, []byte("LONG-PREFILL")) {
					// Headers at once, then nothing: vLLM computing a
					// long prompt's prefill.
					w.Header().Set("Content-Type", "text/event-stream")
					w.WriteHeader(200)
					w.(http.Flusher).Flush()
					<-r.Context().Done()
					return
				}
				r.Body = io.NopCloser(bytes.NewReader(body))
				sim.ServeHTTP(w, r)
			}))
			defer srv.Close()
			now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			gw := startGateway(t, loadConfig(t, `
version: 1
pools:
  p:
    model: m
    first_token_timeout: 200ms
    outlier: {consecutive_5xx: 1, max_ejection_percent: 100}
    health: `+tc.health+`
    replicas: [{name: a, url: "{{a}}"}]
routes:
  - name: default
    to: p
`, map[string]string{"a": srv.URL}, nil), func(o *router.Options) { o.Now = func() time.Time { return now } })
			url := gw.API.URL + "/v1/chat/completions"
			if tc.answered {
				if resp, b := post(t, url, `{"model":"m","max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`, nil); resp.StatusCode != 200 {
					t.Fatalf("ordinary request: %d %s", resp.StatusCode, b)
				}
			}
			_, b := post(t, url, `{"model":"m","stream":true,"max_tokens":3,"messages":[{"role":"user","content":"LONG-PREFILL"}]}`, nil)
			if !strings.Contains(string(b), "first_token_timeout") {
				t.Fatalf("the stalled stream: %s", b)
			}
			// The exchange is finished (counted) after its outcome was
			// told to passive health.
			want := 1.0
			if tc.answered {
				want = 2
			}
			polltest.Eventually(t, 10*time.Second, "the stalled exchange to finish", func() bool {
				return gw.MetricValue(t, "switchyard_request_duration_seconds", nil) == want
			})
			// Counted against the replica: its last error says so (a
			// neutral outcome leaves none).
			_, pb := get(t, gw.Admin.URL+"/admin/pools", nil)
			if counted := strings.Contains(string(pb), "first_token_timeout"); counted != tc.counted {
				t.Errorf("counted against the replica: %t, want %t (/admin/pools: %s)", counted, tc.counted, pb)
			}
		})
	}
}

// TestClassifierCallsTakeTurnsByTenant: the classifier's calls wait for its
// pool's slots in the turn of the tenant whose request each classifies: a
// key that sends a burst of requests at once does not make another key's
// classification wait behind all of its calls. Before the fix every call
// was the classifier's own tenant, one FIFO, and the second key's call
// was served after the whole burst; with the calls counted as their
// tenant's slot time (issue 42) the other key's call, the tenant with
// none, takes the slot the burst's first frees.
func TestClassifierCallsTakeTurnsByTenant(t *testing.T) {
	q := startReplica(t, fast("Qwen/Qwen3.8-Flash-Next"))
	m := startHoldReplica(t, fast("openbmb/MiniCPM5-2B"), vllmsim.WithChooser(vllmsim.DefaultChooser))
	var mu sync.Mutex
	var order []string
	rec := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Method == http.MethodPost {
			for _, who := range []string{"burst-", "other-"} {
				if bytes.Contains(body, []byte(who)) {
					mu.Lock()
					order = append(order, strings.TrimSuffix(who, "-"))
					mu.Unlock()
				}
			}
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		m.Srv.Config.Handler.ServeHTTP(w, r)
	}))
	t.Cleanup(rec.Close)
	yaml := strings.Replace(classifierYAML, "    replicas: [{name: minicpm-a, url: \"{{minicpm}}\"}]\n",
		"    replicas: [{name: minicpm-a, url: \"{{minicpm}}\"}]\n    max_inflight: 1\n    queue_timeout: 1m\n", 1)
	yaml = strings.Replace(yaml, "  timeout: 2s\n", "  timeout: 1m\n  cache: {size: 0}\n", 1)
	// The requests themselves go to the other pool: what is tested is
	// their classification.
	yaml = strings.Replace(yaml, "  - name: default\n    to: minicpm\n", "  - name: default\n    to: qwen\n", 1)
	yaml = strings.Replace(yaml, "version: 1\n", "version: 1\nserver:\n  api_keys:\n    - {name: burst, key_env: KEY_BURST}\n    - {name: other, key_env: KEY_OTHER}\n", 1)
	gw := startGateway(t, loadConfig(t, yaml, map[string]string{"qwen": q.Srv.URL, "minicpm": rec.URL},
		map[string]string{"KEY_BURST": "burst-secret", "KEY_OTHER": "other-secret"}))
	url := gw.API.URL + "/v1/chat/completions"
	waiting := func() int64 { return adminReplicaView(t, gw, "minicpm", "minicpm-a").Waiting }
	var wg sync.WaitGroup
	send := func(key, text string) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, b := post(t, url, chatBody(text, ""), map[string]string{"Authorization": "Bearer " + key})
			if resp.StatusCode != 200 {
				t.Errorf("%q: %d %s", text, resp.StatusCode, b)
			}
		}()
	}
	// The burst's first call holds the classifier's one slot; three more
	// queue, then the other key's.
	send("burst-secret", "HOLD burst-0")
	polltest.Eventually(t, 10*time.Second, "the first call to hold the slot", func() bool { return m.held.Load() == 1 })
	for i := 1; i <= 3; i++ {
		send("burst-secret", fmt.Sprintf("burst-%d", i))
		polltest.Eventually(t, 10*time.Second, "the burst to queue", func() bool { return waiting() == int64(i) })
	}
	send("other-secret", "other-0")
	polltest.Eventually(t, 10*time.Second, "the other key's call to queue", func() bool { return waiting() == 4 })
	m.release()
	wg.Wait()
	want := []string{"burst", "other", "burst", "burst", "burst"}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(order, " ") != strings.Join(want, " ") {
		t.Errorf("the classifier's replica got calls in the order %v, want %v (the other key's next)", order, want)
	}
}

// TestForgedViaNeedsAKey: a request carrying this gateway's Via entry but
// no valid key is refused as unauthenticated (401), not as a loop: no
// warning, no loop counted (issue 42); with a valid key it is a loop.
func TestForgedViaNeedsAKey(t *testing.T) {
	var via atomic.Value
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		via.Store(r.Header.Get("Via"))
		vllmsim.New(fast("m")).ServeHTTP(w, r)
	}))
	defer up.Close()
	gw := oneReplicaGateway(t, up.URL, "", "{api_keys: [{name: k, key_env: KEY}]}", map[string]string{"KEY": "sk-1"})
	url := gw.API.URL + "/v1/chat/completions"
	body := `{"model":"p","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`
	if resp, b := post(t, url, body, map[string]string{"Authorization": "Bearer sk-1"}); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	forged, _ := via.Load().(string)
	if forged == "" {
		t.Fatal("the replica saw no Via entry")
	}
	if resp, b := post(t, url, body, map[string]string{"Via": forged}); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("forged Via without a key: %d %s, want 401", resp.StatusCode, b)
	}
	if v := gw.MetricValue(t, "switchyard_request_loops_total", nil); v != 0 || strings.Contains(gw.Logs.String(), "request loop") {
		t.Errorf("an unauthenticated forged Via counted %v loops / logged a loop warning", v)
	}
	if resp, _ := post(t, url, body, map[string]string{"Via": forged, "Authorization": "Bearer sk-1"}); resp.StatusCode != http.StatusLoopDetected {
		t.Errorf("an authenticated looped request: %d, want 508", resp.StatusCode)
	}
}
