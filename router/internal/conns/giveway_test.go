package conns

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/polltest"
)

// TestIdleConnectionsGiveWay: one address holding as many idle keep-alive
// connections as the cap does not keep another client out: its
// connections, which carry requests, take the places of the longest idle
// ones, and none is refused (issue 31, item 1: the victim got 503
// too_many_connections on every request while the attacker sat idle).
func TestIdleConnectionsGiveWay(t *testing.T) {
	const max = 8
	s := serve(t, Limits{Max: max, PerClient: max, IdleTimeout: 2 * time.Minute}, time.Now, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	var flood []net.Conn
	for i := range max {
		flood = append(flood, idleConn(t, "127.0.0.2", s.addr))
		// Each idle before the next opens, so that their order of
		// idleness is the order they were opened in.
		s.idleSeen(t, i+1)
	}
	for i := range 5 {
		c := dialFrom(t, "127.0.0.1", s.addr)
		if code, body := get(t, c, "/"); code != 200 {
			t.Fatalf("request %d with %d idle connections held: %d %s", i, max, code, body)
		}
		c.Close()
	}
	if !isClosed(flood[0]) {
		t.Error("the longest idle connection is still open")
	}
	if isClosed(flood[max-1]) {
		t.Error("the youngest idle connection was closed before older ones")
	}
	if n := s.evicted.get("idle_at_cap"); n < 1 {
		t.Errorf("idle_at_cap evictions %d, want at least 1", n)
	}
	if n := s.evicted.get("refused"); n != 0 {
		t.Errorf("%d connections refused, want 0", n)
	}
}

// TestReadingConnectionsGiveWay: with no connection idle, those whose
// bodies trickle (Reading, not yet Admitted) give way at the cap, the
// oldest first, to connections that carry requests (issue 42, N1).
func TestReadingConnectionsGiveWay(t *testing.T) {
	const max = 4
	var reading atomic.Int64
	s := serve(t, Limits{Max: max, PerClient: max, IdleTimeout: 2 * time.Minute}, time.Now, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			Reading(r)
			reading.Add(1)
			_, _ = io.ReadAll(r.Body)
			Admitted(r)
		}
	}))
	var flood []net.Conn
	for i := range max {
		c := dialFrom(t, fmt.Sprintf("127.0.0.%d", 2+i), s.addr)
		fmt.Fprint(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
		flood = append(flood, c)
		// Each reading before the next opens, so that the order they
		// started reading in (which decides who gives way first) is
		// the order they were opened in; opened at once, their
		// handlers could start in any order on a busy machine.
		polltest.Eventually(t, 10*time.Second, "the flood to be reading", func() bool { return reading.Load() == int64(i+1) })
	}
	polltest.Eventually(t, 10*time.Second, "no connection idle", func() bool { return s.idle.v.Load() == 0 })
	for i := range 3 {
		c := dialFrom(t, "127.0.0.1", s.addr)
		if code, body := get(t, c, "/"); code != 200 {
			t.Fatalf("request %d with %d half-sent bodies held: %d %s", i, max, code, body)
		}
		c.Close()
	}
	if !isClosed(flood[0]) {
		t.Error("the oldest reading connection is still open")
	}
	if n := s.evicted.get("reading_at_cap"); n < 1 {
		t.Errorf("reading_at_cap evictions %d, want at least 1", n)
	}
}

// TestCapRefuses: a listener holds at most its cap of connections; with
// every one busy (no ConnState: none known idle), one more is answered
// 503 too_many_connections with Connection: close and counted, and a
// freed place is taken again.
func TestCapRefuses(t *testing.T) {
	const max = 4
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := &counts{n: map[string]int{}}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	srv.Listener.Close()
	srv.Listener = Listen(ln, Options{Limits: func() Limits { return Limits{Max: max, PerClient: max, IdleTimeout: time.Minute} },
		Now: time.Now, Open: &gauge{}, Idle: &gauge{}, Refused: refused, Evicted: refused.add})
	srv.Start()
	t.Cleanup(srv.Close)
	addr := ln.Addr().String()
	var held []net.Conn
	for i := range max {
		c := dialFrom(t, "127.0.0.1", addr)
		if code, _ := get(t, c, "/"); code != 200 {
			t.Fatalf("connection %d: %d", i, code)
		}
		held = append(held, c)
	}
	c := dialFrom(t, "127.0.0.1", addr)
	fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("over the cap: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || !resp.Close || !strings.Contains(string(b), `"code":"too_many_connections"`) {
		t.Fatalf("over the cap: %d close=%t %s", resp.StatusCode, resp.Close, b)
	}
	if n := refused.get("refused"); n != 1 {
		t.Errorf("refused counted %d, want 1", n)
	}
	held[0].Close()
	polltest.Eventually(t, 10*time.Second, "a freed place to be taken", func() bool {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return false
		}
		defer c.Close()
		fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		return err == nil && resp.StatusCode == 200
	})
}
