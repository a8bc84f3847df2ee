package wire

import (
	"errors"
	"net/http"
	"testing"
)

// TestParseCountsAgentTools: Codex sends its tools in an additional_tools
// input item, grouped in namespaces; each function counts for the tools
// feature (before: 0 tools, so a tool-heavy rule never matched and the
// session landed on the small model), and a top-level namespace group
// counts its functions, as docs/agents.md says.
func TestParseCountsAgentTools(t *testing.T) {
	fns := `{"type":"function","name":"read"},{"type":"function","name":"write"},{"type":"function","name":"list"},{"type":"function","name":"exec"}`
	for _, body := range []string{
		`{"model":"auto","input":[{"type":"additional_tools","tools":[{"type":"namespace","name":"fs","tools":[` + fns + `]}]},{"role":"user","content":"hi"}]}`,
		`{"model":"auto","input":"hi","tools":[{"type":"namespace","name":"fs","tools":[` + fns + `]}]}`,
	} {
		info, err := Parse([]byte(body), Responses, 64)
		if err != nil || info.Tools != 4 {
			t.Errorf("%s: %v, tools %d, want 4", body, err, info.Tools)
		}
	}
}

// TestParseOneView: a routing field given twice (JSON parsers disagree
// on which wins), or a stream that is not a boolean, is refused naming
// the field; a null stream is no stream.
func TestParseOneView(t *testing.T) {
	const msgs = `"messages":[{"role":"user","content":"x"}]`
	for _, tc := range []struct{ name, body, param string }{
		{"duplicate model", `{"model":"auto",` + msgs + `,"model":"m"}`, "model"},
		{"duplicate stream", `{"model":"auto","stream":false,` + msgs + `,"stream":true}`, "stream"},
		{"duplicate messages", `{"model":"auto","messages":[],` + msgs + `}`, "messages"},
		{"duplicate stream_options", `{"model":"auto","stream_options":{},"stream_options":{},` + msgs + `}`, "stream_options"},
		{"duplicate include_usage", `{"model":"auto","stream":true,"stream_options":{"include_usage":true,"include_usage":false},` + msgs + `}`, "stream_options.include_usage"},
		{"stream not a boolean", `{"model":"auto","stream":"yes",` + msgs + `}`, "stream"},
		{"stream a number", `{"model":"auto","stream":1,` + msgs + `}`, "stream"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.body), Chat, DefaultMaxDepth)
			var ae *APIError
			if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || ae.Param != tc.param {
				t.Errorf("Parse = %v (%+v), want a 400 naming %q", err, ae, tc.param)
			}
		})
	}
	info, err := Parse([]byte(`{"model":"auto","stream":null,`+msgs+`}`), Chat, DefaultMaxDepth)
	if err != nil || info.Stream {
		t.Errorf("stream null: %v, stream %t", err, info != nil && info.Stream)
	}
}

// TestBodyEncoding: only an identity body is read; a second
// Content-Encoding line (identity, then gzip) or a list naming a coding
// is refused like a coded body (issue 31, item 7: the check read only the
// first line).
func TestBodyEncoding(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lines []string
		ok    bool
	}{
		{"identity then gzip", []string{"identity", "gzip"}, false},
		{"identity twice", []string{"identity", "identity"}, false},
		{"a list with gzip", []string{"identity, gzip"}, false},
		{"gzip", []string{"gzip"}, false},
		{"identity", []string{"identity"}, true},
		{"identity in capitals", []string{"IDENTITY"}, true},
		{"none", nil, true},
	} {
		if _, ok := BodyEncoding(http.Header{"Content-Encoding": tc.lines}); ok != tc.ok {
			t.Errorf("%s: ok %t, want %t", tc.name, ok, tc.ok)
		}
	}
}

// TestParseRefuses: a body that is not a chat request is a 400
// invalid_request_error, whatever is wrong with it.
func TestParseRefuses(t *testing.T) {
	for name, body := range map[string]string{
		"invalid JSON":          `{"model":`,
		"empty body":            ``,
		"not an object":         `[1,2]`,
		"no model":              `{"messages":[{"role":"user","content":"hi"}]}`,
		"no messages":           `{"model":"auto"}`,
		"messages not an array": `{"model":"auto","messages":"hi"}`,
	} {
		_, err := Parse([]byte(body), Chat, DefaultMaxDepth)
		var ae *APIError
		if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || ae.Type != "invalid_request_error" || ae.Message == "" {
			t.Errorf("%s: Parse = %v, want a 400 invalid_request_error", name, err)
		}
	}
}
