package agents_test

import (
	"bytes"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/capture"
)

// capturedRequest is one request an agent sent, as kept in
// testdata/agents/sessions: its path, the headers routing reads, and its
// body, with the machine's paths replaced by $WORK and $HOME.
type capturedRequest struct {
	Path    string            `json:"path"`
	Headers map[string]string `json:"headers,omitempty"`
	Body    json.RawMessage   `json:"body"`
}

// capturedHeaders are the headers kept: the session ids agents send (and
// Codex's thread id) and the Messages API's version; any other header
// whose name holds "Session" is kept too.
var capturedHeaders = []string{"X-Session-Id", "Session-Id", "X-Claude-Code-Session-Id", "Thread-Id", "Anthropic-Version"}

var osVersion = regexp.MustCompile(`OS Version: [^\\"]*`)

// recorder stands between an agent and the gateway and keeps what the
// agent sends.
type recorder struct {
	mu   sync.Mutex
	reqs []capturedRequest
	raw  [][]byte
	// names are the header names of the first request, logged for
	// whoever looks for an agent's session header.
	names []string
	// allNames are the header names of every request.
	allNames map[string]bool
}

// recordThrough returns a copy of c whose gateway address is a recorder
// in front of c's gateway.
func recordThrough(t *testing.T, c *cluster) (*cluster, *recorder) {
	t.Helper()
	target, err := url.Parse("http://" + c.gw.addr)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{allNames: map[string]bool{}}
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
			for h, v := range r.Header {
				if strings.Contains(h, "Session") && len(v) > 0 {
					cr.Headers[h] = v[0]
				}
			}
			rec.mu.Lock()
			if len(rec.reqs) == 0 {
				rec.names = slices.Sorted(maps.Keys(r.Header))
			}
			for h := range r.Header {
				rec.allNames[h] = true
			}
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
		if at := capture.MachineLeak(body); at >= 0 {
			t.Fatalf("request %d still holds a machine path: …%s…", i, body[max(0, at-150):min(len(body), at+150)])
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

// TestCaptureSessions records what real agents send during one tool task
// (captureTask: create notes.txt, read it back, edit it, answer) into
// testdata/agents/sessions, one file per agent (bench/capacity --workload
// replay reads them). Each agent runs against a cluster whose replicas
// script its own tools' calls, as if the model did the task; its side
// requests (OpenCode's title request) are recorded as they come (a title
// request is turn 1 too, so its answer is the scripted first call, which
// the task does not use). It runs
// only with SWITCHYARD_CAPTURE=1, as it rewrites those files:
//
//	npm ci --prefix testdata/agents && npm ci --prefix testdata/agents/capture
//	SWITCHYARD_CAPTURE=1 go test ./agents/ -run TestCaptureSessions -timeout 20m
func TestCaptureSessions(t *testing.T) {
	if os.Getenv("SWITCHYARD_CAPTURE") != "1" {
		t.Skip("set SWITCHYARD_CAPTURE=1 to rewrite testdata/agents/sessions")
	}
	dir := filepath.Join(agentsDir(t), "sessions")
	const done = "notes.txt now reads alpha, delta, gamma."
	for _, a := range []struct {
		name string
		// steps are the agent's own tools' calls for the task, in a
		// work folder.
		steps func(work string) []step
		run   func(t *testing.T, c *cluster, work string)
	}{
		{"claude-code", func(work string) []step {
			f := filepath.Join(work, "notes.txt")
			return []step{
				{"Write", map[string]any{"file_path": f, "content": "alpha\nbeta\ngamma\n"}},
				{"Read", map[string]any{"file_path": f}},
				{"Edit", map[string]any{"file_path": f, "old_string": "beta", "new_string": "delta"}},
			}
		}, func(t *testing.T, c *cluster, work string) {
			// Its quick calls on the small model (titles and the like) are
			// part of what it sends: allowed here, unlike in the suite.
			claude(t, c, work, captureTask, 3*time.Minute, []string{"DISABLE_NON_ESSENTIAL_MODEL_CALLS="})
		}},
		{"codex", func(string) []step {
			return []step{
				{"exec_command", map[string]any{"cmd": "printf 'alpha\\nbeta\\ngamma\\n' > notes.txt"}},
				{"exec_command", map[string]any{"cmd": "cat notes.txt"}},
				{"exec_command", map[string]any{"cmd": "sed -i 's/^beta$/delta/' notes.txt"}},
			}
		}, func(t *testing.T, c *cluster, work string) { codex(t, c, work, captureTask, 3*time.Minute) }},
		{"opencode", func(work string) []step {
			f := filepath.Join(work, "notes.txt")
			return []step{
				{"write", map[string]any{"filePath": f, "content": "alpha\nbeta\ngamma\n"}},
				{"read", map[string]any{"filePath": f}},
				{"edit", map[string]any{"filePath": f, "oldString": "beta", "newString": "delta"}},
			}
		}, func(t *testing.T, c *cluster, work string) { openCode(t, c, work, captureTask, 3*time.Minute) }},
		{"qwen-code", func(work string) []step {
			f := filepath.Join(work, "notes.txt")
			return []step{
				{"write_file", map[string]any{"file_path": f, "content": "alpha\nbeta\ngamma\n"}},
				{"read_file", map[string]any{"file_path": f}},
				{"edit", map[string]any{"file_path": f, "old_string": "beta", "new_string": "delta"}},
			}
		}, func(t *testing.T, c *cluster, work string) { qwenCode(t, c, work, captureTask, 3*time.Minute) }},
		{"pi", func(string) []step {
			return []step{
				{"write", map[string]any{"path": "notes.txt", "content": "alpha\nbeta\ngamma\n"}},
				{"read", map[string]any{"path": "notes.txt"}},
				{"edit", map[string]any{"path": "notes.txt", "edits": []any{map[string]any{"oldText": "beta", "newText": "delta"}}}},
			}
		}, func(t *testing.T, c *cluster, work string) { pi(t, c, work, captureTask, 3*time.Minute) }},
		{"cline", func(work string) []step {
			f := filepath.Join(work, "notes.txt")
			return []step{
				{"editor", map[string]any{"path": f, "new_text": "alpha\nbeta\ngamma\n"}},
				{"read_files", map[string]any{"files": []any{map[string]any{"path": f}}}},
				{"editor", map[string]any{"path": f, "old_text": "beta", "new_text": "delta"}},
			}
		}, func(t *testing.T, c *cluster, work string) { cline(t, c, work, captureTask, 3*time.Minute) }},
	} {
		t.Run(a.name, func(t *testing.T) {
			work := t.TempDir()
			c := startCluster(t, stepScenario(a.steps(work), done))
			rc, rec := recordThrough(t, c)
			a.run(t, rc, work)
			hasFile(t, filepath.Join(work, "notes.txt"), captureWant)
			tmp, _ := filepath.Abs(filepath.Dir(work))
			// Qwen Code also names a folder after the work folder's path,
			// its slashes made dashes.
			slug := strings.ReplaceAll(work, "/", "-")
			rec.write(t, filepath.Join(dir, a.name+".jsonl"), [][2]string{{work, "$WORK"}, {slug, "-$WORK"}, {tmp, "$TMP"}, {agentsDir(t), "$AGENTS"}})
			t.Logf("%s: %d requests recorded; the first one's headers: %q", a.name, len(rec.reqs), rec.names)
		})
	}
}
