package router

import (
	"net/http"
	"net/netip"

	"github.com/switchyard/switchyard/router/internal/conns"
)

// holdKeySlot counts x's request against its key's max_inflight, or
// refuses it (429) when the key has that many requests open already. The
// slot is given back by finish.
func (x *exchange) holdKeySlot() error {
	if x.keySlot {
		return nil
	}
	held, err := x.key.Hold()
	x.keySlot = held
	return err
}

// releaseKeySlot gives back the slot holdKeySlot took.
func (x *exchange) releaseKeySlot() {
	if x.keySlot {
		x.keySlot = false
		x.key.Release()
	}
}

// tenantOf is who a request is for fair admission (pools.Request.Tenant):
// its API key's name, or, without a key, its client address ("addr " and
// the address; behind a trusted proxy the one it forwards), so that
// keyless clients are one tenant each rather than one between them. Key
// names cannot start with "addr " or "(" (reserved, see policy).
func tenantOf(x *exchange, r *http.Request, trusted []netip.Prefix) (string, int) {
	if x.key != nil {
		return x.key.Name, x.key.Weight
	}
	return "addr " + conns.ClientAddr(r, trusted), 1
}
