package wire

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
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

// ids signs and checks the response ids of one API key.
type ResponseIDs struct {
	Secret []byte
	Key    string // the key's name; "" without keys
}

func (i ResponseIDs) mac(tag, orig string) string {
	h := hmac.New(sha256.New, i.Secret)
	h.Write([]byte(i.Key))
	h.Write([]byte{0})
	h.Write([]byte(tag))
	h.Write([]byte{0})
	h.Write([]byte(orig))
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// encode is the id the client sees for the replica's id.
func (i ResponseIDs) Encode(tag, orig string) string {
	return storedPrefix + tag + i.mac(tag, orig) + "_" + orig
}

// decode splits an id encode made for this key; ok is false for any
// other string. The replica's id may have any shape but "." and "..",
// which could climb a path.
func (i ResponseIDs) Decode(id string) (tag, orig string, ok bool) {
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

// EncodeResponseIDs rewrites the response ids of a Responses API answer or
// event data (the top-level id of a response object, and response.id of
// an event) to the ids clients see. Item ids are left alone.
//
// Every id the replica sends is encoded, whatever its shape: the replica
// never sees an encoded id (they are restored on the way in), so nothing
// it sends is already one of the gateway's.
func EncodeResponseIDs(data []byte, tag string, i ResponseIDs) []byte {
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
		if out, err := sjson.SetBytes(data, path, i.Encode(tag, v.Str)); err == nil {
			data = out
		}
	}
	return data
}

// perTurnUsage are the per-turn arrays vLLM adds inside a Responses
// usage's token details. The OpenAI API has none, and SDKs that check the
// details as numbers refuse them (the OpenAI Agents SDK's streamed runs
// fail), so they are removed.
var perTurnUsage = [...]string{
	"usage.input_tokens_details.input_tokens_per_turn", "usage.input_tokens_details.cached_tokens_per_turn",
	"usage.output_tokens_details.output_tokens_per_turn", "usage.output_tokens_details.tool_output_tokens_per_turn",
}

// TrimUsage removes perTurnUsage under prefix ("" for a response body,
// "response." for an event) from data, which it does not modify.
func TrimUsage(data []byte, prefix string) []byte {
	for _, path := range perTurnUsage {
		if gjson.GetBytes(data, prefix+path).Exists() {
			if out, err := sjson.DeleteBytes(data, prefix+path); err == nil {
				data = out
			}
		}
	}
	return data
}
