package conns

import (
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
)

// Own is one of the gateway's own listeners: its config key and
// address.
type Own struct{ Key, Addr string }

// Listeners are the gateway's own listeners, server.listen and
// server.admin_listen, at listen and admin.
func Listeners(listen, admin string) []Own {
	return []Own{{Key: "server.listen", Addr: listen}, {Key: "server.admin_listen", Addr: admin}}
}

// SelfAddr reports whether hostport ("host:port" of a replica) is one of
// the gateway's own listeners (ls: server.listen, server.admin_listen): the
// same port on the listener's address, or, for a wildcard listener, on
// any local address (loopback, the machine's interfaces). local lists the
// machine's interface addresses. Host names other than localhost are not
// resolved here; the Via guard catches a loop through them.
func SelfAddr(ls []Own, local []netip.Addr, hostport string) (string, bool) {
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
	for _, l := range ls {
		lh, lp, err := net.SplitHostPort(l.Addr)
		if err != nil || lp != port {
			continue
		}
		la, err := netip.ParseAddr(lh)
		switch {
		case lh == "" || err == nil && la.IsUnspecified():
			if a.IsLoopback() || a.IsUnspecified() || containsAddr(local, a) {
				return l.Key + " " + l.Addr, true
			}
		case err == nil && (la.Unmap() == a || la.IsLoopback() && a.IsLoopback() && strings.EqualFold(host, "localhost")):
			return l.Key + " " + l.Addr, true
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

// LocalAddrs lists the machine's interface addresses.
func LocalAddrs() []netip.Addr {
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

// HostPort adds the scheme's default port to a URL host without one.
func HostPort(scheme, host string) string {
	if _, _, err := net.SplitHostPort(host); err == nil {
		return host
	}
	port := 80
	if scheme == "https" {
		port = 443
	}
	return net.JoinHostPort(strings.Trim(host, "[]"), strconv.Itoa(port))
}

// ClientAddr is the address of the client that sent r: the peer's, or, when
// the peer is a trusted proxy (server.trusted_proxies), the last address in
// X-Forwarded-For that is not itself a trusted proxy (the proxies append
// on the right, so what lies left of the first untrusted hop is the
// client's claim and may be forged). An unreadable hop ends the walk at
// the last trusted one.
func ClientAddr(r *http.Request, trusted []netip.Prefix) string {
	peer := PeerAddr(r.RemoteAddr)
	if !peer.IsValid() {
		return r.RemoteAddr
	}
	if !IsTrusted(peer, trusted) {
		return peer.String()
	}
	addr := peer
	hops := r.Header.Values("X-Forwarded-For")
	for i := len(hops) - 1; i >= 0; i-- {
		parts := strings.Split(hops[i], ",")
		for j := len(parts) - 1; j >= 0; j-- {
			a, err := netip.ParseAddr(strings.TrimSpace(parts[j]))
			if err != nil {
				return addr.String()
			}
			addr = a.Unmap()
			if !IsTrusted(addr, trusted) {
				return addr.String()
			}
		}
	}
	return addr.String()
}
