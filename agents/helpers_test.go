package agents_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard/switchyard/deploy/imagebuild"
)

// buildDir holds the switchyard binary, built once for the suite (as the
// Dockerfile builds it) by the first test that gets past its skips.
var (
	buildDir  string
	buildOnce sync.Once
	binary    string
	buildErr  error
)

func TestMain(m *testing.M) {
	// The suite tests a binary built from the whole module, which go
	// test's cache does not know about: stat every Go file so that a
	// change anywhere invalidates a cached result.
	_ = filepath.WalkDir("..", func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".go") {
			_, _ = os.Stat(path)
		}
		return nil
	})
	dir, err := os.MkdirTemp("", "switchyard-agents")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	buildDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func switchyard(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		var built imagebuild.Result
		built, buildErr = imagebuild.Build("..", buildDir)
		binary = built.Path
	})
	if buildErr != nil {
		t.Fatalf("building switchyard: %v", buildErr)
	}
	return binary
}

// agentsDir is where .ci/run installs the pinned agents.
func agentsDir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../testdata/agents")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// agent is the path of an installed agent's command (node_modules/.bin/NAME),
// or skips the test saying what is missing.
func agent(t *testing.T, name string) string {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not installed: run bash .ci/install (as root)")
	}
	bin := filepath.Join(agentsDir(t), "node_modules", ".bin", name)
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("%s is not installed: run npm ci --prefix testdata/agents (bash .ci/install does)", name)
	}
	if name == "claude" {
		// The package ships a 500-byte placeholder that its postinstall
		// replaces with the platform's native binary.
		if fi, err := os.Stat(bin); err == nil && fi.Size() < 1<<20 {
			t.Skipf("claude is the package's placeholder (its postinstall did not run, or npm has no native package for %s/%s): reinstall with npm ci --prefix testdata/agents", runtime.GOOS, runtime.GOARCH)
		}
	}
	return bin
}

// logBuffer collects a process's output.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// proc is a switchyard process (a simulator or the gateway).
type proc struct {
	name string
	cmd  *exec.Cmd
	logs *logBuffer
	done chan struct{}
	// addr and admin are the addresses it logged it listens on.
	addr, admin string
}

// start runs the switchyard binary with args and waits until its log says
// where it listens.
func start(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, cmd: exec.Command(switchyard(t), args...), logs: &logBuffer{}, done: make(chan struct{})}
	p.cmd.Stderr = p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	deadline := time.Now().Add(20 * time.Second)
	for p.addr == "" {
		if time.Now().After(deadline) {
			t.Fatalf("%s %v did not start: %s", name, args, p.logs.String())
		}
		select {
		case <-p.done:
			t.Fatalf("%s %v exited: %s", name, args, p.logs.String())
		case <-time.After(10 * time.Millisecond):
		}
		for _, line := range p.lines() {
			if a, ok := line["listen"].(string); ok {
				p.addr = a
				p.admin, _ = line["admin_listen"].(string)
			}
		}
	}
	return p
}

// lines are the JSON lines the process has logged.
func (p *proc) lines() []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(p.logs.String()))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var line map[string]any
		if json.Unmarshal(sc.Bytes(), &line) == nil {
			out = append(out, line)
		}
	}
	return out
}

// access is one access line of the gateway.
type access struct {
	Route, Pool, Replica, Fallback, Model, Resume string
	Status, PromptTokens, CompletionTokens        int
	Stream                                        bool
	// Body is the request body as the gateway sent it to the replica
	// (the server logs request bodies), and Tools its tools as TYPE:NAME.
	Body  string
	Tools []string
}

// String formats a without its body, which is long.
func (a access) String() string {
	return fmt.Sprintf("{route %s pool %s replica %s fallback %q model %s resume %q status %d prompt %d completion %d stream %t tools %q}",
		a.Route, a.Pool, a.Replica, a.Fallback, a.Model, a.Resume, a.Status, a.PromptTokens, a.CompletionTokens, a.Stream, a.Tools)
}

// accessLines are the gateway's access lines, in order.
func (p *proc) accessLines() []access {
	var out []access
	for _, l := range p.lines() {
		if l["msg"] != "request" {
			continue
		}
		a := access{}
		a.Route, _ = l["route"].(string)
		a.Pool, _ = l["pool"].(string)
		a.Replica, _ = l["replica"].(string)
		a.Fallback, _ = l["fallback"].(string)
		a.Model, _ = l["model"].(string)
		if r, ok := l["resume"]; ok {
			a.Resume = fmt.Sprint(r)
		}
		if s, ok := l["status"].(float64); ok {
			a.Status = int(s)
		}
		a.Stream, _ = l["stream"].(bool)
		if body, ok := l["request_body"].(string); ok {
			a.Body = body
			var req struct {
				Tools []struct{ Type, Name string } `json:"tools"`
			}
			_ = json.Unmarshal([]byte(body), &req)
			for _, tool := range req.Tools {
				a.Tools = append(a.Tools, tool.Type+":"+tool.Name)
			}
		}
		if n, ok := l["prompt_tokens"].(float64); ok {
			a.PromptTokens = int(n)
		}
		if n, ok := l["completion_tokens"].(float64); ok {
			a.CompletionTokens = int(n)
		}
		out = append(out, a)
	}
	return out
}

// metric sums the series of name on addr's /metrics whose labels include
// every one of labels.
func metric(t *testing.T, addr, name string, labels map[string]string) float64 {
	t.Helper()
	v, err := metricValue(addr, name, labels)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// metricValue is metric for goroutines other than the test's.
func metricValue(addr, name string, labels map[string]string) (float64, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+" ") && !strings.HasPrefix(line, name+"{") {
			continue
		}
		match := true
		for k, v := range labels {
			if !strings.Contains(line, fmt.Sprintf("%s=%q", k, v)) {
				match = false
			}
		}
		if match {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			sum += v
		}
	}
	return sum, sc.Err()
}

// cluster is a gateway in front of a small pool (two replicas with an
// 8192-token context) and a large pool (two replicas with 131072), every
// replica scripted by the same scenario.
type cluster struct {
	gw   *proc
	sims []*proc // small-a, small-b, large-a, large-b
}

// smallContext is the small pool's context length, in the simulator and
// in the pool's max_model_len.
const smallContext = 8192

// policy routes requests offering 8 tools or more (an agent with its full
// tool set) to the large pool and the rest to the small pool, with the
// large pool behind it for conversations that outgrow its context; a
// session keeps its pool, and once moved up stays up. Every agent model
// name is routed by the policy. Request bodies are logged, for the tests
// to see the tools each agent offers.
const policy = `version: 1
server: {log_bodies: true}
pools:
  small:
    model: m
    max_model_len: %d
    balance: least_outstanding
    health: {interval: 100ms, timeout: 1s, unhealthy_after: 2, healthy_after: 1}
    resume: {enabled: true}
    replicas: [{name: small-a, url: "http://%s"}, {name: small-b, url: "http://%s"}]
  large:
    model: m
    max_model_len: 131072
    balance: least_outstanding
    health: {interval: 100ms, timeout: 1s, unhealthy_after: 2, healthy_after: 1}
    resume: {enabled: true}
    replicas: [{name: large-a, url: "http://%s"}, {name: large-b, url: "http://%s"}]
session: {ttl: 10m}
routes:
  - name: tool-heavy
    when: {tools: {gte: 8}}
    to: large
  - name: default
    to: small
    fallback: [large]
models: [{name: "*", route: policy}]
`

// startCluster starts the replicas, scripted by scenario (a vllmsim
// scenario file's text) and run with simFlags, and the gateway.
func startCluster(t *testing.T, scenario string, simFlags ...string) *cluster {
	t.Helper()
	dir := t.TempDir()
	sc := filepath.Join(dir, "scenario.yaml")
	if err := os.WriteFile(sc, []byte(scenario), 0o644); err != nil {
		t.Fatal(err)
	}
	c := &cluster{}
	for _, r := range []struct {
		name string
		ctx  int
	}{{"small-a", smallContext}, {"small-b", smallContext}, {"large-a", 131072}, {"large-b", 131072}} {
		args := append([]string{"sim", "--listen", "127.0.0.1:0", "--model", "m", "--scenario", sc, "--max-model-len", strconv.Itoa(r.ctx)}, simFlags...)
		c.sims = append(c.sims, start(t, r.name, args...))
	}
	a := c.sims
	cfg := filepath.Join(dir, "switchyard.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(policy, smallContext, a[0].addr, a[1].addr, a[2].addr, a[3].addr)), 0o644); err != nil {
		t.Fatal(err)
	}
	c.gw = start(t, "gateway", "serve", "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the gateway's log:\n%s", c.gw.logs.String())
		}
	})
	return c
}

// turns are the gateway's access lines of streams, the agents' model
// turns (without their other requests, such as count_tokens), in order.
func (c *cluster) turns() []access {
	var out []access
	for _, a := range c.gw.accessLines() {
		if a.Stream {
			out = append(out, a)
		}
	}
	return out
}

// pools are the pools of turns.
func pools(turns []access) []string {
	var out []string
	for _, a := range turns {
		out = append(out, a.Pool)
	}
	return out
}

// killAfter waits until file exists (the agent has run its tool, so its
// next turn follows), then until a replica is running a request, lets it
// send a few tokens, and kills it with SIGKILL. It runs on its own
// goroutine while the agent runs, and sends the replica's name, or why
// none was killed, on the channel it returns.
func (c *cluster) killAfter(file string, timeout time.Duration) <-chan string {
	out := make(chan string, 1)
	go func() {
		deadline := time.Now().Add(timeout)
		for {
			if _, err := os.Stat(file); err == nil {
				break
			}
			if time.Now().After(deadline) {
				out <- fmt.Sprintf("(none: %s did not appear within %s)", file, timeout)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		for time.Now().Before(deadline) {
			for _, s := range c.sims {
				if n, _ := metricValue(s.addr, "vllm:num_requests_running", nil); n >= 1 {
					time.Sleep(300 * time.Millisecond) // a few tokens into the stream
					_ = s.cmd.Process.Kill()
					<-s.done
					out <- s.name
					return
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
		out <- fmt.Sprintf("(none: no replica ran a request within %s)", timeout)
	}()
	return out
}

// trap is a listener standing in for an HTTP(S) proxy: the agents' proxy
// variables point at it, so any request meant to leave loopback (one that
// ignored NO_PROXY=127.0.0.1,localhost) reaches it instead, and fails the
// test, naming what it asked for.
//
// A request to one of the tolerated hosts (CONNECT host:port) is refused
// as every other is, and logged instead of failing the test.
func trap(t *testing.T, tolerated ...string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var asked []string
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			_ = conn.SetReadDeadline(time.Now().Add(time.Second))
			first, _ := bufio.NewReader(io.LimitReader(conn, 512)).ReadString('\n')
			conn.Close()
			mu.Lock()
			asked = append(asked, strings.TrimSpace(first))
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		var failed []string
		for _, a := range asked {
			if slices.ContainsFunc(tolerated, func(h string) bool { return strings.HasPrefix(a, "CONNECT "+h+":") }) {
				t.Logf("refused, as expected: %q", a)
				continue
			}
			failed = append(failed, a)
		}
		if len(failed) > 0 {
			t.Errorf("the agent tried to reach beyond loopback through the proxy %d times: %q", len(failed), failed)
		}
	})
	return "http://" + ln.Addr().String()
}

// baseEnv is the environment every agent runs in: not the test's own (no
// API keys or config of the machine's user leak in), only PATH, a
// temporary HOME and the proxy trap.
func baseEnv(t *testing.T, home string) []string {
	t.Helper()
	return baseEnvTolerating(t, home)
}

// baseEnvTolerating is baseEnv whose proxy trap tolerates the given hosts
// (trap).
func baseEnvTolerating(t *testing.T, home string, tolerated ...string) []string {
	t.Helper()
	proxy := trap(t, tolerated...)
	return []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + home,
		"XDG_CONFIG_HOME=" + filepath.Join(home, ".config"),
		"XDG_CACHE_HOME=" + filepath.Join(home, ".cache"),
		"XDG_DATA_HOME=" + filepath.Join(home, ".local", "share"),
		"TMPDIR=" + os.TempDir(),
		"LANG=C.UTF-8",
		"TERM=dumb",
		"NO_COLOR=1",
		"HTTPS_PROXY=" + proxy, "https_proxy=" + proxy,
		"HTTP_PROXY=" + proxy, "http_proxy=" + proxy,
		"ALL_PROXY=" + proxy, "all_proxy=" + proxy,
		"NO_PROXY=127.0.0.1,localhost", "no_proxy=127.0.0.1,localhost",
	}
}

// run runs an agent command in dir and returns its stdout; it fails the
// test, with both outputs, if the command fails or outlasts timeout.
func run(t *testing.T, timeout time.Duration, dir string, env []string, bin string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir, cmd.Env = dir, env
	var stdout, stderr logBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	began := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		t.Logf("%s ran %s", filepath.Base(bin), time.Since(began).Round(time.Millisecond))
		if err != nil {
			t.Fatalf("%s: %v\nstdout: %s\nstderr: %s", filepath.Base(bin), err, stdout.String(), stderr.String())
		}
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("%s did not finish within %s\nstdout: %s\nstderr: %s", filepath.Base(bin), timeout, stdout.String(), stderr.String())
	}
	return []byte(stdout.String())
}

// bigFile writes a file of about n bytes of numbered lines into dir and
// returns its path: read by an agent, it outgrows the small pool's context.
func bigFile(t *testing.T, dir string, n int) string {
	t.Helper()
	var b strings.Builder
	for i := 1; b.Len() < n; i++ {
		fmt.Fprintf(&b, "line %05d: the harbor log records one more boat coming in at dawn\n", i)
	}
	path := filepath.Join(dir, "harbor.log")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// hasFile fails the test unless path holds want.
func hasFile(t *testing.T, path, want string) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the agent did not write its file: %v", err)
	}
	if string(got) != want {
		t.Errorf("%s holds %q, want %q", path, got, want)
	}
}
