package conns

import (
	"container/list"
	"context"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Limits are a listener's bounds, read from the running config at each
// accept so that a reload changes them.
type Limits struct {
	// Max is the cap of open connections; PerClient that of one client
	// address (a trusted proxy's are not counted).
	Max, PerClient int64
	// IdleTimeout is server.idle_timeout, shrunk under pressure.
	IdleTimeout time.Duration
	Trusted     []netip.Prefix
}

// Options are a Listener's fixed parts.
type Options struct {
	Limits func() Limits
	Now    func() time.Time
	// Open and Idle publish the open and idle counts; Refused counts the
	// connections refused, Evicted the idle ones closed (by reason).
	Open, Idle interface{ Set(float64) }
	Refused    interface{ Inc() }
	Evicted    func(reason string)
}

// Listen bounds the connections ln holds open at once (see Listener).
func Listen(ln net.Listener, o Options) *Listener {
	return &Listener{Listener: ln, opts: o, refusing: make(chan struct{}, 64), clients: map[netip.Addr]int{}}
}

// Track installs srv.ConnState (calling any hook already there), which
// tells the listener which connections are idle: without it every
// connection counts as busy.
func (l *Listener) Track(srv *http.Server) {
	l.tracked = true
	prevCtx := srv.ConnContext
	srv.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		if prevCtx != nil {
			ctx = prevCtx(ctx, c)
		}
		if lc, ok := c.(*limitConn); ok {
			ctx = context.WithValue(ctx, connKey{}, lc)
		}
		return ctx
	}
	prev := srv.ConnState
	srv.ConnState = func(c net.Conn, st http.ConnState) {
		l.connState(c, st)
		if prev != nil {
			prev(c, st)
		}
	}
}

// Listener shares a listener's connections fairly: at the cap the
// connection idle the longest is closed to make room, one client address
// holds at most its own cap (its own oldest idle connection closed first),
// and past half the cap idle connections are closed sooner. A refused
// connection is answered 503 with Connection: close and closed.
type Listener struct {
	net.Listener
	opts    Options
	open    atomic.Int64
	gaugeMu sync.Mutex
	// refusing bounds the connections being refused at once (each is
	// answered and drained briefly); beyond it a connection is closed at
	// once.
	refusing chan struct{}

	// tracked: the server reports connection states (LimitServer); without
	// it no connection is known to be idle.
	tracked bool
	// mu guards the idle list and the per-client counts.
	mu sync.Mutex
	// idle holds the idle connections, the longest idle first (its
	// length published under mu).
	idle list.List
	// reading holds the connections whose request's body is still
	// arriving (not yet admitted), the oldest first: at the cap they give
	// way after the idle ones.
	reading list.List
	// clients counts the open connections per client address.
	clients map[netip.Addr]int
}

// setGauge publishes the open count; under gaugeMu, so that a stale
// count never overwrites a newer one.
func (l *Listener) setGauge() {
	l.gaugeMu.Lock()
	l.opts.Open.Set(float64(l.open.Load()))
	l.gaugeMu.Unlock()
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

func (l *Listener) Accept() (net.Conn, error) {
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
func (l *Listener) admit(c net.Conn) *limitConn {
	lim := l.opts.Limits()
	cap := lim.Max
	addr := PeerAddr(c.RemoteAddr().String())
	exempt := !addr.IsValid() || IsTrusted(addr, lim.Trusted)
	now := l.opts.Now()
	var evict []*limitConn
	l.mu.Lock()
	// Idle connections past the idle timeout for the current pressure.
	timeout := idleTimeout(lim.IdleTimeout, l.open.Load()+1, cap)
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
	if per := lim.PerClient; !exempt && per < cap && int64(l.clients[addr]) >= per {
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
	if answer != nil { // the client is at its cap with none of its own idle
		// ... else its own oldest connection still reading a body.
		for e := l.reading.Front(); e != nil; e = e.Next() {
			if rc := e.Value.(*limitConn); rc.addr == addr {
				evict = append(evict, l.release(rc))
				l.count("per_client_reading")
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
		} else if e := l.reading.Front(); e != nil {
			// No connection is idle: the one whose body has been
			// arriving the longest carries no admitted request yet.
			evict = append(evict, l.release(e.Value.(*limitConn)))
			l.count("reading_at_cap")
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
	l.opts.Idle.Set(float64(l.idle.Len()))
	l.mu.Unlock()
	for _, ic := range evict {
		ic.Conn.Close()
	}
	if answer != nil {
		l.setGauge()
		l.opts.Refused.Inc()
		l.refuse(c, answer)
	}
	return lc
}

// release gives up c's place: off the idle list, out of the counts. It
// returns c, to be closed once l.mu is released. l.mu is held.
func (l *Listener) release(c *limitConn) *limitConn {
	if c.gone {
		return c
	}
	c.gone = true
	if c.elem != nil {
		l.idle.Remove(c.elem)
		c.elem = nil
	}
	if c.readElem != nil {
		l.reading.Remove(c.readElem)
		c.readElem = nil
	}
	if c.counted {
		if l.clients[c.addr]--; l.clients[c.addr] <= 0 {
			delete(l.clients, c.addr)
		}
	}
	l.open.Add(-1)
	return c
}

func (l *Listener) count(reason string) { l.opts.Evicted(reason) }

// connState follows the server's view of each connection.
func (l *Listener) connState(nc net.Conn, st http.ConnState) {
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
		if c.readElem != nil {
			l.reading.Remove(c.readElem)
			c.readElem = nil
		}
		if c.elem != nil {
			l.idle.Remove(c.elem)
		}
		c.idleSince = l.opts.Now()
		c.elem = l.idle.PushBack(c)
	case http.StateActive, http.StateHijacked, http.StateClosed:
		if c.elem != nil {
			l.idle.Remove(c.elem)
			c.elem = nil
		}
	}
	l.opts.Idle.Set(float64(l.idle.Len()))
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
func (l *Listener) refuse(c net.Conn, answer []byte) {
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
	l *Listener
	// addr is the client address; counted: it counts in l.clients.
	addr    netip.Addr
	counted bool
	// Under l.mu: the place in l.idle (nil while busy), since when the
	// connection is idle, and gone once its place was given up.
	elem      *list.Element
	idleSince time.Time
	gone      bool
	// readElem is the place in l.reading while the request's body is
	// arriving (nil otherwise).
	readElem *list.Element
}

type connKey struct{}

// Reading marks the connection of r (served by a tracked listener) as
// reading its request's body: evictable at the cap after the idle ones,
// until Admitted.
func Reading(r *http.Request) {
	c, ok := r.Context().Value(connKey{}).(*limitConn)
	if !ok {
		return
	}
	l := c.l
	l.mu.Lock()
	if !c.gone && c.readElem == nil {
		c.readElem = l.reading.PushBack(c)
	}
	l.mu.Unlock()
}

// Admitted says r's body was read: its connection carries an admitted
// request and is no longer evictable. Idempotent.
func Admitted(r *http.Request) {
	c, ok := r.Context().Value(connKey{}).(*limitConn)
	if !ok {
		return
	}
	l := c.l
	l.mu.Lock()
	if c.readElem != nil {
		l.reading.Remove(c.readElem)
		c.readElem = nil
	}
	l.mu.Unlock()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	l := c.l
	l.mu.Lock()
	l.release(c)
	l.opts.Idle.Set(float64(l.idle.Len()))
	l.mu.Unlock()
	l.setGauge()
	return err
}

// PeerAddr is the IP of a RemoteAddr ("host:port"); invalid when it is not
// one.
func PeerAddr(remote string) netip.Addr {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}
	}
	return a.Unmap()
}

func IsTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
