package wire

import (
	"github.com/tidwall/gjson"
)

// ReadUsage reads the usage object of a response or chunk.
func ReadUsage(data []byte) (prompt, completion int64, ok bool) {
	u := gjson.GetBytes(data, "usage")
	if !u.IsObject() {
		return 0, 0, false
	}
	if !u.Get("prompt_tokens").Exists() && u.Get("input_tokens").Exists() {
		// The Responses and Messages APIs' names.
		return u.Get("input_tokens").Int(), u.Get("output_tokens").Int(), true
	}
	return u.Get("prompt_tokens").Int(), u.Get("completion_tokens").Int(), true
}
