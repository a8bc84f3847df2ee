package chaos_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard/switchyard/deploy/imagebuild"
	"github.com/switchyard/switchyard/internal/polltest"
)

// binary is the switchyard binary built once for the suite, as the
// Dockerfile builds it.
var binary string

func TestMain(m *testing.M) {
	if addr := os.Getenv(attackerEnv); addr != "" {
		os.Exit(runAttacker(addr))
	}
	// The suite tests a binary built from the whole module, which go
	// test's cache does not know about: stat every Go file so that a
	// change anywhere invalidates a cached result.
	_ = filepath.WalkDir("..", func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".go") {
			_, _ = os.Stat(path)
		}
		return nil
	})
	dir, err := os.MkdirTemp("", "switchyard-chaos")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// The image's binary. deploy's tests build the same one; whichever
	// builds second finds the packages compiled and only links.
	built, err := imagebuild.Build("..", dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "building switchyard:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	binary = built.Path
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// logBuffer collects a process's stderr (JSON log lines).
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
	cmd  *exec.Cmd
	logs *logBuffer
	done chan struct{}
	// addr and admin are the addresses it logged it listens on.
	addr, admin string
}

// start runs the binary with args and waits until its log says where it
// listens.
func start(t testing.TB, args ...string) *proc {
	t.Helper()
	return startWith(t, nil, args...)
}

// startWith is start with env added to the process's environment.
func startWith(t testing.TB, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(binary, args...), logs: &logBuffer{}, done: make(chan struct{})}
	if env != nil {
		p.cmd.Env = append(os.Environ(), env...)
	}
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
			t.Fatalf("%v did not start: %s", args, p.logs.String())
		}
		select {
		case <-p.done:
			t.Fatalf("%v exited: %s", args, p.logs.String())
		case <-time.After(10 * time.Millisecond):
		}
		sc := bufio.NewScanner(strings.NewReader(p.logs.String()))
		for sc.Scan() {
			var line map[string]any
			if json.Unmarshal(sc.Bytes(), &line) != nil {
				continue
			}
			if a, ok := line["listen"].(string); ok {
				p.addr = a
				p.admin, _ = line["admin_listen"].(string)
			}
		}
	}
	return p
}

// sim starts a simulated vLLM replica serving model m.
func sim(t testing.TB, extra ...string) *proc {
	t.Helper()
	return start(t, append([]string{"sim", "--listen", "127.0.0.1:0", "--model", "m", "--decode-tps", "400", "--max-tokens", "8", "--natural-lengths=false"}, extra...)...)
}

// gateway writes cfg to a file and serves it.
func gateway(t testing.TB, cfg string) (*proc, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "switchyard.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	p := start(t, "serve", "--config", path, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0")
	return p, path
}

// startEnv writes cfg to a file and serves it with env set.
func startEnv(t testing.TB, env []string, cfg string) *proc {
	t.Helper()
	path := filepath.Join(t.TempDir(), "switchyard.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return startWith(t, env, "serve", "--config", path, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0")
}

// fds is the number of file descriptors the process has open.
func (p *proc) fds(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p.cmd.Process.Pid))
	if err != nil {
		t.Skipf("cannot count fds: %v", err)
	}
	return len(ents)
}

// metric reads one unlabelled (or first matching) series from the
// process's admin /metrics.
func (p *proc) metric(t testing.TB, prefix string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + p.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sum, found := 0.0, false
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, prefix+" ") || strings.HasPrefix(line, prefix+"{") {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			sum += v
			found = true
		}
	}
	if !found {
		return 0
	}
	return sum
}

// baseline records a gateway's fds and goroutines at rest.
type baseline struct{ fds, goroutines float64 }

// baseline warms the gateway up with a little load (so that its keep-alive
// connections to the replicas exist, as they will after any case) and
// records its fds and goroutines.
func (p *proc) baseline(t testing.TB) baseline {
	t.Helper()
	if counts, why := load(context.Background(), p.addr, "auto", 32, 8); counts[complete] != 32 {
		t.Fatalf("warm-up: %v %s", counts, why)
	}
	time.Sleep(200 * time.Millisecond)
	return baseline{fds: float64(p.fds(t)), goroutines: p.metric(t, "go_goroutines")}
}

// settles waits until the gateway is back near its resting fds and
// goroutines: nothing a case did leaks.
func (p *proc) settles(t testing.TB, b baseline) {
	t.Helper()
	var fds, gs float64
	polltest.Eventually(t, 20*time.Second, "fds and goroutines to return to the baseline", func() bool {
		fds, gs = float64(p.fds(t)), p.metric(t, "go_goroutines")
		return fds <= b.fds+4 && gs <= b.goroutines+8
	}, func() string {
		return fmt.Sprintf("fds %v (baseline %v), goroutines %v (baseline %v)", fds, b.fds, gs, b.goroutines)
	})
}

// outcome is how one client request ended, from the client's side.
type outcome int

const (
	complete   outcome = iota // 200 and, for a stream, [DONE]
	errorEvent                // a stream that ended with an error event
	errorCode                 // an error status with an OpenAI-shaped body
	lost                      // a transport error, or a stream that stopped silently
)

var outcomeNames = []string{"complete", "error event", "error status", "lost"}

// call sends one chat request and classifies how it ended.
func call(ctx context.Context, c *http.Client, addr, model string, stream bool) (outcome, string) {
	body := fmt.Sprintf(`{"model":%q,"stream":%t,"messages":[{"role":"user","content":"hello there"}]}`, model, stream)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		return lost, err.Error()
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return lost, err.Error()
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return lost, "reading: " + err.Error()
	}
	s := string(b)
	switch {
	case resp.StatusCode != 200:
		if strings.Contains(s, `"error"`) {
			return errorCode, fmt.Sprintf("%d %s", resp.StatusCode, s)
		}
		return lost, fmt.Sprintf("%d without an error body: %q", resp.StatusCode, s)
	case !stream:
		if strings.Contains(s, `"choices"`) {
			return complete, ""
		}
		return lost, "non-stream answer without choices: " + s
	case strings.HasSuffix(s, "data: [DONE]\n\n"):
		return complete, ""
	case strings.Contains(s, "\n\ndata: {\"error\":") || strings.HasPrefix(s, "data: {\"error\":"):
		return errorEvent, s[strings.LastIndex(s, "data: {\"error\""):]
	}
	return lost, fmt.Sprintf("stream ended silently: %.300q", s)
}

// load runs n requests from w workers (streams and plain requests
// alternating) and counts their outcomes; firstLost describes the first
// that did not complete.
func load(ctx context.Context, addr, model string, n, w int) (counts [4]int, firstLost string) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: w}}
	defer c.CloseIdleConnections()
	next := make(chan int)
	go func() {
		defer close(next)
		for i := 0; i < n; i++ {
			select {
			case next <- i:
			case <-ctx.Done():
				return
			}
		}
	}()
	for range w {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				o, why := call(ctx, c, addr, model, i%2 == 0)
				mu.Lock()
				counts[o]++
				if o != complete && firstLost == "" {
					firstLost = outcomeNames[o] + ": " + why
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return counts, firstLost
}

func signal(t testing.TB, p *proc, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}
