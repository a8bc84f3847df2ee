package router_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// chromiumBinary finds Debian's chromium; missing, the test says so and
// is skipped, except under CI, which installs it.
func chromiumBinary(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium not found; CI must install it (apt-get install chromium)")
	}
	fmt.Fprintln(os.Stderr, "router: chromium not found (apt-get install chromium): skipping the status page test")
	t.Skip("chromium not found; install it (apt-get install chromium) to run this test")
	return ""
}

const statusPageYAML = `
version: 1
server:
  admin_token_env: TOK
pools:
  pa:
    model: ma
    balance: round_robin
    health: {interval: 50ms, timeout: 1s, unhealthy_after: 2}
    replicas: [{name: a1, url: "{{a1}}"}, {name: a2, url: "{{a2}}"}]
  pb:
    model: mb
    health: {interval: 50ms, timeout: 1s, unhealthy_after: 2}
    replicas: [{name: b1, url: "{{b1}}"}]
classifier:
  kind: heuristic
  labels: [simple, complex]
  on_error: complex
models:
  - {name: auto, route: policy}
routes:
  - name: complex
    when: {class: complex}
    to: pb
  - name: default
    to: pa
`

// TestStatusPage drives the admin listener's status page in headless
// Chromium against a gateway with simulated replicas and load: the page
// asks for the admin token once and sends it as a header (never in a
// URL), it makes no request outside the admin listener, it shows every
// pool and replica, every number of the split and the classifier equals
// its metric (docs/observability.md's table), and a killed replica's row
// turns red. With SWITCHYARD_STATUS_SCREENSHOT=FILE it saves
// a screenshot there (docs/status.png is made so; see
// docs/observability.md).
func TestStatusPage(t *testing.T) {
	bin := chromiumBinary(t)
	a1, a2, b1 := startReplica(t, fast("ma")), startReplica(t, fast("ma")), startReplica(t, fast("mb"))
	const tok = "status-page-token-0123456789"
	gw := startGateway(t, loadConfig(t, statusPageYAML, map[string]string{"a1": a1.Srv.URL, "a2": a2.Srv.URL, "b1": b1.Srv.URL},
		map[string]string{"TOK": tok}))
	send := func(model string, n int, stream bool) {
		for i := range n {
			body := fmt.Sprintf(`{"model":%q,"max_tokens":3,"stream":%t,"messages":[{"role":"user","content":"hello %d"}]}`, model, stream, i)
			if resp, b := post(t, gw.API.URL+"/v1/chat/completions", body, nil); resp.StatusCode != 200 {
				t.Fatalf("%s: %d %s", model, resp.StatusCode, b)
			}
		}
	}
	send("pa", 30, false)
	send("pa", 10, true)
	send("pb", 20, false)
	post(t, gw.API.URL+"/v1/messages", `{"model":"pb","max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`, nil)
	// Classified requests: 3 distinct prompts asked 4 times each, so the
	// classifier's cache answers 9 of 12.
	for range 4 {
		send("auto", 3, false)
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin), chromedp.NoSandbox,
		chromedp.WindowSize(1440, 900), chromedp.Flag("headless", true), chromedp.DisableGPU)
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancel = context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	var mu sync.Mutex
	var urls []string
	authorized := 0
	if err := chromedp.Listen(ctx, func(ev any) {
		if e, ok := ev.(*network.EventRequestWillBeSent); ok {
			mu.Lock()
			urls = append(urls, e.Request.URL)
			if v, _ := e.Request.Headers["Authorization"].(string); v == "Bearer "+tok {
				authorized++
			}
			mu.Unlock()
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(gw.Admin.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#login input"))); err != nil {
		t.Fatalf("the token prompt: %v", err)
	}
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.ID("token"), tok), chromedp.Click(chromedp.CSS("#login-form button")),
		chromedp.WaitVisible(chromedp.CSS(`tr.replica[data-replica="b1"]`))); err != nil {
		t.Fatalf("the page after the token: %v", err)
	}
	// Every pool and replica, and the split's counts equal /metrics.
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("tr.replica")].map(r => r.dataset.pool + "/" + r.dataset.replica + "/" + r.dataset.state)`))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(rows, " "); got != "pa/a1/healthy pa/a2/healthy pb/b1/healthy" {
		t.Errorf("replica rows: %s", got)
	}
	totals, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]string](`Object.fromEntries([...document.querySelectorAll("#split tbody tr")].map(r => [r.dataset.pool, r.dataset.total]))`))
	if err != nil {
		t.Fatal(err)
	}
	all := 0.0
	for _, pool := range []string{"pa", "pb"} {
		want := gw.MetricSum(t, "switchyard_requests_total", map[string]string{"pool": pool})
		all += want
		if got, _ := strconv.ParseFloat(totals[pool], 64); got != want {
			t.Errorf("pool %s: the page counts %v requests, /metrics %v", pool, totals[pool], want)
		}
	}
	// Each number has one definition, the metric's (docs/observability.md):
	// a pool's share is its switchyard_requests_total over all pools'
	// (every request here falls in the page's window, the uptime), its
	// req/s that count over the window the page names.
	var doc struct {
		Figures struct {
			WindowSeconds float64 `json:"window_seconds"`
		} `json:"figures"`
	}
	getAdmin(t, gw, "/admin/status", tok, &doc)
	shown, err := chromedp.Run(ctx, chromedp.Evaluate[map[string][]string](`Object.fromEntries([...document.querySelectorAll("#split tbody tr")].map(r => [r.dataset.pool, [r.dataset.share, r.dataset.rate, r.cells[1].textContent]]))`))
	if err != nil {
		t.Fatal(err)
	}
	for _, pool := range []string{"pa", "pb"} {
		n := gw.MetricSum(t, "switchyard_requests_total", map[string]string{"pool": pool})
		share, _ := strconv.ParseFloat(shown[pool][0], 64)
		if want := n / all; math.Abs(share-want) > 0.0001 {
			t.Errorf("pool %s: the page's share %v, /metrics %v of %v = %.4f", pool, share, n, all, want)
		}
		if want := fmt.Sprintf("%.0f%%", 100*n/all); shown[pool][2] != want {
			t.Errorf("pool %s: the page shows a share of %q, want %q", pool, shown[pool][2], want)
		}
		// The rate's window moves on between the two reads: it may only
		// have grown, so the page's rate is at most the count over the
		// window read after it, and the window is the uptime (< 60 s).
		rate, _ := strconv.ParseFloat(shown[pool][1], 64)
		if doc.Figures.WindowSeconds >= 60 || rate < n/doc.Figures.WindowSeconds-0.0001 || rate > n {
			t.Errorf("pool %s: the page's rate %v req/s; /metrics counts %v over a window of %vs", pool, rate, n, doc.Figures.WindowSeconds)
		}
	}
	// The classifier's cache hit rate: cache hits over the classifications
	// that asked the cache, the metric's and the demo's definition.
	hits := gw.MetricSum(t, "switchyard_classifier_requests_total", map[string]string{"result": "cache_hit"})
	asked := hits + gw.MetricSum(t, "switchyard_classifier_requests_total", map[string]string{"result": "ok"})
	if hits != 9 || asked != 12 {
		t.Fatalf("the classifier counted %v cache hits of %v; the test meant 9 of 12", hits, asked)
	}
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.ID("figure-cache-hit-rate"))); err != nil {
		t.Fatal(err)
	}
	hitRate, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("figure-cache-hit-rate").textContent`))
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("%.0f%%", 100*hits/asked); hitRate != want {
		t.Errorf("the page's cache hit rate %q, /metrics %v of %v = %s", hitRate, hits, asked, want)
	}
	// The other numbers, each against its metric (docs/observability.md's
	// table): the split's errors (5xx by pool), classifications/s (every
	// result, over the window), calls to the classifier's pool/s and their
	// mean latency (the duration histogram, cache misses only), and the
	// share that fell back (timeout, error, circuit_open, refused, of every
	// result, all time). The window moves on while the page is read: it is read before and after, and the page's rate lies
	// between the counts over the two (one refresh, a second, earlier).
	var before, after struct {
		Figures struct {
			WindowSeconds float64 `json:"window_seconds"`
		} `json:"figures"`
	}
	getAdmin(t, gw, "/admin/status", tok, &before)
	// One read of the list, its window with it (the page redraws every
	// second).
	figures, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]string](`Object.fromEntries([...document.querySelectorAll("#classifier dt")].map(dt => [dt.textContent, dt.nextElementSibling.textContent]).concat([["window", String(document.getElementById("classifier").dataset.window)]]))`))
	if err != nil {
		t.Fatal(err)
	}
	errorsShown, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]string](`Object.fromEntries([...document.querySelectorAll("#split tbody tr")].map(r => [r.dataset.pool, r.cells[3].textContent]))`))
	if err != nil {
		t.Fatal(err)
	}
	getAdmin(t, gw, "/admin/status", tok, &after)
	for _, pool := range []string{"pa", "pb"} {
		n := 0.0
		for _, m := range gw.MatchingSeries(t, "switchyard_requests_total", map[string]string{"pool": pool}) {
			for _, l := range m.GetLabel() {
				if l.GetName() == "code" && strings.HasPrefix(l.GetValue(), "5") {
					n += m.GetCounter().GetValue()
				}
			}
		}
		if want := fmt.Sprintf("%.0f", n); errorsShown[pool] != want {
			t.Errorf("pool %s: the page's errors %q, /metrics %s", pool, errorsShown[pool], want)
		}
	}
	results := map[string]float64{}
	for _, m := range gw.MatchingSeries(t, "switchyard_classifier_requests_total", nil) {
		for _, l := range m.GetLabel() {
			if l.GetName() == "result" {
				results[l.GetValue()] += m.GetCounter().GetValue()
			}
		}
	}
	classified := 0.0
	for _, v := range results {
		classified += v
	}
	// The page's rates are over its counters' samples, the first taken at
	// start: over the window the page used (the classifier list's
	// data-window), every classification counts.
	window := figures["window"]
	secs, _ := strconv.ParseFloat(window, 64)
	if shownRate, _ := strconv.ParseFloat(figures["classifications/s"], 64); secs <= 0 || math.Abs(shownRate-classified/secs) > 0.051 {
		t.Errorf("the page's classifications/s %q; /metrics counts %v over the page's window of %vs", figures["classifications/s"], classified, window)
	}
	calls, spent := 0.0, 0.0
	for _, m := range gw.MatchingSeries(t, "switchyard_classifier_duration_seconds", nil) {
		calls += float64(m.GetHistogram().GetSampleCount())
		spent += m.GetHistogram().GetSampleSum()
	}
	if shownCalls, _ := strconv.ParseFloat(figures["calls to its pool/s"], 64); calls == 0 || secs <= 0 || math.Abs(shownCalls-calls/secs) > 0.051 {
		t.Errorf("the page's calls to the classifier's pool/s %q; /metrics counts %v over the page's window of %vs", figures["calls to its pool/s"], calls, window)
	}
	// status.js's fmtMS of the mean in milliseconds.
	mean := 1000 * spent / calls
	want := fmt.Sprintf("%.2f s", mean/1000)
	switch {
	case mean < 1:
		want = fmt.Sprintf("%.0f µs", mean*1000)
	case mean < 1000:
		want = fmt.Sprintf("%.1f ms", mean)
	}
	if figures["latency (mean)"] != want {
		t.Errorf("the page's classifier latency %q, /metrics %v s over %v calls = %s", figures["latency (mean)"], spent, calls, want)
	}
	fellBack := results["timeout"] + results["error"] + results["circuit_open"] + results["refused"]
	if want := fmt.Sprintf("%.0f%%", 100*fellBack/classified); figures["fell back (all time)"] != want {
		t.Errorf("the page's fell back %q, /metrics %v of %v = %s", figures["fell back (all time)"], fellBack, classified, want)
	}
	// Numeric columns are right-aligned under right-aligned headings.
	misaligned, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#split, #replicas, #decisions")].flatMap(t => { const h = [...t.tHead.rows[0].cells]; return [...t.tBodies[0].rows].flatMap(r => [...r.cells].filter((c, i) => h[i] && getComputedStyle(c).textAlign !== getComputedStyle(h[i]).textAlign).map(c => t.id + ": " + h[[...r.cells].indexOf(c)].textContent)); })`))
	if err != nil {
		t.Fatal(err)
	}
	if len(misaligned) > 0 {
		t.Errorf("cells aligned unlike their heading: %v", misaligned)
	}
	if path := os.Getenv("SWITCHYARD_STATUS_SCREENSHOT"); path != "" {
		if err := chromedp.Do(ctx, chromedp.Sleep(1500*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A killed replica turns red within a few seconds.
	b1.Srv.CloseClientConnections()
	b1.Srv.Close()
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`tr.replica.down[data-replica="b1"]`))); err != nil {
		t.Fatalf("the killed replica's row did not turn red: %v", err)
	}
	state, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('tr.replica[data-replica="b1"]').dataset.state`))
	if err != nil || (state != "unhealthy" && state != "ejected") {
		t.Errorf("killed replica state %q (%v)", state, err)
	}
	mu.Lock()
	for _, u := range urls {
		if !strings.HasPrefix(u, gw.Admin.URL+"/") {
			t.Errorf("the page requested %s, outside the admin listener", u)
		}
		if strings.Contains(u, tok) {
			t.Errorf("the token is in a URL: %s", u)
		}
	}
	if authorized == 0 {
		t.Error("no request carried the token as a bearer header")
	}
	mu.Unlock()
	// Without the token the data is refused; the page itself has none.
	if resp, _ := get(t, gw.Admin.URL+"/admin/status", nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("/admin/status without the token: %d", resp.StatusCode)
	}
}

// getAdmin decodes the admin API's JSON answer at path into v, with the
// admin token tok.
func getAdmin(t *testing.T, gw *gateway, path, tok string, v any) {
	t.Helper()
	resp, b := get(t, gw.Admin.URL+path, map[string]string{"Authorization": "Bearer " + tok})
	if err := json.Unmarshal(b, v); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: status %d: %v", path, resp.StatusCode, err)
	}
}
