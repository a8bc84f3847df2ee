package router_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/gatewaytest"
	"github.com/switchyard/switchyard/internal/polltest"
	"github.com/switchyard/switchyard/router"
)

// The replicas and gateways of these tests, shared with the examples'
// tests: internal/gatewaytest.
type (
	replica = gatewaytest.Replica
	gateway = gatewaytest.Gateway
)

var (
	startReplica = gatewaytest.StartReplica
	fast         = gatewaytest.Fast
	refusedURL   = gatewaytest.RefusedURL
	loadConfig   = gatewaytest.LoadConfig
	startGateway = gatewaytest.Start
	post         = gatewaytest.Post
	get          = gatewaytest.Get
	request      = gatewaytest.Do
)

// adminPools is GET /admin/pools: each pool's discovery and replicas.
type adminPools struct {
	Pools []struct {
		Name      string `json:"name"`
		Discovery *struct {
			Kind         string   `json:"kind"`
			Name         string   `json:"name"`
			Addresses    []string `json:"addresses"`
			LastResolved string   `json:"last_resolved"`
			Result       string   `json:"result"`
			Error        string   `json:"error"`
		} `json:"discovery"`
		Replicas []adminReplica `json:"replicas"`
	} `json:"pools"`
}

type adminReplica struct {
	Name          string `json:"name"`
	URL           string `json:"url"`
	Source        string `json:"source"`
	State         string `json:"state"`
	Healthy       bool   `json:"healthy"`
	Ejected       bool   `json:"ejected"`
	Misconfigured bool   `json:"misconfigured"`
	Why           string `json:"why"`
	Inflight      int64  `json:"inflight"`
	Waiting       int64  `json:"waiting"`
	Ejections     int64  `json:"ejections"`
	LastError     string `json:"last_error"`
}

func getPools(t *testing.T, gw *gateway) adminPools {
	t.Helper()
	var out adminPools
	if _, b := get(t, gw.Admin.URL+"/admin/pools", nil); json.Unmarshal(b, &out) != nil {
		t.Fatalf("/admin/pools: %s", b)
	}
	return out
}

// adminReplicaView is one replica of GET /admin/pools.
func adminReplicaView(t *testing.T, gw *gateway, pool, name string) adminReplica {
	t.Helper()
	for _, p := range getPools(t, gw).Pools {
		for _, r := range p.Replicas {
			if p.Name == pool && r.Name == name {
				return r
			}
		}
	}
	t.Fatalf("/admin/pools has no replica %s/%s", pool, name)
	return adminReplica{}
}

// load sends chat requests from several clients, each one at a time,
// until it ends, counting those that did not get a 200 (or a stream
// without its [DONE]).
type load struct {
	ok, failed atomic.Int64
	mu         sync.Mutex
	errs       []string
	stop       chan struct{}
	wg         sync.WaitGroup
	client     *http.Client
	// completed counts each client's finished requests.
	completed []atomic.Int64
}

// startLoad starts clients sending to the gateway at url, every other one
// streaming when streams is set; the load ends when the test does, if not
// before.
func startLoad(t *testing.T, url string, clients int, streams bool) *load {
	l := &load{stop: make(chan struct{}), completed: make([]atomic.Int64, clients),
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * clients}}}
	for i := range clients {
		stream := streams && i%2 == 0
		body := fmt.Sprintf(`{"model":"auto","stream":%t,"messages":[{"role":"user","content":"hi"}]}`, stream)
		l.wg.Go(func() {
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				err := l.send(url, body, stream)
				l.completed[i].Add(1)
				if err == nil {
					l.ok.Add(1)
					continue
				}
				l.failed.Add(1)
				l.mu.Lock()
				l.errs = append(l.errs, err.Error())
				l.mu.Unlock()
			}
		})
	}
	t.Cleanup(l.end)
	return l
}

func (l *load) send(url, body string, stream bool) error {
	resp, err := l.client.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		return err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || stream && !bytes.HasSuffix(b, []byte("data: [DONE]\n\n")) {
		return fmt.Errorf("status %d (%v): %.200s", resp.StatusCode, err, b)
	}
	return nil
}

// drain waits until every request begun before it was called has ended:
// each client has finished one more request than it had then.
func (l *load) drain(t *testing.T) {
	t.Helper()
	mark := make([]int64, len(l.completed))
	for i := range l.completed {
		mark[i] = l.completed[i].Load()
	}
	polltest.Eventually(t, 30*time.Second, "the requests in flight to end", func() bool {
		for i := range l.completed {
			if l.completed[i].Load() <= mark[i] {
				return false
			}
		}
		return true
	})
}

// end stops the load, waits for its requests and closes its idle
// connections.
func (l *load) end() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
	l.client.CloseIdleConnections()
}

// check fails t if a request of the load failed, after the load ended.
func (l *load) check(t *testing.T) {
	t.Helper()
	l.end()
	if n := l.failed.Load(); n != 0 {
		t.Errorf("%d of %d requests failed; the first: %v", n, n+l.ok.Load(), l.errs[:min(5, len(l.errs))])
	}
}

// writeFile replaces the file at path with data at once (as an editor
// saving it does).
func writeFile(t *testing.T, path, data string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// fileGateway runs a gateway on the config text, read from the file it
// returns the path of (Options.ConfigPath: the file it reloads).
func fileGateway(t *testing.T, text string, opts ...func(*router.Options)) (*gateway, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "switchyard.yaml")
	writeFile(t, path, text)
	cfg, err := router.LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	return startGateway(t, cfg, append(opts, func(o *router.Options) { o.ConfigPath = path })...), path
}

// reloadFile writes text to the gateway's config file and reloads it.
func reloadFile(t *testing.T, gw *gateway, path, text string) {
	t.Helper()
	writeFile(t, path, text)
	if _, err := gw.G.Reload(); err != nil {
		t.Fatal(err)
	}
}

// hold posts body to url in the background, its client leaving when the
// test ends (before the servers close): a request that holds its slot
// meanwhile.
func hold(t *testing.T, url, body string, header map[string]string) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		for k, v := range header {
			req.Header.Set(k, v)
		}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
}
