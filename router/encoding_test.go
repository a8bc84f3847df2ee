package router_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestRepeatedContentEncodingRefused: a second Content-Encoding line
// (identity, then gzip) is refused with 415 like a coded body, and never
// reaches the replica (issue 31, item 7). Before the fix the check read
// only the first line and both lines were forwarded.
func TestRepeatedContentEncodingRefused(t *testing.T) {
	m := startReplica(t, fast("m"))
	gw := startGateway(t, loadConfig(t, isolationYAML, map[string]string{"m": m.Srv.URL}, nil))
	addr := strings.TrimPrefix(gw.API.URL, "http://")
	body := `{"model":"m","max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`
	for _, tc := range []struct {
		name   string
		lines  []string
		status int
	}{
		{"identity then gzip", []string{"Content-Encoding: identity", "Content-Encoding: gzip"}, 415},
		{"identity twice", []string{"Content-Encoding: identity", "Content-Encoding: identity"}, 415},
		{"a list with gzip", []string{"Content-Encoding: identity, gzip"}, 415},
		{"identity", []string{"Content-Encoding: identity"}, 200},
		{"identity in capitals", []string{"Content-Encoding: IDENTITY"}, 200},
		{"none", nil, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := m.count()
			head := append([]string{"POST /v1/chat/completions HTTP/1.1", "Host: x", "Content-Type: application/json",
				fmt.Sprintf("Content-Length: %d", len(body)), "Connection: close"}, tc.lines...)
			c, br := rawRequest(t, addr, head...)
			if _, err := io.WriteString(c, body); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("%d %s, want %d", resp.StatusCode, b, tc.status)
			}
			if forwarded := m.count() - before; tc.status == 415 && forwarded != 0 {
				t.Errorf("the refused request reached the replica")
			}
		})
	}
}
