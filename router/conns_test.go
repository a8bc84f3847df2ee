package router_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/polltest"
)

// connsYAML caps the client listener at 8 connections, the admin one at
// 4; body_timeout a minute: nothing waits for it.
const connsYAML = `
version: 1
server:
  max_connections: 8
  max_connections_per_client: 8
  admin_max_connections: 4
  body_timeout: 1m
  idle_timeout: 120s
  api_keys: [{name: victim, key_env: KEY_VICTIM}, {name: attacker, key_env: KEY_ATTACKER}]
pools:
  p: {model: m, health: {disabled: true}, replicas: [{name: a, url: "{{m}}"}]}
routes:
  - name: default
    to: p
`

// limited serves h on a loopback listener capped by the gateway, with the
// connection states tracked (as serve does).
func limited(t *testing.T, gw *gateway, h http.Handler, listener string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener.Close()
	srv.Listener = gw.G.LimitServer(srv.Config, ln, listener, 1<<20)
	srv.Start()
	t.Cleanup(srv.Close)
	return ln.Addr().String()
}

// dialFrom opens a connection to addr from the loopback address from,
// closed when the test ends.
func dialFrom(t *testing.T, from, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// isClosed reports whether the server closed c (which has nothing more to
// read): a read ends with EOF rather than the deadline.
func isClosed(c net.Conn) bool {
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err := c.Read(make([]byte, 1))
	return err == io.EOF
}

func victimClient(from string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
}

func victimChat(t *testing.T, c *http.Client, url string, i int) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(chatBody(fmt.Sprint("hello ", i), "")))
	req.Header.Set("Authorization", "Bearer victim-secret")
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("victim request %d: %v", i, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

var connsEnv = map[string]string{"KEY_VICTIM": "victim-secret", "KEY_ATTACKER": "attacker-secret"}

// halfSent opens a connection from the loopback address from and sends a
// POST's headers and the first byte of a 100-byte body, the rest never
// coming (a client trickling its body).
func halfSent(t *testing.T, from, addr, path string, header ...string) net.Conn {
	t.Helper()
	c := dialFrom(t, from, addr)
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n%s\r\n{", path, strings.Join(append(header, ""), "\r\n"))
	return c
}

// TestHalfSentBodiesGiveWay: connections whose request headers are in and
// whose bodies trickle carry no admitted request: at the cap they give
// way (the oldest first) to a keyed victim's requests, on the client and
// the admin listener alike; an unauthenticated one is answered 401 at
// once and closed, never held to drain its body (issue 42, N1: four
// addresses' half-sent bodies filled the cap and the victim got 0 of 70,
// the probes 503).
func TestHalfSentBodiesGiveWay(t *testing.T) {
	m := startReplica(t, fast("m"))
	gw := startGateway(t, loadConfig(t, connsYAML, map[string]string{"m": m.Srv.URL}, connsEnv))

	t.Run("unauthenticated", func(t *testing.T) {
		addr := limited(t, gw, gw.G.Handler(), "api")
		c := halfSent(t, "127.0.0.3", addr, "/v1/chat/completions")
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("no answer to a half-sent unauthenticated request: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || !resp.Close {
			t.Errorf("%d, Connection close %t; want 401 and the connection closed", resp.StatusCode, resp.Close)
		}
		if !isClosed(c) {
			t.Error("the connection stayed open to drain the body")
		}
	})
	for _, l := range []struct {
		name, path string
		h          http.Handler
		cap        int
	}{{"api", "/v1/chat/completions", gw.G.Handler(), 8}, {"admin", "/healthz", gw.G.AdminHandler(), 4}} {
		t.Run(l.name, func(t *testing.T) {
			addr := limited(t, gw, l.h, l.name)
			var flood []net.Conn
			for i := range l.cap {
				// Four addresses, keyed: authentication passes, the body
				// never completes.
				flood = append(flood, halfSent(t, fmt.Sprintf("127.0.0.%d", 4+i%4), addr, l.path, "Authorization: Bearer attacker-secret"))
			}
			if l.name == "admin" {
				// The probes read no body: each half-sent one is answered
				// and its connection closed at once, never held.
				for i, c := range flood {
					_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
					resp, err := http.ReadResponse(bufio.NewReader(c), nil)
					if err != nil {
						t.Fatalf("half-sent probe %d: %v", i, err)
					}
					resp.Body.Close()
					if !isClosed(c) {
						t.Errorf("half-sent probe %d: its connection is held", i)
					}
				}
			} else {
				// Every one open and reading its body (none idle: a
				// connection whose headers are not parsed yet counts as
				// idle, and would give way first).
				polltest.Eventually(t, 10*time.Second, "the flood to be open and reading", func() bool {
					return gw.MetricValue(t, "switchyard_connections_open", map[string]string{"listener": l.name}) == float64(l.cap) &&
						gw.MetricValue(t, "switchyard_connections_idle", map[string]string{"listener": l.name}) == 0
				})
			}
			c := victimClient("127.0.0.1")
			for i := range 5 {
				var status int
				var body string
				if l.name == "api" {
					status, body = victimChat(t, c, "http://"+addr, i)
				} else {
					resp, err := c.Get("http://" + addr + "/healthz")
					if err != nil {
						t.Fatalf("probe %d: %v", i, err)
					}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					status, body = resp.StatusCode, string(b)
				}
				if status != 200 {
					t.Fatalf("victim request %d with %d half-sent bodies held: %d %s", i, l.cap, status, body)
				}
			}
			if l.name == "api" {
				if v := gw.MetricValue(t, "switchyard_connections_evicted_total", map[string]string{"listener": l.name, "reason": "reading_at_cap"}); v < 1 {
					t.Errorf("evicted while reading %v, want at least 1", v)
				}
			}
		})
	}
}
