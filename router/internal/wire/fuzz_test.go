package wire

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// FuzzParse: the request reader never panics, and what it accepts has
// the fields routing relies on (what features.Read and the classifier
// make of it is FuzzRead's, in features).
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"model":"auto","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"auto","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"system","content":[{"type":"text","text":"x"}]},{"role":"user","content":"y"}],"tools":[{"type":"function","function":{"name":"f"}}],"user":"u"}`,
		`{"model":"auto","prompt":["a","b"]}`,
		`{"model":1}`, `[]`, `{"model":"m","messages":"x"}`, `{"model":"m","messages":[1]}`, ``, `{`, `{"a":"\ud800"}`,
		`{"model":"a","messages":[{"role":"user","content":"x"}],"model":"b"}`,
		`{"model":"a","stream":"yes","messages":[{"role":"user","content":"x"}]}`,
		`{"model":"a","messages":[{"role":"user","content":"x"}],"x":` + strings.Repeat("[", 70) + strings.Repeat("]", 70) + `}`,
		`{"model":"a","messages":[{"role":"user","content":"[[[[\"{{{"}]}`,
	} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, body []byte, completions bool) {
		ep := Chat
		if completions {
			ep = Completions
		}
		info, err := Parse(body, ep, 64)
		if err != nil {
			if _, ok := err.(*APIError); !ok {
				t.Fatalf("error %T is not an API error", err)
			}
			return
		}
		if info.Model == "" || info.Messages <= 0 || info.PromptTokens < 0 || info.Tools < 0 {
			t.Fatalf("accepted %q with %+v", body, info)
		}
		// Accepted bodies nest at most 64 deep and name each routing key
		// once, so every parser downstream reads the same request.
		if !CheckDepth(body, 64) {
			t.Fatalf("accepted a body nested deeper than 64: %q", body)
		}
		for _, k := range RoutingKeys {
			n := 0
			gjson.ParseBytes(body).ForEach(func(key, _ gjson.Result) bool {
				if key.Str == k {
					n++
				}
				return true
			})
			if n > 1 {
				t.Fatalf("accepted a duplicate %q: %q", k, body)
			}
		}
	})
}
