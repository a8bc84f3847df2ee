package chaos_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestRollingRestart: three gateway processes with one config serve
// clients that spread their requests over all three and retry a refused
// or dropped connection on the next instance, as a Kubernetes Service's
// clients do. SIGTERM one instance, start a replacement, SIGTERM a second:
// no request is lost or fails, and each terminated instance exits 0 after
// its drain delay.
func TestRollingRestart(t *testing.T) {
	a, b := sim(t), sim(t)
	cfg := fmt.Sprintf(`version: 1
server: {shutdown_grace: 10s, drain_delay: 500ms}
pools:
  p:
    model: m
    health: {interval: 100ms, timeout: 1s, unhealthy_after: 2, healthy_after: 1}
    replicas: [{name: a, url: "http://%s"}, {name: b, url: "http://%s"}]
routes:
  - name: default
    to: p
`, a.addr, b.addr)
	path := filepath.Join(t.TempDir(), "switchyard.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	serve := func() *proc {
		return start(t, "serve", "--config", path, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0")
	}
	var mu sync.Mutex
	gws := []*proc{serve(), serve(), serve()}
	addrs := func() []string {
		mu.Lock()
		defer mu.Unlock()
		out := make([]string, len(gws))
		for i, g := range gws {
			out[i] = g.addr
		}
		return out
	}

	ctx, cancel := context.WithCancel(context.Background())
	var (
		wg                    sync.WaitGroup
		done, retried, failed atomic.Int64
		firstFailure          atomic.Value
	)
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	defer client.CloseIdleConnections()
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; ctx.Err() == nil; i++ {
				list := addrs()
				var o outcome
				var why string
				for try := 0; try < len(list)*2; try++ {
					o, why = call(context.Background(), client, list[(i+try)%len(list)], "auto", i%2 == 0)
					if o != lost || !connectionError(why) {
						break
					}
					retried.Add(1)
				}
				if o != complete {
					failed.Add(1)
					firstFailure.CompareAndSwap(nil, outcomeNames[o]+": "+why)
				}
				done.Add(1)
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	for _, victim := range []int{1, 2} {
		signal(t, gws[victim], syscall.SIGTERM)
		select {
		case <-gws[victim].done:
			if code := gws[victim].cmd.ProcessState.ExitCode(); code != 0 {
				t.Errorf("instance %d exited %d: %s", victim, code, gws[victim].logs.String())
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("instance %d did not exit", victim)
		}
		g := serve()
		mu.Lock()
		gws[victim] = g
		mu.Unlock()
		time.Sleep(300 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	t.Logf("%d requests, %d connection retries, %d failed", done.Load(), retried.Load(), failed.Load())
	if failed.Load() != 0 {
		t.Errorf("%d requests failed; first: %v", failed.Load(), firstFailure.Load())
	}
	if done.Load() < 50 {
		t.Errorf("only %d requests ran: the load did not overlap the restarts", done.Load())
	}
}

// connectionError reports whether a request failed before any answer
// arrived because its connection was refused or dropped: safe to retry
// on another instance.
func connectionError(why string) bool {
	if !strings.HasPrefix(why, "Post ") { // an error from the client's Do: no answer
		return false
	}
	for _, s := range []string{"connection refused", "connection reset", "EOF", "server closed idle connection", "broken pipe"} {
		if strings.Contains(why, s) {
			return true
		}
	}
	return false
}
