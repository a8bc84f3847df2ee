package router

import (
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/switchyard/switchyard/router/internal/upstream"

	"github.com/switchyard/switchyard/router/internal/conns"
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
			// Until its body is read (readBody), the request is not
			// admitted: its connection gives way at the cap after the idle
			// ones, and an answer given before the body is read (401, 403,
			// 404, 413, 415) closes the connection instead of draining
			// what the client still trickles in.
			conns.Reading(r)
			w.Header().Set("Connection", "close")
			body := &seenBody{ReadCloser: r.Body}
			r.Body = body
			defer func() {
				if !body.eof {
					// Answered before its body was read: the server
					// would now drain what the client still trickles in
					// (up to 256 KiB, for body_timeout) before closing.
					// It reads nothing more: the connection closes now.
					_ = http.NewResponseController(w).SetReadDeadline(time.Now())
				}
			}()
		}
		if len(r.TransferEncoding) > 0 {
			w.Header().Set("Connection", "close")
		}
		if !admin && upstream.Looped(r.Header, g.via) {
			// A Via entry is the client's to forge: only an authenticated
			// request is answered as a loop (and logged, and counted); any
			// other goes on to be refused as unauthenticated.
			if _, err := g.snap.Load().keys.Authenticate(r); err == nil {
				g.refuseLoop(w, r)
				return
			}
		}
		if ce, ok := wire.BodyEncoding(r.Header); !ok {
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

// seenBody is a request body that says whether it was read to its end.
type seenBody struct {
	io.ReadCloser
	eof bool
}

func (b *seenBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
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
	l := g.LimitListener(ln, listener, fdLimit).(*conns.Listener)
	l.Track(srv)
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
	limits := func() conns.Limits {
		sc := &g.snap.Load().Config.Server
		l := conns.Limits{IdleTimeout: sc.IdleTimeout.Std(), Trusted: sc.Trusted}
		switch {
		case listener == "admin":
			l.Max = int64(sc.AdminMaxConnections)
		case sc.MaxConnections > 0:
			l.Max = int64(sc.MaxConnections)
		default:
			l.Max = int64(DefaultMaxConnections(fdLimit))
		}
		l.PerClient = DefaultMaxConnectionsPerClient(l.Max)
		if listener != "admin" && sc.MaxConnectionsPerClient > 0 {
			l.PerClient = int64(sc.MaxConnectionsPerClient)
		}
		return l
	}
	return conns.Listen(ln, conns.Options{Limits: limits, Now: g.opts.Now,
		Open: g.metrics.ConnsOpen.WithLabelValues(listener), Idle: g.metrics.ConnsIdle.WithLabelValues(listener),
		Refused: g.metrics.ConnsRefused.WithLabelValues(listener),
		Evicted: func(reason string) { g.metrics.ConnsEvicted.WithLabelValues(listener, reason).Inc() }})
}

// DefaultMaxConnectionsPerClient is the per-client-address cap for a
// listener capped at cap: a quarter of it, at least 16 (and never above
// the cap).
func DefaultMaxConnectionsPerClient(cap int64) int64 {
	return min(cap, max(16, cap/4))
}
