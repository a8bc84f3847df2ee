package conns

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/polltest"
)

// gauge and counts stand in for the listener's metrics.
type gauge struct{ v atomic.Int64 }

func (g *gauge) Set(v float64) { g.v.Store(int64(v)) }

type counts struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counts) add(reason string) { c.mu.Lock(); c.n[reason]++; c.mu.Unlock() }
func (c *counts) get(reason string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[reason]
}

func (c *counts) Inc() { c.add("refused") }

// served is a Listener serving h, with its metrics.
type served struct {
	addr    string
	idle    gauge
	evicted counts
}

// serve runs h on a loopback Listener with lim, the connection states
// tracked (as the gateway's listeners are), and now as its clock.
func serve(t *testing.T, lim Limits, now func() time.Time, h http.Handler) *served {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &served{addr: ln.Addr().String(), evicted: counts{n: map[string]int{}}}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener.Close()
	l := Listen(ln, Options{Limits: func() Limits { return lim }, Now: now, Open: &gauge{}, Idle: &s.idle,
		Refused: &s.evicted, Evicted: s.evicted.add})
	l.Track(srv.Config)
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	return s
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

// get sends GET path on c and reads the answer.
func get(t *testing.T, c net.Conn, path string) (int, string) {
	t.Helper()
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(b)
}

// idleConn opens a connection from the loopback address from, makes one
// request on it and leaves it open and idle (keep-alive).
func idleConn(t *testing.T, from, addr string) net.Conn {
	t.Helper()
	c := dialFrom(t, from, addr)
	if code, _ := get(t, c, "/"); code != 200 {
		t.Fatalf("idle connection's request: %d", code)
	}
	return c
}

// idleSeen waits until the listener knows n connections idle (the server
// reports a connection idle just after its answer is written).
func (s *served) idleSeen(t *testing.T, n int) {
	t.Helper()
	polltest.Eventually(t, 10*time.Second, fmt.Sprintf("%d idle connections", n), func() bool { return s.idle.v.Load() == int64(n) })
}

// isClosed reports whether the server closed c (which has nothing more to
// read): a read ends with EOF rather than the deadline.
func isClosed(c net.Conn) bool {
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err := c.Read(make([]byte, 1))
	return err == io.EOF
}

// TestConnectionsPerClient: one client address holds at most its own cap:
// a new connection beyond it closes the address's oldest idle one, and,
// with every one of them carrying a request, is refused 503
// too_many_connections_per_client; another address still gets in.
func TestConnectionsPerClient(t *testing.T) {
	var held atomic.Int64
	release := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			held.Add(1)
			<-release
		}
	})
	s := serve(t, Limits{Max: 8, PerClient: 3, IdleTimeout: 2 * time.Minute}, time.Now, h)
	var idle []net.Conn
	for i := range 4 {
		idle = append(idle, idleConn(t, "127.0.0.2", s.addr))
		s.idleSeen(t, min(i+1, 3))
	}
	if !isClosed(idle[0]) {
		t.Fatalf("the fourth connection of one address did not close its oldest idle one")
	}
	if n := s.evicted.get("per_client"); n != 1 {
		t.Errorf("per_client evictions %d, want 1", n)
	}
	for _, c := range idle[1:] {
		c.Close()
	}
	// Three requests in flight from one address: a fourth connection is
	// refused.
	for range 3 {
		c := dialFrom(t, "127.0.0.2", s.addr)
		fmt.Fprint(c, "GET /hold HTTP/1.1\r\nHost: x\r\n\r\n")
		go io.Copy(io.Discard, c)
	}
	polltest.Eventually(t, 10*time.Second, "three held requests", func() bool { return held.Load() == 3 })
	if code, body := get(t, dialFrom(t, "127.0.0.2", s.addr), "/"); code != 503 || !strings.Contains(body, `"code":"too_many_connections_per_client"`) {
		t.Fatalf("a fourth busy connection: %d %s", code, body)
	}
	if code, body := get(t, dialFrom(t, "127.0.0.1", s.addr), "/"); code != 200 {
		t.Fatalf("another address: %d %s", code, body)
	}
	close(release)
}

// TestIdleTimeoutShrinksUnderPressure: past half the cap, a connection
// idle longer than the shortened timeout is closed when the next one
// arrives (the clock is injected: no waiting).
func TestIdleTimeoutShrinksUnderPressure(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	s := serve(t, Limits{Max: 8, PerClient: 8, IdleTimeout: 2 * time.Minute}, clock, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	var idle []net.Conn
	for range 3 {
		idle = append(idle, idleConn(t, "127.0.0.2", s.addr))
	}
	s.idleSeen(t, 3)
	advance(100 * time.Second)
	// 4 of 8 open: no pressure, the 120s timeout holds.
	idle = append(idle, idleConn(t, "127.0.0.2", s.addr))
	if n := s.evicted.get("idle_timeout"); n != 0 {
		t.Fatalf("idle_timeout evictions %d at half the cap, want 0", n)
	}
	s.idleSeen(t, 4)
	// The 5th of 8: past half the cap the timeout is 120s × 2 × 3/8 =
	// 90s; the first three have been idle 100s.
	idle = append(idle, idleConn(t, "127.0.0.2", s.addr))
	if n := s.evicted.get("idle_timeout"); n != 3 {
		t.Errorf("idle_timeout evictions %d past half the cap, want 3", n)
	}
	for i, c := range idle[:3] {
		if !isClosed(c) {
			t.Errorf("connection %d idle 100s past half the cap is open", i)
		}
	}
	if isClosed(idle[3]) {
		t.Errorf("a connection idle 0s was closed")
	}
}
