package router

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/switchyard/switchyard/policy"
	"github.com/switchyard/switchyard/router/internal/upstream"
)

// TestOversizedAnswerIs502: a non-stream answer over the size limit is not
// held in memory or passed on; the client gets 502.
func TestOversizedAnswerIs502(t *testing.T) {
	old := answers
	answers = upstream.NewAnswers(1<<10, 1<<10, 1<<10)
	defer func() { answers = old }()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"x":"`+strings.Repeat("a", 4<<10)+`"}`)
	}))
	defer up.Close()
	cfg, err := policy.Load("t.yaml", []byte(`
version: 1
pools:
  p: {model: m, retries: 0, health: {disabled: true}, replicas: [{name: r, url: "`+up.URL+`"}]}
routes:
  - name: default
    to: p
`), LoadOptions())
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(cfg, Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	srv := httptest.NewServer(g.Handler())
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"auto","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(body), "larger than 1024 bytes") {
		t.Errorf("status %d body %s", resp.StatusCode, body)
	}
}
