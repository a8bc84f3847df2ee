package examples_test

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goccy/go-yaml"

	"github.com/switchyard/switchyard/internal/gatewaytest"
	"github.com/switchyard/switchyard/internal/polltest"
	"github.com/switchyard/switchyard/router"
)

// The example dashboard and alert rules that TestPrometheusScrapesSplit
// checks against a real Prometheus scraping a gateway.
const (
	dashboardPath = "grafana/switchyard.json"
	alertsPath    = "prometheus/alerts.yml"
)

const splitYAML = `
version: 1
pools:
  qwen:
    model: Qwen/Qwen3.8-Flash-Next
    balance: round_robin
    health: {disabled: true}
    replicas:
      - {name: qwen-a, url: "{{qwen}}"}
  minicpm:
    model: openbmb/MiniCPM5-2B
    balance: round_robin
    health: {disabled: true}
    replicas:
      - {name: minicpm-a, url: "{{minicpm}}"}
routes:
  - name: split
    split: {qwen: 70, minicpm: 30}
`

// TestPrometheusScrapesSplit runs a real Prometheus against the gateway's
// admin /metrics: the split expression of docs/observability.md must show the configured
// 70/30 split, and every expression of the example dashboard and alert rules
// must be valid PromQL on that server.
func TestPrometheusScrapesSplit(t *testing.T) {
	bin := prometheusBinary(t)

	q := gatewaytest.StartReplica(t, gatewaytest.Fast("Qwen/Qwen3.8-Flash-Next"))
	m := gatewaytest.StartReplica(t, gatewaytest.Fast("openbmb/MiniCPM5-2B"))
	cfg := gatewaytest.LoadConfig(t, splitYAML, map[string]string{"qwen": q.Srv.URL, "minicpm": m.Srv.URL}, nil)
	// A seeded source keeps the split reproducible; the tolerance below
	// still holds for any seed (the standard deviation of the share over
	// 600 draws is about 0.019).
	var mu sync.Mutex
	src := rand.New(rand.NewPCG(1, 2))
	gw := gatewaytest.Start(t, cfg, func(o *router.Options) {
		o.Rand = func() uint64 { mu.Lock(); defer mu.Unlock(); return src.Uint64() }
	})

	prom := startPrometheus(t, bin, strings.TrimPrefix(gw.Admin.URL, "http://"))

	url := gw.API.URL + "/v1/chat/completions"
	send := func(i int) error {
		body := `{"model":"auto","max_tokens":2,"messages":[{"role":"user","content":"request ` + strconv.Itoa(i) + `"}]}`
		resp, err := http.Post(url, "application/json", strings.NewReader(body))
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("request %d: status %d", i, resp.StatusCode)
		}
		return nil
	}
	counts := func() (qwen, minicpm float64) {
		return gw.MetricValue(t, "switchyard_requests_total", map[string]string{"pool": "qwen", "code": "200"}),
			gw.MetricValue(t, "switchyard_requests_total", map[string]string{"pool": "minicpm", "code": "200"})
	}

	// Warm up until both series exist and Prometheus has scraped them:
	// rate() ignores what a series held at its first sample, so a series
	// born in the middle of the traffic would lose its first requests.
	warm := 0
	for qc, mc := counts(); qc == 0 || mc == 0; qc, mc = counts() {
		if warm == 100 {
			t.Fatalf("100 warm-up requests never reached both pools (qwen=%v minicpm=%v)", qc, mc)
		}
		if err := send(-1 - warm); err != nil {
			t.Fatal(err)
		}
		warm++
	}
	qwenWarm, minicpmWarm := counts()
	prom.waitForSum(t, float64(warm), 2)

	// Scripted traffic: 600 requests paced over about 6 s, so that every
	// series has several 1 s scrapes and rate() has samples to work with.
	const total, workers = 600, 4
	const pace = 10 * time.Millisecond
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, total)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < total; i += workers {
				if d := time.Until(start.Add(time.Duration(i) * pace)); d > 0 {
					time.Sleep(d)
				}
				if err := send(i); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	sent := time.Since(start)
	// A request is counted once its handler returns, which may be just
	// after the client has read the whole answer.
	var qwenCount, minicpmCount float64
	polltest.Eventually(t, 5*time.Second, fmt.Sprintf("the gateway to count all %d requests", total), func() bool {
		qwenCount, minicpmCount = counts()
		qwenCount, minicpmCount = qwenCount-qwenWarm, minicpmCount-minicpmWarm
		return qwenCount+minicpmCount == total
	})

	// Once Prometheus has scraped the final counts, ask for the split
	// (as docs/observability.md writes it, normalised); the 1m window covers all of the traffic.
	prom.waitForSum(t, float64(warm+total), 2)
	const split = `sum by (pool) (rate(switchyard_requests_total[1m])) / ignoring (pool) group_left sum(rate(switchyard_requests_total[1m]))`
	share := map[string]float64{}
	for _, s := range prom.query(t, split) {
		share[s.Metric["pool"]] = s.value(t)
	}
	counted := qwenCount / total
	t.Logf("split over %d requests in %s: prometheus qwen=%.3f minicpm=%.3f; gateway counted qwen=%v (%.3f) minicpm=%v",
		total, sent.Round(time.Millisecond), share["qwen"], share["minicpm"], qwenCount, counted, minicpmCount)
	if len(share) != 2 || math.Abs(share["qwen"]-0.70) > 0.05 || math.Abs(share["minicpm"]-0.30) > 0.05 {
		t.Errorf("split %v, want qwen 0.70 and minicpm 0.30 (±0.05)", share)
	}
	// Both series share their scrapes, so rate()'s extrapolation scales
	// them alike: Prometheus must agree closely with what was counted.
	if math.Abs(share["qwen"]-counted) > 0.02 {
		t.Errorf("prometheus qwen share %.3f, gateway counted %.3f", share["qwen"], counted)
	}

	known := definedMetrics(t)

	t.Run("dashboard", func(t *testing.T) {
		exprs := dashboardExprs(t)
		if len(exprs) < 20 {
			t.Fatalf("found %d expressions in %s, want at least 20", len(exprs), dashboardPath)
		}
		for _, e := range exprs {
			checkMetricNames(t, e.where, e.expr, known)
			prom.mustParse(t, e.where, e.expr)
		}
	})

	t.Run("alerts", func(t *testing.T) {
		rules := alertRules(t)
		for _, r := range rules {
			where := alertsPath + ": " + r.Alert
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s: want a severity label and summary and description annotations", where)
			}
			checkMetricNames(t, where, r.Expr, known)
			prom.mustParse(t, where, r.Expr)
		}
		// The rule manager loads the file; none of its rules may be broken.
		prom.poll(t, 15*time.Second, "alert rules to load", func() (bool, string) {
			var body struct {
				Data struct {
					Groups []struct {
						Rules []struct {
							Name      string `json:"name"`
							Type      string `json:"type"`
							Health    string `json:"health"`
							LastError string `json:"lastError"`
						} `json:"rules"`
					} `json:"groups"`
				} `json:"data"`
			}
			prom.get(t, "/api/v1/rules", nil, &body)
			loaded := map[string]string{}
			for _, g := range body.Data.Groups {
				for _, r := range g.Rules {
					if r.Health == "err" {
						t.Fatalf("rule %s: health err: %s", r.Name, r.LastError)
					}
					if r.Type == "alerting" {
						loaded[r.Name] = r.Health
					}
				}
			}
			for _, r := range rules {
				if _, ok := loaded[r.Alert]; !ok {
					return false, fmt.Sprintf("loaded %v", loaded)
				}
			}
			return true, ""
		})
	})
}

// prometheusBinary finds the prometheus binary; without it the test skips,
// except in CI, where it is installed and must run.
func prometheusBinary(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("prometheus"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/bin/prometheus"); err == nil {
		return "/usr/bin/prometheus"
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("prometheus binary not found in PATH or /usr/bin; CI must install it (apt-get install prometheus)")
	}
	t.Skip("prometheus binary not found in PATH or /usr/bin; install it (apt-get install prometheus) to run this test")
	return ""
}

// promServer is a running Prometheus and its HTTP API.
type promServer struct {
	base string
	out  *gatewaytest.SyncBuffer
}

func startPrometheus(t *testing.T, bin, target string) *promServer {
	t.Helper()
	dir := t.TempDir()
	rules, err := filepath.Abs(alertsPath)
	if err != nil {
		t.Fatal(err)
	}
	conf := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: switchyard
    metrics_path: /metrics
    static_configs:
      - targets: [%q]
`, rules, target)
	confPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	out := &gatewaytest.SyncBuffer{}
	// t.Context is cancelled before the cleanups run: Prometheus gets
	// SIGINT (SIGKILL after WaitDelay), and Wait below reaps it before the
	// temporary directory is removed.
	cmd := exec.CommandContext(t.Context(), bin,
		"--config.file="+confPath,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		"--web.enable-lifecycle",
		"--log.level=warn",
	)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() { <-exited })

	p := &promServer{base: "http://" + addr, out: out}
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-exited:
			t.Fatalf("prometheus exited before it was ready:\n%s", out)
		default:
		}
		resp, err := http.Get(p.base + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready after 30s:\n%s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// freeAddr returns a loopback address that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// promResponse is the envelope of every Prometheus HTTP API answer.
type promResponse struct {
	Status    string `json:"status"`
	ErrorType string `json:"errorType"`
	Error     string `json:"error"`
	Data      struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	} `json:"data"`
}

type promSample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

func (s promSample) value(t *testing.T) float64 {
	t.Helper()
	str, _ := s.Value[1].(string)
	v, err := strconv.ParseFloat(str, 64)
	if err != nil {
		t.Fatalf("sample %v: %v", s, err)
	}
	return v
}

// get decodes the JSON answer to path?params into v, whatever the status.
func (p *promServer) get(t *testing.T, path string, params url.Values, v any) {
	t.Helper()
	u := p.base + path
	if params != nil {
		u += "?" + params.Encode()
	}
	resp, err := http.Get(u)
	if err != nil {
		t.Fatalf("prometheus %s: %v\n%s", path, err, p.out)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("prometheus %s: status %d: %v", path, resp.StatusCode, err)
	}
}

func (p *promServer) instant(t *testing.T, expr string) promResponse {
	t.Helper()
	var r promResponse
	p.get(t, "/api/v1/query", url.Values{"query": {expr}}, &r)
	return r
}

// query runs an instant vector query that must succeed.
func (p *promServer) query(t *testing.T, expr string) []promSample {
	t.Helper()
	r := p.instant(t, expr)
	if r.Status != "success" {
		t.Fatalf("query %s: %s: %s", expr, r.ErrorType, r.Error)
	}
	if r.Data.ResultType != "vector" {
		t.Fatalf("query %s: result type %q, want vector", expr, r.Data.ResultType)
	}
	var out []promSample
	if err := json.Unmarshal(r.Data.Result, &out); err != nil {
		t.Fatalf("query %s: %v", expr, err)
	}
	return out
}

// mustParse reports an error unless Prometheus accepts expr.
func (p *promServer) mustParse(t *testing.T, where, expr string) {
	t.Helper()
	if r := p.instant(t, expr); r.Status != "success" {
		t.Errorf("%s: %s\n\t%s: %s", where, expr, r.ErrorType, r.Error)
	}
}

// waitForSum waits until Prometheus has scraped n requests in all, in the
// given number of series.
func (p *promServer) waitForSum(t *testing.T, n float64, series int) {
	t.Helper()
	p.poll(t, 30*time.Second, fmt.Sprintf("Prometheus to scrape %v requests", n), func() (bool, string) {
		res := p.query(t, `count(switchyard_requests_total) or vector(0)`)
		sum := p.query(t, `sum(switchyard_requests_total) or vector(0)`)
		c, s := res[0].value(t), sum[0].value(t)
		return c == float64(series) && s == n, fmt.Sprintf("%v series, %v requests", c, s)
	})
}

// poll calls cond until it holds or d passes (polltest.Eventually); cond
// also says what it saw, which a failure shows with Prometheus's output.
func (p *promServer) poll(t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	var saw string
	polltest.Eventually(t, d, what, func() bool {
		ok, s := cond()
		saw = s
		return ok
	}, func() string { return fmt.Sprintf("(last: %s)\n%s", saw, p.out) })
}

type dashboardExpr struct{ where, expr string }

// grafanaVars replaces the dashboard's template variables the way Grafana
// would with the default selection (pool "All" is the regex ".*").
var grafanaVars = strings.NewReplacer(
	"${__rate_interval}", "1m", "$__rate_interval", "1m",
	"${__interval}", "1m", "$__interval", "1m",
	"${large_pool}", "qwen", "$large_pool", "qwen",
	"${pool}", ".*", "$pool", ".*",
)

// dashboardExprs returns every target expression of every panel, rows'
// nested panels included, with template variables substituted.
func dashboardExprs(t *testing.T) []dashboardExpr {
	t.Helper()
	raw, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr  string `json:"expr"`
			RefID string `json:"refId"`
		} `json:"targets"`
		Panels []json.RawMessage `json:"panels"`
	}
	var dash struct {
		SchemaVersion int `json:"schemaVersion"`
		Templating    struct {
			List []struct {
				Name string `json:"name"`
				Type string `json:"type"`
			} `json:"list"`
		} `json:"templating"`
		Panels []json.RawMessage `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	vars := map[string]string{}
	for _, v := range dash.Templating.List {
		vars[v.Name] = v.Type
	}
	for name, typ := range map[string]string{"datasource": "datasource", "pool": "query", "large_pool": "textbox"} {
		if vars[name] != typ {
			t.Errorf("%s: template variable %q has type %q, want %q", dashboardPath, name, vars[name], typ)
		}
	}
	var out []dashboardExpr
	var walk func([]json.RawMessage)
	walk = func(panels []json.RawMessage) {
		for _, r := range panels {
			var p panel
			if err := json.Unmarshal(r, &p); err != nil {
				t.Fatalf("%s: panel: %v", dashboardPath, err)
			}
			for _, tg := range p.Targets {
				if tg.Expr == "" {
					t.Errorf("%s: panel %q target %s has no expr", dashboardPath, p.Title, tg.RefID)
					continue
				}
				e := grafanaVars.Replace(tg.Expr)
				where := fmt.Sprintf("%s: panel %q target %s", dashboardPath, p.Title, tg.RefID)
				if strings.Contains(e, "$") {
					t.Errorf("%s: unknown template variable left in %s", where, e)
					continue
				}
				out = append(out, dashboardExpr{where, e})
			}
			walk(p.Panels)
		}
	}
	walk(dash.Panels)
	return out
}

type alertRule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func alertRules(t *testing.T) []alertRule {
	t.Helper()
	raw, err := os.ReadFile(alertsPath)
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Name  string      `yaml:"name"`
			Rules []alertRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.UnmarshalWithOptions(raw, &file, yaml.Strict()); err != nil {
		t.Fatalf("%s: %v", alertsPath, err)
	}
	var out []alertRule
	for _, g := range file.Groups {
		out = append(out, g.Rules...)
	}
	if len(out) < 5 {
		t.Fatalf("%s: %d alert rules, want at least 5", alertsPath, len(out))
	}
	return out
}

var (
	// metricDef matches a metric name in a quoted string of the sources.
	metricDef = regexp.MustCompile(`"(switchyard_[a-z0-9_]+)"`)
	// metricUse matches a metric name in PromQL.
	metricUse = regexp.MustCompile(`\bswitchyard_[a-z0-9_]+`)
)

// definedMetrics returns the switchyard_* names that the module's non-test
// sources define, so that a typo in a dashboard or rule (which is valid
// PromQL that silently matches nothing) fails the test.
func definedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	known := map[string]bool{}
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != ".." && strings.HasPrefix(d.Name(), ".") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range metricDef.FindAllStringSubmatch(string(src), -1) {
			known[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !known["switchyard_requests_total"] {
		t.Fatalf("switchyard_requests_total is not defined in the sources; found %v", known)
	}
	return known
}

func checkMetricNames(t *testing.T, where, expr string, known map[string]bool) {
	t.Helper()
	for _, name := range metricUse.FindAllString(expr, -1) {
		base := name
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(name, suffix); ok && known[b] {
				base = b
			}
		}
		if !known[base] {
			t.Errorf("%s: metric %s is not exported by Switchyard", where, name)
		}
	}
}
