package demo_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
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

	"github.com/switchyard/switchyard/demo"
	"github.com/switchyard/switchyard/internal/polltest"
	"github.com/switchyard/switchyard/policy"
)

const exampleDir = "../examples/prometheus"

// exampleCommand is the command examples/prometheus/README.md gives, which
// prometheus.yml's comment must repeat.
func exampleCommand(t *testing.T) []string {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join(exampleDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?m)^```sh\n(prometheus .*)\n```$").FindSubmatch(readme)
	if m == nil {
		t.Fatal("examples/prometheus/README.md gives no ```sh block with a prometheus command")
	}
	conf, err := os.ReadFile(filepath.Join(exampleDir, "prometheus.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(conf), "#   "+string(m[1])+"\n") {
		t.Errorf("prometheus.yml's comment does not give the README's command %q", m[1])
	}
	return strings.Fields(string(m[1]))
}

// TestPrometheusExampleBesideDemo starts the example Prometheus with the
// README's command beside the demo on its own ports (each address the
// example names is replaced by a free one of the same kind): it must not
// want the gateway's admin port, must scrape every 5 s or 15 s, and must
// show the split over both pools within four scrapes (two give rate() its
// samples; two more are the slack for a loaded machine).
func TestPrometheusExampleBesideDemo(t *testing.T) {
	args := exampleCommand(t)
	flags := map[string]string{}
	for _, a := range args[1:] {
		k, v, ok := strings.Cut(a, "=")
		if !ok || !strings.HasPrefix(k, "--") {
			t.Fatalf("the example's argument %q is not --flag=value", a)
		}
		flags[k] = v
	}
	web := flags["--web.listen-address"]
	_, webPort, err := net.SplitHostPort(web)
	if err != nil {
		t.Fatalf("the example gives no --web.listen-address HOST:PORT (%q): Prometheus's default :9090 is the gateway's admin port", web)
	}
	if _, adminPort, _ := net.SplitHostPort(policy.DefaultAdminListen); webPort == adminPort {
		t.Errorf("the example's Prometheus listens on %s, the gateway's default admin port", web)
	}
	if flags["--config.file"] != "prometheus.yml" || flags["--storage.tsdb.path"] == "" {
		t.Fatalf("the example's flags %v: want --config.file=prometheus.yml and a --storage.tsdb.path", flags)
	}
	confText, err := os.ReadFile(filepath.Join(exampleDir, "prometheus.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var conf struct {
		Global struct {
			ScrapeInterval string `yaml:"scrape_interval"`
		}
		ScrapeConfigs []struct {
			StaticConfigs []struct{ Targets []string } `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(confText, &conf); err != nil {
		t.Fatal(err)
	}
	interval, err := time.ParseDuration(conf.Global.ScrapeInterval)
	if err != nil || (interval != 5*time.Second && interval != 15*time.Second) {
		t.Fatalf("scrape_interval %q, want 5s or 15s", conf.Global.ScrapeInterval)
	}
	if len(conf.ScrapeConfigs) != 1 || len(conf.ScrapeConfigs[0].StaticConfigs) != 1 ||
		fmt.Sprint(conf.ScrapeConfigs[0].StaticConfigs[0].Targets) != "["+policy.DefaultAdminListen+"]" {
		t.Fatalf("scrape_configs %+v, want one target, the default admin address %s", conf.ScrapeConfigs, policy.DefaultAdminListen)
	}
	bin := prometheusBinary(t)

	// The demo, on free ports.
	admin := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() {
		_, err := demo.Run(ctx, demo.Options{Listen: "127.0.0.1:0", AdminListen: admin, Workers: 4, Tick: -1})
		ran <- err
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-ran; err != nil {
			t.Errorf("demo: %v", err)
		}
	})
	polltest.Eventually(t, 2*time.Minute, "the demo's metrics to count requests", func() bool {
		resp, err := http.Get("http://" + admin + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(b), "switchyard_requests_total{")
	})

	// Prometheus, run from a copy of the example's directory with the
	// example's flags; only the addresses and the data path are this test's.
	dir := t.TempDir()
	conf2 := strings.Replace(string(confText), `"`+policy.DefaultAdminListen+`"`, `"`+admin+`"`, 1)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(conf2), 0o644); err != nil {
		t.Fatal(err)
	}
	alerts, err := os.ReadFile(filepath.Join(exampleDir, "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "alerts.yml"), alerts, 0o644); err != nil {
		t.Fatal(err)
	}
	promAddr := freeAddr(t)
	var cmdArgs []string
	for _, a := range args[1:] {
		switch k, _, _ := strings.Cut(a, "="); k {
		case "--web.listen-address":
			a = k + "=" + promAddr
		case "--storage.tsdb.path":
			a = k + "=" + filepath.Join(dir, "data")
		}
		cmdArgs = append(cmdArgs, a)
	}
	out := &syncBuffer{}
	cmd := exec.CommandContext(t.Context(), bin, cmdArgs...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { <-exited })

	query := func(q string) []promSample {
		resp, err := http.Get("http://" + promAddr + "/api/v1/query?query=" + url.QueryEscape(q))
		if err != nil {
			return nil
		}
		defer resp.Body.Close()
		var r struct {
			Status string
			Data   struct{ Result []promSample }
		}
		if json.NewDecoder(resp.Body).Decode(&r) != nil || r.Status != "success" {
			return nil
		}
		return r.Data.Result
	}
	// The README's split, per pool.
	const split = `sum by (pool) (rate(switchyard_requests_total[5m]))`
	var shares map[string]float64
	polltest.Eventually(t, 3*time.Minute, "Prometheus to show the split", func() bool {
		select {
		case <-exited:
			t.Fatalf("prometheus exited:\n%s", out.String())
		default:
		}
		shares = map[string]float64{}
		for _, s := range query(split) {
			if v, err := strconv.ParseFloat(s.value(), 64); err == nil && v > 0 {
				shares[s.Metric["pool"]] = v
			}
		}
		return shares["qwen"] > 0 && shares["minicpm"] > 0
	})
	scrapes := 0.0
	for _, s := range query(`count_over_time(up{job="switchyard"}[1h])`) {
		scrapes, _ = strconv.ParseFloat(s.value(), 64)
	}
	t.Logf("after %v scrapes: qwen %.0f%%, minicpm %.0f%% of the requests", scrapes,
		100*shares["qwen"]/(shares["qwen"]+shares["minicpm"]), 100*shares["minicpm"]/(shares["qwen"]+shares["minicpm"]))
	if scrapes < 2 || scrapes > 4 {
		t.Errorf("the split showed after %v scrapes of %s, want within 4 (2 give rate() its samples)", scrapes, interval)
	}
}

// syncBuffer is a buffer that a process writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// promSample is one series of an instant query's answer.
type promSample struct {
	Metric map[string]string
	Value  [2]any
}

func (s promSample) value() string { v, _ := s.Value[1].(string); return v }

// prometheusBinary finds the prometheus binary; without it the test
// skips, except in CI, where .ci/run installs it and it must run.
func prometheusBinary(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("prometheus"); err == nil {
		return p
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("prometheus binary not found in PATH; CI must install it (apt-get install prometheus)")
	}
	t.Skip("prometheus binary not found in PATH; install it (apt-get install prometheus) to run this test")
	return ""
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
