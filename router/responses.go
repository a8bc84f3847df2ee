package router

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"

	"github.com/switchyard/switchyard/router/internal/wire"

	"github.com/tidwall/sjson"

	"github.com/switchyard/switchyard/policy/routing"
	"github.com/switchyard/switchyard/pools"
)

// replicaTag is 12 hex digits of a digest of the replica's URL.
func replicaTag(rep *pools.Replica) string {
	sum := sha256.Sum256([]byte(rep.URL().String()))
	return hex.EncodeToString(sum[:6])
}

// idsFor is the signer of the exchange's key.
func (x *exchange) ids() wire.ResponseIDs {
	i := wire.ResponseIDs{Secret: x.snap.idSecret}
	if x.key != nil {
		i.Key = x.key.Name
	}
	return i
}

// errResponseNotFound is a 404 in the Responses API's error shape; param
// names where the id came from.
func errResponseNotFound(id, param, why string) error {
	return &wire.APIError{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "response_not_found", Param: param,
		Message: fmt.Sprintf("response %q was not found: %s", wire.Clip(id), why)}
}

// reaches reports whether requests for the model target t may be sent to
// pool: its own pool, or, for a policy-routed name, a pool the routes
// name (target, split, fallback, spill).
func (s *Snapshot) reaches(t target, pool string) bool {
	if !t.policy {
		return t.pool != nil && t.pool.Name == pool
	}
	return s.routed(pool)
}

// pinToStored sends the exchange to the replica that stored response id,
// with the replica's own id restored in the body.
func (x *exchange) pinToStored(id, param string) error {
	tag, orig, ok := x.ids().Decode(id)
	if !ok {
		// Another key's id is as unknown as a made-up one: nothing tells
		// the two apart.
		return errResponseNotFound(id, param, "it was not made through this gateway with this API key")
	}
	// A server listed in several pools is pinned in one the requested
	// model reaches when there is one (see the handler's check).
	var found *pools.Replica
	var foundPool *poolState
	for _, ps := range x.snap.poolOrder {
		for _, rep := range ps.Replicas() {
			if replicaTag(rep) != tag {
				continue
			}
			if found == nil || x.reachable(ps.Name) && !x.reachable(foundPool.Name) {
				found, foundPool = rep, ps
			}
		}
	}
	if found == nil {
		return errResponseNotFound(id, param, "the replica that stored it is no longer configured")
	}
	x.stored.pinned = found
	x.decision = routing.Decision{Route: "stored", Pools: []string{foundPool.Name}}
	if x.info.PreviousResponse != "" {
		b, err := sjson.SetBytes(x.body, "previous_response_id", orig)
		if err != nil {
			return wire.BadRequest("previous_response_id", err.Error())
		}
		x.body = b
	} else {
		x.stored.id = orig
	}
	return nil
}

// reachable reports whether the exchange's model may be sent to pool (any
// pool for a call on a stored response, which names no model).
func (x *exchange) reachable(pool string) bool {
	if x.info == nil || x.info.Model == "" {
		return true
	}
	tgt, ok := x.snap.resolve(x.info.Model)
	return ok && x.snap.reaches(tgt, pool)
}

// routed reports whether the routes can send a request to pool.
func (s *Snapshot) routed(pool string) bool {
	for _, r := range s.Config.Routes {
		if r.To == pool || slices.Contains(r.Fallback, pool) || (r.Spill != nil && r.Spill.To == pool) {
			return true
		}
		for _, e := range r.Split {
			if e.Pool == pool {
				return true
			}
		}
	}
	return false
}
