package router

import (
	"io"
	"net"
	"net/http"
	"strconv"
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
		if ce := r.Header.Get("Content-Encoding"); ce != "" && ce != "identity" {
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

// LimitListener caps the connections ln holds open at once. Listener is
// "api" (server.max_connections, or DefaultMaxConnections(fdLimit) when 0)
// or "admin" (server.admin_max_connections). The caps are read from the
// running config at each accept, so a reload changes them. A connection
// over the cap is answered 503 with Connection: close and closed, and
// counted in switchyard_connections_refused_total.
func (g *Gateway) LimitListener(ln net.Listener, listener string, fdLimit uint64) net.Listener {
	l := &limitListener{Listener: ln, g: g, name: listener, fdLimit: fdLimit,
		refusing: make(chan struct{}, 64)}
	l.gauge = g.metrics.connsOpen.WithLabelValues(listener)
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

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if n := l.open.Add(1); n > l.max() {
			l.open.Add(-1)
			l.g.metrics.connsRefused.WithLabelValues(l.name).Inc()
			l.refuse(c)
			continue
		}
		l.setGauge()
		return &limitConn{Conn: c, l: l}, nil
	}
}

// refusal is the whole answer to a connection over the cap.
var refusal = func() []byte {
	body := `{"error":{"message":"the gateway is at its connection limit (server.max_connections); retry shortly","type":"server_error","param":null,"code":"too_many_connections"}}`
	return []byte("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + body)
}()

// refuse answers c with 503 and closes it. The request is not read: the
// answer is written, the write side shut, and what the client sent drained
// for up to a second so that its kernel does not reset the connection
// before it reads the answer.
func (l *limitListener) refuse(c net.Conn) {
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
		if _, err := c.Write(refusal); err != nil {
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
	l    *limitListener
	once sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.open.Add(-1)
		c.l.setGauge()
	})
	return err
}
