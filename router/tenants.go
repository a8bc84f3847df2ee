package router

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
)

// keySlots counts an API key's requests in flight across every pool, for
// api_keys[].max_inflight. One counter per key name, kept across reloads
// (build hands it on), so a reload that lowers the cap sees the requests
// already open.
type keySlots struct{ n atomic.Int64 }

// holdKeySlot counts x's request against its key's max_inflight, or
// refuses it (429) when the key has that many requests open already. The
// slot is given back by finish.
func (x *exchange) holdKeySlot() error {
	k := x.key
	if k == nil || k.maxInflight <= 0 || x.keySlot {
		return nil
	}
	if n := k.slots.n.Add(1); n > int64(k.maxInflight) {
		k.slots.n.Add(-1)
		return fmt.Errorf("%w: API key %q has %d requests in flight (its max_inflight)", errRateLimited, k.name, k.maxInflight)
	}
	x.keySlot = true
	return nil
}

// releaseKeySlot gives back the slot holdKeySlot took.
func (x *exchange) releaseKeySlot() {
	if x.keySlot {
		x.keySlot = false
		x.key.slots.n.Add(-1)
	}
}

// tenantOf is who a request is for fair admission (pools.Request.Tenant):
// its API key's name, or, without a key, its client address ("addr " and
// the address; behind a trusted proxy the one it forwards), so that
// keyless clients are one tenant each rather than one between them. Key
// names cannot start with "addr " or "(" (reserved, see policy).
func tenantOf(x *exchange, r *http.Request, trusted []netip.Prefix) (string, int) {
	if x.key != nil {
		return x.key.name, x.key.weight
	}
	return "addr " + clientAddr(r, trusted), 1
}

// clientAddr is the address of the client that sent r: the peer's, or, when
// the peer is a trusted proxy (server.trusted_proxies), the last address in
// X-Forwarded-For that is not itself a trusted proxy (the proxies append
// on the right, so what lies left of the first untrusted hop is the
// client's claim and may be forged). An unreadable hop ends the walk at
// the last trusted one.
func clientAddr(r *http.Request, trusted []netip.Prefix) string {
	peer := peerAddr(r.RemoteAddr)
	if !peer.IsValid() {
		return r.RemoteAddr
	}
	if !isTrusted(peer, trusted) {
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
			if !isTrusted(addr, trusted) {
				return addr.String()
			}
		}
	}
	return addr.String()
}

// peerAddr is the IP of a RemoteAddr ("host:port"); invalid when it is not
// one.
func peerAddr(remote string) netip.Addr {
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

func isTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
