package resume

import (
	"testing"

	"github.com/tidwall/gjson"
)

// TestContinuationRelabelsReasoning: a continuation of the content (the
// cut came after content was sent) relays what the continuing replica's
// reasoning parser calls reasoning as content, since a thinking block
// closes once; a continuation of the reasoning relays it unchanged.
func TestContinuationRelabelsReasoning(t *testing.T) {
	for _, tc := range []struct {
		name      string
		inContent bool
		in, want  string
	}{
		{"after content", true, `{"id":"b","choices":[{"index":0,"delta":{"reasoning":" more"}}]}`, `{"id":"a","choices":[{"index":0,"delta":{"content":" more"}}]}`},
		{"after content, old field", true, `{"id":"b","choices":[{"index":0,"delta":{"reasoning_content":" more"}}]}`, `{"id":"a","choices":[{"index":0,"delta":{"content":" more"}}]}`},
		{"while reasoning", false, `{"id":"b","choices":[{"index":0,"delta":{"reasoning":" more"}}]}`, `{"id":"a","choices":[{"index":0,"delta":{"reasoning":" more"}}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := &State{maxBuffer: 1 << 20}
			rs.Observe([]byte(`{"id":"a","choices":[{"index":0,"delta":{"reasoning":"Think"}}]}`))
			if tc.inContent {
				rs.Observe([]byte(`{"id":"a","choices":[{"index":0,"delta":{"content":"Answer"}}]}`))
			}
			body, err := rs.resumeBody([]byte(`{"messages":[{"role":"user","content":"q"}]}`))
			if err != nil {
				t.Fatal(err)
			}
			want := "<think>\nThink"
			if tc.inContent {
				want += "\n</think>\n\nAnswer"
			}
			if got := gjson.GetBytes(body, "messages.1.content").Str; got != want {
				t.Errorf("partial message %q, want %q", got, want)
			}
			rs.roleDropped = true
			out, keep := rs.Continuation([]byte(tc.in))
			if !keep || string(out) != tc.want {
				t.Errorf("continuation %s, want %s", out, tc.want)
			}
		})
	}
}
