package agents_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// capturedRequest is one request an agent sent, as kept in
// testdata/agents/sessions: its path, the headers routing reads, and its
// body, with the machine's paths replaced by $WORK and $HOME.
type capturedRequest struct {
	Path    string            `json:"path"`
	Headers map[string]string `json:"headers,omitempty"`
	Body    json.RawMessage   `json:"body"`
}

// capturedHeaders are the headers kept: the session ids agents send and
// the Messages API's version.
var capturedHeaders = []string{"X-Session-Id", "Session-Id", "X-Claude-Code-Session-Id", "Anthropic-Version"}

var osVersion = regexp.MustCompile(`OS Version: [^\\"]*`)

// recorder stands between an agent and the gateway and keeps what the
// agent sends.
type recorder struct {
	mu   sync.Mutex
	reqs []capturedRequest
	raw  [][]byte
}

// recordThrough returns a copy of c whose gateway address is a recorder
// in front of c's gateway.
func recordThrough(t *testing.T, c *cluster) (*cluster, *recorder) {
	t.Helper()
	target, err := url.Parse("http://" + c.gw.addr)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.FlushInterval = -1
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if r.Method == http.MethodPost && json.Valid(body) {
			cr := capturedRequest{Path: r.URL.Path, Headers: map[string]string{}}
			for _, h := range capturedHeaders {
				if v := r.Header.Get(h); v != "" {
					cr.Headers[h] = v
				}
			}
			rec.mu.Lock()
			rec.reqs = append(rec.reqs, cr)
			rec.raw = append(rec.raw, body)
			rec.mu.Unlock()
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	gw := *c.gw
	gw.addr = strings.TrimPrefix(srv.URL, "http://")
	out := *c
	out.gw = &gw
	return &out, rec
}

// write keeps the recorded requests in file, one JSON object a line, with
// every occurrence of the given paths replaced by their names, in order;
// it fails if a machine path is left.
func (r *recorder) write(t *testing.T, file string, paths [][2]string) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	var out bytes.Buffer
	for i, cr := range r.reqs {
		body := string(r.raw[i])
		for _, pn := range paths {
			p, name := pn[0], pn[1]
			// As JSON escapes it, and as written.
			esc, _ := json.Marshal(p)
			body = strings.ReplaceAll(body, string(esc[1:len(esc)-1]), name)
			body = strings.ReplaceAll(body, p, name)
		}
		// Claude Code writes the machine's kernel release into its prompt.
		body = osVersion.ReplaceAllString(body, "OS Version: Linux")
		for _, leak := range []string{"/tmp/", "/root/", "/home/", "/work/"} { // Codex names its root agent "/root"
			if strings.Contains(body, leak) {
				t.Fatalf("request %d still holds a machine path (%s): %.300s", i, leak, body)
			}
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, []byte(body)); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		cr.Body = compact.Bytes()
		line, _ := json.Marshal(cr)
		out.Write(line)
		out.WriteByte('\n')
	}
	if err := os.WriteFile(file, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestCaptureSessions records what the real agents send during a tool task
// into testdata/agents/sessions (bench/capacity --workload replay reads
// them). It runs only with SWITCHYARD_CAPTURE=1, as it rewrites those
// files: SWITCHYARD_CAPTURE=1 go test ./agents/ -run TestCaptureSessions.
func TestCaptureSessions(t *testing.T) {
	if os.Getenv("SWITCHYARD_CAPTURE") != "1" {
		t.Skip("set SWITCHYARD_CAPTURE=1 to rewrite testdata/agents/sessions")
	}
	dir := filepath.Join(agentsDir(t), "sessions")
	t.Run("claude-code", func(t *testing.T) {
		agent(t, "claude")
		work := t.TempDir()
		file := filepath.Join(work, "hello.txt")
		c := startCluster(t, writeScenario(file, "hello from the simulator\n", "I wrote hello.txt."))
		rc, rec := recordThrough(t, c)
		claude(t, rc, work, "Write hello.txt saying hello.", 2*time.Minute, nil)
		hasFile(t, file, "hello from the simulator\n")
		home, _ := filepath.Abs(filepath.Dir(work))
		rec.write(t, filepath.Join(dir, "claude-code.jsonl"), [][2]string{{work, "$WORK"}, {home, "$TMP"}})
	})
	t.Run("codex", func(t *testing.T) {
		agent(t, "codex")
		work := t.TempDir()
		c := startCluster(t, "turns:\n  - calls:\n      - tool: exec_command\n        arguments: {cmd: \"printf 'hello from codex\\n' > hello.txt\"}\n  - text: \"I wrote hello.txt.\"\n")
		rc, rec := recordThrough(t, c)
		codex(t, rc, work, "Write hello.txt saying hello.", 2*time.Minute)
		hasFile(t, filepath.Join(work, "hello.txt"), "hello from codex\n")
		home, _ := filepath.Abs(filepath.Dir(work))
		rec.write(t, filepath.Join(dir, "codex.jsonl"), [][2]string{{work, "$WORK"}, {home, "$TMP"}})
	})
}
