package router

import (
	"fmt"
	"net/http"
	"net/netip"
	"sync/atomic"

	"github.com/switchyard/switchyard/router/internal/conns"
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
	return "addr " + conns.ClientAddr(r, trusted), 1
}
