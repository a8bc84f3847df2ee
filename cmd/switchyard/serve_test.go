package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/polltest"
	"github.com/switchyard/switchyard/policy"
	"github.com/switchyard/switchyard/router"
	"github.com/switchyard/switchyard/vllmsim"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func getBody(url string) string {
	resp, err := http.Get(url)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestServe runs the real serve command: file-change and SIGHUP reloads,
// and a shutdown that drains a stream in flight.
func TestServe(t *testing.T) {
	// The big pool's replica holds its stream open until the test lets go,
	// so the stream is surely in flight when shutdown begins.
	release := make(chan struct{})
	var releaseOnce sync.Once
	letGo := func() { releaseOnce.Do(func() { close(release) }) }
	defer letGo()
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n")
		http.NewResponseController(w).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	}))
	defer slow.Close()
	fast := httptest.NewServer(vllmsim.New(vllmsim.Profile{Model: "small", DefaultMaxTokens: 2}))
	defer fast.Close()
	dir := t.TempDir()
	path := filepath.Join(dir, "switchyard.yaml")
	conf := func(target string) string {
		return `version: 1
server: {shutdown_grace: 10s, drain_delay: 0s}
pools:
  big: {model: big, health: {disabled: true}, replicas: [{name: b, url: "` + slow.URL + `"}]}
  small: {model: small, health: {disabled: true}, replicas: [{name: s, url: "` + fast.URL + `"}]}
routes:
  - name: main
    to: ` + target + "\n"
	}
	write := func(s string) {
		if err := os.WriteFile(path+".tmp", []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			t.Fatal(err)
		}
	}
	write(conf("big"))
	api, admin := freeAddr(t), freeAddr(t)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var stderr syncWriter
	go func() {
		done <- run(ctx, []string{"serve", "--config", path, "--listen", api, "--admin-listen", admin}, io.Discard, &stderr)
	}()
	polltest.Eventually(t, 10*time.Second, "the gateway to serve", func() bool { return strings.Contains(getBody("http://"+api+"/readyz"), `"ready"`) })

	// A stream in flight when shutdown begins must complete.
	resp, err := http.Post("http://"+api+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"auto","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.Header.Get("X-Switchyard-Pool") != "big" {
		t.Fatalf("pool %q", resp.Header.Get("X-Switchyard-Pool"))
	}

	write(conf("small"))
	polltest.Eventually(t, 10*time.Second, "the file-change reload", func() bool {
		return strings.Contains(getBody("http://"+admin+"/readyz"), "") &&
			strings.Contains(getBody("http://"+admin+"/admin/config"), "to: small")
	})
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	polltest.Eventually(t, 10*time.Second, "the SIGHUP reload", func() bool { return strings.Contains(getBody("http://"+admin+"/admin/config"), "# generation 3") })

	stop() // as SIGTERM does
	// While the stream drains, /readyz (on the admin listener, which stays
	// up until the client API has drained) says so.
	polltest.Eventually(t, 10*time.Second, "/readyz to report draining", func() bool {
		r, err := http.Get("http://" + admin + "/readyz")
		if err != nil {
			return false
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		return r.StatusCode == http.StatusServiceUnavailable && strings.Contains(string(b), "draining")
	})
	letGo()
	rest, err := io.ReadAll(resp.Body)
	if err != nil || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Errorf("stream in flight at shutdown did not complete: %v %q", err, rest)
	}
	select {
	case code := <-done:
		if code != exitOK {
			t.Errorf("serve exited %d: %s", code, stderr.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not exit")
	}
	logs := stderr.String()
	for _, want := range []string{`"msg":"config file changed: reloading"`, `"msg":"SIGHUP: reloading config"`, `"msg":"shutting down; draining in-flight requests"`, `"msg":"request"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %s", want)
		}
	}
}

// TestShutdownGraceAndSecondSignal: streams still open when the grace runs
// out end with an error event, not a bare EOF; a second SIGTERM during the
// drain exits at once with code 1.
func TestShutdownGraceAndSecondSignal(t *testing.T) {
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n")
		http.NewResponseController(w).Flush()
		<-r.Context().Done()
	}))
	defer hang.Close()
	for _, second := range []bool{false, true} {
		grace := "300ms"
		if second {
			grace = "1m"
		}
		cfg, err := policy.Load("t.yaml", []byte(`version: 1
server: {shutdown_grace: `+grace+`, drain_delay: 0s}
pools:
  p: {model: m, health: {disabled: true}, replicas: [{name: r, url: "`+hang.URL+`"}]}
routes:
  - name: main
    to: p
`), router.LoadOptions())
		if err != nil {
			t.Fatal(err)
		}
		var logs syncWriter
		log := slog.New(slog.NewJSONHandler(&logs, nil))
		g, err := router.New(cfg, router.Options{Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		exited := make(chan int, 1)
		srv := &Server{Gateway: g, Log: log, Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:0", Exit: func(code int) { exited <- code }}
		ctx, stop := context.WithCancel(context.Background())
		addrs := make(chan net.Addr, 2)
		done := make(chan error, 1)
		go func() { done <- srv.Run(ctx, func(api, admin net.Addr) { addrs <- api; addrs <- admin }) }()
		api := <-addrs
		<-addrs
		resp, err := http.Post("http://"+api.String()+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"auto","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		stop()
		if second {
			polltest.Eventually(t, 10*time.Second, "the drain to begin", func() bool { return strings.Contains(logs.String(), "shutting down") })
			if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			select {
			case code := <-exited:
				if code != 1 || !strings.Contains(logs.String(), "second signal") {
					t.Errorf("exit %d, logs %s", code, logs.String())
				}
			case <-time.After(10 * time.Second):
				t.Fatal("a second SIGTERM did not exit")
			}
			// Let the test's Run finish: end the stream.
			g.CutStreams()
			resp.Body.Close()
		} else {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !strings.Contains(string(body), "shutting down") || !strings.Contains(string(body), `"error"`) {
				t.Errorf("stream at the end of the grace: %q", body)
			}
		}
		select {
		case err := <-done:
			if err != nil {
				t.Error(err)
			}
		case <-time.After(15 * time.Second):
			t.Fatal("Run did not return")
		}
		g.Close()
	}
}

// TestReloadRefusesListenChange: a reload that changes a listen address is
// refused with the key's position, the running config (and its listener)
// keeps serving; a later reload that changes only routing is applied.
func TestReloadRefusesListenChange(t *testing.T) {
	fast := httptest.NewServer(vllmsim.New(vllmsim.Profile{Model: "small", DefaultMaxTokens: 2}))
	defer fast.Close()
	path := filepath.Join(t.TempDir(), "switchyard.yaml")
	api, admin, other := freeAddr(t), freeAddr(t), freeAddr(t)
	conf := func(listen, route string) string {
		return `version: 1
server: {listen: "` + listen + `", admin_listen: "` + admin + `", drain_delay: 0s}
pools:
  small: {model: small, health: {disabled: true}, replicas: [{name: s, url: "` + fast.URL + `"}]}
routes:
  - name: ` + route + `
    to: small
`
	}
	if err := os.WriteFile(path, []byte(conf(api, "main")), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan int, 1)
	var stderr syncWriter
	go func() { done <- run(ctx, []string{"serve", "--config", path, "--no-watch"}, io.Discard, &stderr) }()
	polltest.Eventually(t, 10*time.Second, "the gateway to serve", func() bool { return strings.Contains(getBody("http://"+api+"/readyz"), `"ready"`) })

	reload := func() (int, string) {
		resp, err := http.Post("http://"+admin+"/admin/reload", "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if err := os.WriteFile(path, []byte(conf(other, "main")), 0o644); err != nil {
		t.Fatal(err)
	}
	code, body := reload()
	want := path + `:2:18: server: listen changed from ` + api + ` to ` + other + `: it is fixed when the listeners start; restart switchyard to change it`
	if code != http.StatusBadRequest || !strings.Contains(body, want) {
		t.Errorf("reload: %d %s\nwant 400 with %s", code, body, want)
	}
	if conf := getBody("http://" + admin + "/admin/config"); !strings.Contains(conf, "listen: "+api) || !strings.Contains(conf, "# generation 1") {
		t.Errorf("the refused config was applied:\n%s", conf)
	}
	if !strings.Contains(getBody("http://"+api+"/readyz"), `"ready"`) {
		t.Errorf("the running listener stopped serving")
	}

	if err := os.WriteFile(path, []byte(conf(api, "renamed")), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, body := reload(); code != http.StatusOK || !strings.Contains(body, `"generation": 2`) {
		t.Errorf("routing-only reload: %d %s", code, body)
	}
	stop()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not exit")
	}
}

// TestExposedAdmin: serve warns about an admin listener without a token
// unless it is bound to loopback.
func TestExposedAdmin(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:9090": false, "[::1]:9090": false, "localhost:9090": false,
		"0.0.0.0:9090": true, ":9090": true, "10.0.0.5:9090": true, "[::]:9090": true, "gateway.internal:9090": true,
	} {
		if got := exposedAdmin(addr); got != want {
			t.Errorf("exposedAdmin(%q) = %v, want %v", addr, got, want)
		}
	}
}

// TestDrainDelay: after SIGTERM, for server.drain_delay, /readyz answers
// 503 while new requests are still accepted and served; then the listener
// closes and Run returns.
func TestDrainDelay(t *testing.T) {
	fast := httptest.NewServer(vllmsim.New(vllmsim.Profile{Model: "m", DefaultMaxTokens: 2}))
	defer fast.Close()
	g, log := onePoolGateway(t, "server: {drain_delay: 7s}\n", fast.URL)
	sleeping, wake := make(chan time.Duration, 1), make(chan struct{})
	srv := &Server{Gateway: g, Log: log, Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:0",
		Sleep: func(d time.Duration) { sleeping <- d; <-wake }}
	ctx, stop := context.WithCancel(context.Background())
	addrs := make(chan net.Addr, 2)
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, func(api, admin net.Addr) { addrs <- api; addrs <- admin }) }()
	api := "http://" + (<-addrs).String()
	<-addrs
	stop() // as SIGTERM does
	if d := <-sleeping; d != 7*time.Second {
		t.Errorf("drain delay %v, want 7s", d)
	}
	// Inside the delay: not ready, yet a new connection is served.
	resp, err := http.Get(api + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/readyz during the drain delay: %d, want 503", resp.StatusCode)
	}
	tr := &http.Transport{DisableKeepAlives: true} // a new connection each time
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	resp, err = client.Post(api+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"auto","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatalf("a request during the drain delay was refused: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("a request during the drain delay: %d", resp.StatusCode)
	}
	close(wake)
	select {
	case err := <-done:
		if err != nil {
			t.Error(err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return after the delay")
	}
	if _, err := client.Get(api + "/readyz"); err == nil {
		t.Errorf("the listener still accepts after the drain")
	}
}

// TestPortInUseNamesTheFlag: an address in use says how to choose another
// (before, the error was net's alone).
func TestPortInUseNamesTheFlag(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	g, log := onePoolGateway(t, "", "http://127.0.0.1:1")
	for _, c := range []struct{ listen, admin, want string }{
		{busy.Addr().String(), "127.0.0.1:0", "--listen or server.listen"},
		{"127.0.0.1:0", busy.Addr().String(), "--admin-listen or server.admin_listen"},
	} {
		srv := &Server{Gateway: g, Log: log, Listen: c.listen, AdminListen: c.admin}
		if err := srv.Run(context.Background(), nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s/%s: %v", c.listen, c.admin, err)
		}
	}
}

// onePoolGateway is a gateway (closed with the test) over one pool "p" on
// the replica at url, with server (a YAML "server:" line, or "") added.
func onePoolGateway(t *testing.T, server, url string) (*router.Gateway, *slog.Logger) {
	t.Helper()
	cfg, err := policy.Load("t.yaml", []byte("version: 1\n"+server+`pools:
  p: {model: m, health: {disabled: true}, replicas: [{name: r, url: "`+url+`"}]}
routes:
  - name: main
    to: p
`), router.LoadOptions())
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	g, err := router.New(cfg, router.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	return g, log
}
