package router

import (
	"container/list"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard/switchyard/router/internal/wire"
)

// Connection bounds. A client that opens connections and sends nothing, or
// announces a body it never sends, must cost the gateway a bounded number
// of file descriptors for a bounded time, whoever it is: these bounds hold
// before any key is checked.

// bounded wraps a listener's handler. Every request that announces a body
// gets server.body_timeout as its read deadline before any handler runs,
// so a body that never comes cannot hold the connection (net/http discards
// an unread body after the handler returns, and that read has no deadline
// of its own); handlers that read the body lift the deadline once it is
// read. A request body in a content coding other than identity is refused
// with 415: the gateway reads bodies as JSON and never forwards a coding it
// did not decode. A chunked request closes its connection after the
// answer (see docs/config.md: net/http drops a Content-Length sent beside
// Transfer-Encoding before a handler can see it, and RFC 9112 asks a
// server to close such a connection).
func (g *Gateway) bounded(admin bool, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hasBody := r.ContentLength > 0 || len(r.TransferEncoding) > 0
		if hasBody {
			d := g.snap.Load().Config.Server.BodyTimeout.Std()
			_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(d))
		}
		if len(r.TransferEncoding) > 0 {
			w.Header().Set("Connection", "close")
		}
		if !admin && looped(r.Header, g.via) {
			g.refuseLoop(w, r)
			return
		}
		if ce, ok := bodyEncoding(r.Header); !ok {
			ep := wire.Chat
			if !admin {
				ep = apiOf(r)
			}
			wire.WriteErrorFor(w, ep, &wire.APIError{Status: http.StatusUnsupportedMediaType, Type: "invalid_request_error", Code: "unsupported_content_encoding",
				Message: "request bodies must not be encoded (Content-Encoding " + strconv.Quote(wire.Clip(ce)) + "); send plain JSON"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// DefaultMaxConnections is the client listener's connection cap for a
// process that may hold fdLimit open files: half of what is left after
// 256 descriptors of headroom (each proxied request holds a client and a
// replica connection; health checks, scrapes, the admin listener and logs
// need the rest), and at least 64.
func DefaultMaxConnections(fdLimit uint64) int {
	if fdLimit == 0 || fdLimit > 1<<30 {
		return 1 << 29
	}
	return max(64, int(fdLimit)/2-128)
}

// LimitServer caps the connections ln holds open at once for srv (see
// LimitListener) and installs srv.ConnState (calling any hook already
// there), which tells the listener which connections are idle: without it
// every connection counts as busy. serve and tests use it.
func (g *Gateway) LimitServer(srv *http.Server, ln net.Listener, listener string, fdLimit uint64) net.Listener {
	l := g.LimitListener(ln, listener, fdLimit).(*limitListener)
	l.tracked = true
	prev := srv.ConnState
	srv.ConnState = func(c net.Conn, st http.ConnState) {
		l.connState(c, st)
		if prev != nil {
			prev(c, st)
		}
	}
	return l
}

// LimitListener caps the connections ln holds open at once. Listener is
// "api" (server.max_connections, or DefaultMaxConnections(fdLimit) when 0)
// or "admin" (server.admin_max_connections). The caps are read from the
// running config at each accept, so a reload changes them.
//
// Connections are shared fairly (docs/config.md, "Connections"):
//   - at the cap, the connection idle the longest (a keep-alive connection
//     between requests, or one that has sent nothing yet) is closed to make
//     room, so a new connection is refused only when every connection is
//     carrying a request;
//   - one client address (the peer's; a trusted proxy is exempt) holds at
//     most server.max_connections_per_client; beyond it its own oldest idle
//     connection is closed, or the new one refused when none is idle;
//   - past half the cap, idle connections are closed sooner: the idle
//     timeout shrinks in proportion to the room left, down to a second.
//
// A refused connection is answered 503 with Connection: close and closed,
// and counted in switchyard_connections_refused_total; a closed idle one
// in switchyard_connections_evicted_total. Idleness is known only through
// the server's ConnState (LimitServer installs it).
func (g *Gateway) LimitListener(ln net.Listener, listener string, fdLimit uint64) net.Listener {
	l := &limitListener{Listener: ln, g: g, name: listener, fdLimit: fdLimit,
		refusing: make(chan struct{}, 64), clients: map[netip.Addr]int{}}
	l.gauge = g.metrics.connsOpen.WithLabelValues(listener)
	l.idleGauge = g.metrics.connsIdle.WithLabelValues(listener)
	return l
}

type limitListener struct {
	net.Listener
	g       *Gateway
	name    string
	fdLimit uint64
	open    atomic.Int64
	gaugeMu sync.Mutex
	gauge   interface{ Set(float64) }
	// refusing bounds the connections being refused at once (each is
	// answered and drained briefly); beyond it a connection is closed at
	// once.
	refusing chan struct{}

	// tracked: the server reports connection states (LimitServer); without
	// it no connection is known to be idle.
	tracked bool
	// mu guards the idle list and the per-client counts.
	mu sync.Mutex
	// idle holds the idle connections, the longest idle first; idleGauge
	// publishes its length (set under mu).
	idle      list.List
	idleGauge interface{ Set(float64) }
	// clients counts the open connections per client address.
	clients map[netip.Addr]int
}

// setGauge publishes the open count; under gaugeMu, so that a stale
// count never overwrites a newer one.
func (l *limitListener) setGauge() {
	l.gaugeMu.Lock()
	l.gauge.Set(float64(l.open.Load()))
	l.gaugeMu.Unlock()
}

func (l *limitListener) max() int64 {
	sc := &l.g.snap.Load().Config.Server
	if l.name == "admin" {
		return int64(sc.AdminMaxConnections)
	}
	if sc.MaxConnections > 0 {
		return int64(sc.MaxConnections)
	}
	return int64(DefaultMaxConnections(l.fdLimit))
}

// perClient is the cap of connections from one client address.
func (l *limitListener) perClient(cap int64) int64 {
	sc := &l.g.snap.Load().Config.Server
	if l.name != "admin" && sc.MaxConnectionsPerClient > 0 {
		return int64(sc.MaxConnectionsPerClient)
	}
	return DefaultMaxConnectionsPerClient(cap)
}

// DefaultMaxConnectionsPerClient is the per-client-address cap for a
// listener capped at cap: a quarter of it, at least 16 (and never above
// the cap).
func DefaultMaxConnectionsPerClient(cap int64) int64 {
	return min(cap, max(16, cap/4))
}

// idleTimeout is how long a connection may stay idle with open connections
// of cap: server.idle_timeout up to half the cap, then in proportion to
// the room left (a quarter of it at 7/8 full), at least a second.
func idleTimeout(base time.Duration, open, cap int64) time.Duration {
	if cap <= 0 || open*2 <= cap {
		return base
	}
	left := max(0, cap-open)
	return max(time.Second, min(base, time.Duration(float64(base)*2*float64(left)/float64(cap))))
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if lc := l.admit(c); lc != nil {
			l.setGauge()
			return lc, nil
		}
	}
}

// admit counts c in, making room by closing idle connections when needed,
// or refuses it (nil).
func (l *limitListener) admit(c net.Conn) *limitConn {
	sc := &l.g.snap.Load().Config.Server
	cap := l.max()
	addr := peerAddr(c.RemoteAddr().String())
	exempt := !addr.IsValid() || isTrusted(addr, sc.Trusted)
	now := l.g.opts.Now()
	var evict []*limitConn
	l.mu.Lock()
	// Idle connections past the idle timeout for the current pressure.
	timeout := idleTimeout(sc.IdleTimeout.Std(), l.open.Load()+1, cap)
	for e := l.idle.Front(); e != nil; {
		ic := e.Value.(*limitConn)
		if now.Sub(ic.idleSince) < timeout {
			break
		}
		e = e.Next()
		evict = append(evict, l.release(ic))
		l.count("idle_timeout")
	}
	var answer []byte
	if per := l.perClient(cap); !exempt && per < cap && int64(l.clients[addr]) >= per {
		// This client's own oldest idle connection makes room.
		answer = refusalPerClient
		for e := l.idle.Front(); e != nil; e = e.Next() {
			if ic := e.Value.(*limitConn); ic.addr == addr {
				evict = append(evict, l.release(ic))
				l.count("per_client")
				answer = nil
				break
			}
		}
	}
	if answer == nil && l.open.Load() >= cap {
		answer = refusal
		if e := l.idle.Front(); e != nil {
			evict = append(evict, l.release(e.Value.(*limitConn)))
			l.count("idle_at_cap")
			answer = nil
		}
	}
	var lc *limitConn
	if answer == nil {
		lc = &limitConn{Conn: c, l: l, addr: addr, counted: !exempt, idleSince: now}
		l.open.Add(1)
		if lc.counted {
			l.clients[addr]++
		}
		if l.tracked {
			// A new connection has sent nothing: idle (the youngest)
			// until its first request arrives.
			lc.elem = l.idle.PushBack(lc)
		}
	}
	l.idleGauge.Set(float64(l.idle.Len()))
	l.mu.Unlock()
	for _, ic := range evict {
		ic.Conn.Close()
	}
	if answer != nil {
		l.setGauge()
		l.g.metrics.connsRefused.WithLabelValues(l.name).Inc()
		l.refuse(c, answer)
	}
	return lc
}

// release gives up c's place: off the idle list, out of the counts. It
// returns c, to be closed once l.mu is released. l.mu is held.
func (l *limitListener) release(c *limitConn) *limitConn {
	if c.gone {
		return c
	}
	c.gone = true
	if c.elem != nil {
		l.idle.Remove(c.elem)
		c.elem = nil
	}
	if c.counted {
		if l.clients[c.addr]--; l.clients[c.addr] <= 0 {
			delete(l.clients, c.addr)
		}
	}
	l.open.Add(-1)
	return c
}

func (l *limitListener) count(reason string) {
	l.g.metrics.connsEvicted.WithLabelValues(l.name, reason).Inc()
}

// connState follows the server's view of each connection.
func (l *limitListener) connState(nc net.Conn, st http.ConnState) {
	c, ok := nc.(*limitConn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.gone {
		return
	}
	switch st {
	case http.StateIdle:
		if c.elem != nil {
			l.idle.Remove(c.elem)
		}
		c.idleSince = l.g.opts.Now()
		c.elem = l.idle.PushBack(c)
	case http.StateActive, http.StateHijacked, http.StateClosed:
		if c.elem != nil {
			l.idle.Remove(c.elem)
			c.elem = nil
		}
	}
	l.idleGauge.Set(float64(l.idle.Len()))
}

// refusal is the whole answer to a connection over the cap.
var refusal = refusalFor("the gateway is at its connection limit (server.max_connections) and every connection carries a request; retry shortly", "too_many_connections")

// refusalPerClient is the answer to a client address over its own cap.
var refusalPerClient = refusalFor("this client address holds as many connections as one client may (server.max_connections_per_client), each carrying a request; reuse them", "too_many_connections_per_client")

func refusalFor(msg, code string) []byte {
	body := `{"error":{"message":"` + msg + `","type":"server_error","param":null,"code":"` + code + `"}}`
	return []byte("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + body)
}

// refuse answers c with 503 and closes it. The request is not read: the
// answer is written, the write side shut, and what the client sent drained
// for up to a second so that its kernel does not reset the connection
// before it reads the answer.
func (l *limitListener) refuse(c net.Conn, answer []byte) {
	select {
	case l.refusing <- struct{}{}:
	default:
		c.Close()
		return
	}
	go func() {
		defer func() { <-l.refusing }()
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(time.Second))
		if _, err := c.Write(answer); err != nil {
			return
		}
		if cw, ok := c.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(c, 64<<10))
	}()
}

type limitConn struct {
	net.Conn
	l *limitListener
	// addr is the client address; counted: it counts in l.clients.
	addr    netip.Addr
	counted bool
	// Under l.mu: the place in l.idle (nil while busy), since when the
	// connection is idle, and gone once its place was given up.
	elem      *list.Element
	idleSince time.Time
	gone      bool
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	l := c.l
	l.mu.Lock()
	l.release(c)
	l.idleGauge.Set(float64(l.idle.Len()))
	l.mu.Unlock()
	l.setGauge()
	return err
}

// bodyEncoding reads a request's Content-Encoding: ok when the body is
// plain (no header, or identity). A second header line is refused even when
// both say identity: a server and the replica behind it may each read a
// different line (identity, then gzip), so the only safe reading of two is
// none. ce is what to name in the refusal.
func bodyEncoding(h http.Header) (ce string, ok bool) {
	vs := h.Values("Content-Encoding")
	switch {
	case len(vs) == 0:
		return "", true
	case len(vs) > 1:
		return strings.Join(vs, ", "), false
	}
	for c := range strings.SplitSeq(vs[0], ",") {
		if c = strings.TrimSpace(c); c != "" && !strings.EqualFold(c, "identity") {
			return vs[0], false
		}
	}
	return vs[0], true
}
