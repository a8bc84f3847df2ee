package router

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"

	"github.com/switchyard/switchyard/policy"
	"github.com/switchyard/switchyard/router/internal/upstream"
	"github.com/switchyard/switchyard/router/internal/wire"
)

// Request loops. A replica address that names the gateway itself (a
// listed URL, an SRV answer, a Service label mistake) would send each
// request back in, again and again, until connections or memory run out.
// Two guards: such an address is refused when it is configured or
// discovered (selfAddr), and every forwarded request carries a Via entry
// naming this gateway process (RFC 9110 §7.6.3), so one that comes back
// marked is answered 508 instead of being forwarded again (looped).

// newVia is this process's Via entry: a pseudonym no other process shares.
func newVia() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "1.1 switchyard-" + hex.EncodeToString(b[:])
}

// addVia appends this gateway's entry to the outbound request's Via
// (after those the client's request carried).
func addVia(h http.Header, via string) {
	if prior := h.Values("Via"); len(prior) > 0 {
		h.Set("Via", strings.Join(prior, ", ")+", "+via)
		return
	}
	h["Via"] = []string{via}
}

// looped reports whether h's Via names this gateway (via is its own
// entry): the request was forwarded by this process and came back.
func looped(h http.Header, via string) bool {
	_, self, _ := strings.Cut(via, " ")
	for _, v := range h.Values("Via") {
		for entry := range strings.SplitSeq(v, ",") {
			if viaReceivedBy(entry) == self {
				return true
			}
		}
	}
	return false
}

// viaReceivedBy is the received-by part of one Via entry
// ("[protocol-name/]protocol-version received-by [comment]"); "" when it
// has none.
func viaReceivedBy(entry string) string {
	f := strings.Fields(entry)
	if len(f) < 2 {
		return ""
	}
	return f[1]
}

// refuseLoop answers a request that came back to the gateway that sent it.
func (g *Gateway) refuseLoop(w http.ResponseWriter, r *http.Request) {
	g.metrics.loops.Inc()
	g.log.Warn("request loop: a request this gateway forwarded came back to it; a replica address names the gateway itself",
		"path", wire.Clip(r.URL.Path), "request_id", wire.Clip(r.Header.Get(upstream.HeaderRequestID)))
	wire.WriteErrorFor(w, apiOf(r), &wire.APIError{Status: http.StatusLoopDetected, Type: "server_error", Code: "loop_detected",
		Message: "this request was already forwarded by this gateway and came back to it: a replica address of the pool names the gateway itself; fix the pool's replicas or discovery"})
}

// selfAddr reports whether hostport ("host:port" of a replica) is one of
// the gateway's own listeners (server.listen, server.admin_listen): the
// same port on the listener's address, or, for a wildcard listener, on
// any local address (loopback, the machine's interfaces). local lists the
// machine's interface addresses. Host names other than localhost are not
// resolved here; the Via guard catches a loop through them.
func selfAddr(sc *policy.Server, local []netip.Addr, hostport string) (string, bool) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return "", false
	}
	var a netip.Addr
	if strings.EqualFold(host, "localhost") {
		a = netip.MustParseAddr("127.0.0.1")
	} else if a, err = netip.ParseAddr(host); err != nil {
		return "", false
	}
	a = a.Unmap()
	for _, l := range []struct{ key, addr string }{{"server.listen", sc.Listen}, {"server.admin_listen", sc.AdminListen}} {
		lh, lp, err := net.SplitHostPort(l.addr)
		if err != nil || lp != port {
			continue
		}
		la, err := netip.ParseAddr(lh)
		switch {
		case lh == "" || err == nil && la.IsUnspecified():
			if a.IsLoopback() || a.IsUnspecified() || containsAddr(local, a) {
				return l.key + " " + l.addr, true
			}
		case err == nil && (la.Unmap() == a || la.IsLoopback() && a.IsLoopback() && strings.EqualFold(host, "localhost")):
			return l.key + " " + l.addr, true
		}
	}
	return "", false
}

func containsAddr(as []netip.Addr, a netip.Addr) bool {
	for _, x := range as {
		if x == a {
			return true
		}
	}
	return false
}

// localAddrs lists the machine's interface addresses.
func localAddrs() []netip.Addr {
	ifs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, ia := range ifs {
		if p, err := netip.ParsePrefix(ia.String()); err == nil {
			out = append(out, p.Addr().Unmap())
		}
	}
	return out
}

// checkSelfReplicas refuses a config whose listed replicas include the
// gateway's own listener, naming the URL's place in the file.
func checkSelfReplicas(cfg *policy.Config, local []netip.Addr) error {
	var errs []string
	for _, pc := range cfg.Pools {
		for i, r := range pc.Replicas {
			if r.Parsed == nil {
				continue
			}
			if which, self := selfAddr(&cfg.Server, local, hostPort(r.Parsed.Scheme, r.Parsed.Host)); self {
				line, col := cfg.Position("pools", pc.Name, "replicas", i, "url")
				errs = append(errs, fmt.Sprintf("%s:%d:%d: pool %q: replica %q: url %s is this gateway's own listener (%s): every request sent there would loop",
					cfg.File, line, col, pc.Name, r.Name, r.Parsed.Redacted(), which))
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return nil
}

// hostPort adds the scheme's default port to a URL host without one.
func hostPort(scheme, host string) string {
	if _, _, err := net.SplitHostPort(host); err == nil {
		return host
	}
	port := 80
	if scheme == "https" {
		port = 443
	}
	return net.JoinHostPort(strings.Trim(host, "[]"), strconv.Itoa(port))
}

// refuseSelf is a discovery's Refuse: an answer that names the gateway's
// own listener is logged and dropped (the rest of the answer is used).
func (g *Gateway) refuseSelf(pool string, sc *policy.Server) func(string) bool {
	return func(addr string) bool {
		which, self := selfAddr(sc, g.local, addr)
		if self {
			g.metrics.discoverySelf.WithLabelValues(pool).Inc()
			g.log.Error("discovery: an answer names this gateway's own listener; the address is refused (a request sent there would loop)",
				"pool", pool, "addr", addr, "listener", which)
		}
		return self
	}
}
