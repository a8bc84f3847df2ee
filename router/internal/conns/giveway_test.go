package conns

import (
	"fmt"
	"io"
	"net"
	"net/http"
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
	}
	polltest.Eventually(t, 10*time.Second, "the flood to be reading", func() bool { return reading.Load() == max && s.idle.v.Load() == 0 })
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
