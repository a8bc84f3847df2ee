package router

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/go-chi/chi/v5"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/switchyard/switchyard/policy"
	"github.com/switchyard/switchyard/pools"
)

// Stored responses. vLLM keeps a stored response (store: true, the
// Responses API's default) in the memory of the server that made it, so a
// follow-up naming it (previous_response_id, GET, DELETE, cancel) must
// reach that server. Switchyard keeps no table: the response id a client
// sees names the replica and the API key, as
//
//	storedPrefix + tag + mac + "_" + the replica's own id
//
// where tag is 12 hex digits derived from the replica's URL and mac 16 hex
// digits of an HMAC-SHA256, under the deployment's secret, of the key's
// name, the tag and the replica's id. Every instance with the same config
// checks it with no shared store. An id is the gateway's only when its mac
// verifies for the key that presents it: another key's id, a forged one
// and a replica's own id that happens to look alike are all unknown (404).
const storedPrefix = "resp_sy"

// replicaTag is 12 hex digits of a digest of the replica's URL.
func replicaTag(rep *pools.Replica) string {
	sum := sha256.Sum256([]byte(rep.URL().String()))
	return hex.EncodeToString(sum[:6])
}

// responseIDSecret is the secret of the deployment's response ids:
// server.response_id_secret_env's value, else a digest of the API keys'
// values (unknown to any one client when there are several keys), else,
// without keys, a constant (ids are then bound to nothing but their
// replica, as every client may use every id).
func responseIDSecret(sc *policy.Server) []byte {
	h := sha256.New()
	h.Write([]byte("switchyard response ids\x00"))
	if sc.ResponseIDSecret != "" {
		h.Write([]byte(sc.ResponseIDSecret))
		return h.Sum(nil)
	}
	secrets := make([]string, 0, len(sc.APIKeys))
	for _, k := range sc.APIKeys {
		secrets = append(secrets, string(k.Secret))
	}
	slices.Sort(secrets)
	for _, k := range secrets {
		h.Write([]byte(k))
		h.Write([]byte{0})
	}
	return h.Sum(nil)
}

// ids signs and checks the response ids of one API key.
type ids struct {
	secret []byte
	key    string // the key's name; "" without keys
}

// idsFor is the signer of the exchange's key.
func (x *exchange) ids() ids {
	i := ids{secret: x.snap.idSecret}
	if x.key != nil {
		i.key = x.key.name
	}
	return i
}

func (i ids) mac(tag, orig string) string {
	h := hmac.New(sha256.New, i.secret)
	h.Write([]byte(i.key))
	h.Write([]byte{0})
	h.Write([]byte(tag))
	h.Write([]byte{0})
	h.Write([]byte(orig))
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// encode is the id the client sees for the replica's id.
func (i ids) encode(tag, orig string) string {
	return storedPrefix + tag + i.mac(tag, orig) + "_" + orig
}

// decode splits an id encode made for this key; ok is false for any
// other string. The replica's id may have any shape but "." and "..",
// which could climb a path.
func (i ids) decode(id string) (tag, orig string, ok bool) {
	rest, found := strings.CutPrefix(id, storedPrefix)
	if !found || len(rest) < 30 || rest[28] != '_' || len(id) > maxResponseID {
		return "", "", false
	}
	tag, mac, orig := rest[:12], rest[12:28], rest[29:]
	if orig == "." || orig == ".." || !hmac.Equal([]byte(mac), []byte(i.mac(tag, orig))) {
		return "", "", false
	}
	return tag, orig, true
}

// maxResponseID bounds the ids a client may present.
const maxResponseID = 512

// errResponseNotFound is a 404 in the Responses API's error shape; param
// names where the id came from.
func errResponseNotFound(id, param, why string) error {
	return &apiError{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "response_not_found", Param: param,
		Message: fmt.Sprintf("response %q was not found: %s", clip(id), why)}
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
	tag, orig, ok := x.ids().decode(id)
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
	x.pinned = found
	x.decision = policy.Decision{Route: "stored", Pools: []string{foundPool.Name}}
	if x.info.PreviousResponse != "" {
		b, err := sjson.SetBytes(x.body, "previous_response_id", orig)
		if err != nil {
			return badRequest("previous_response_id", err.Error())
		}
		x.body = b
	} else {
		x.storedID = orig
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

// storedHandler serves GET and DELETE /v1/responses/{id} and POST
// /v1/responses/{id}/cancel on the replica that stored the response.
func (g *Gateway) storedHandler(suffix string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		g.serveStored(w, r, chi.URLParam(r, "id"), suffix)
	}
}

// responseIDs rewrites the response ids of a Responses API answer or
// event data (the top-level id of a response object, and response.id of
// an event) to the ids clients see. Item ids are left alone.
//
// Every id the replica sends is encoded, whatever its shape: the replica
// never sees an encoded id (they are restored on the way in), so nothing
// it sends is already one of the gateway's.
func responseIDs(data []byte, tag string, i ids) []byte {
	// The replica that answered also stored the response it continues,
	// so an echoed previous_response_id takes the same tag.
	for _, path := range [...]string{"id", "response.id", "previous_response_id", "response.previous_response_id"} {
		v := gjson.GetBytes(data, path)
		if v.Type != gjson.String || v.Str == "" {
			continue
		}
		if (path == "id" || path == "previous_response_id") && gjson.GetBytes(data, "object").Str != "response" {
			continue
		}
		if out, err := sjson.SetBytes(data, path, i.encode(tag, v.Str)); err == nil {
			data = out
		}
	}
	return data
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

// perTurnUsage are the per-turn arrays vLLM adds inside a Responses
// usage's token details. The OpenAI API has none, and SDKs that check the
// details as numbers refuse them (the OpenAI Agents SDK's streamed runs
// fail), so they are removed.
var perTurnUsage = [...]string{
	"usage.input_tokens_details.input_tokens_per_turn", "usage.input_tokens_details.cached_tokens_per_turn",
	"usage.output_tokens_details.output_tokens_per_turn", "usage.output_tokens_details.tool_output_tokens_per_turn",
}

// trimUsage removes perTurnUsage under prefix ("" for a response body,
// "response." for an event) from data, which it does not modify.
func trimUsage(data []byte, prefix string) []byte {
	for _, path := range perTurnUsage {
		if gjson.GetBytes(data, prefix+path).Exists() {
			if out, err := sjson.DeleteBytes(data, prefix+path); err == nil {
				data = out
			}
		}
	}
	return data
}
