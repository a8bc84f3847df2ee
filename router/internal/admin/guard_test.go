package admin

import (
	"crypto/sha256"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/router/internal/wire"
)

// openPathsView is a gateway with nothing in it (named apart from the
// handler tests' own fake).
type openPathsView struct{ run Running }

var _ View = openPathsView{}

func (v openPathsView) Running() Running                 { return v.run }
func (openPathsView) ConfigYAML() ([]byte, int64, error) { return []byte("version: 1\n"), 1, nil }
func (openPathsView) Ready() (int, map[string]any) {
	return http.StatusOK, map[string]any{"status": "ready"}
}
func (openPathsView) Reload() (int64, []string, error)            { return 1, nil, nil }
func (openPathsView) Explain(*http.Request) (any, *wire.APIError) { return map[string]any{}, nil }
func (openPathsView) Pools(time.Time) []PoolView                  { return nil }
func (openPathsView) Control() (any, bool)                        { return nil, false }
func (openPathsView) Shadow() *ShadowSummary                      { return nil }
func (openPathsView) LastReload() *ReloadOutcome                  { return nil }

// TestWhatAnswersWithoutToken is docs/observability.md's table "The admin
// listener without the token": with server.admin_token_env set, only
// /admin/* (and /metrics with admin_token_metrics) need the token; the
// probes, the page's files (no data) and, by default, /metrics answer
// without it.
func TestWhatAnswersWithoutToken(t *testing.T) {
	token := sha256.Sum256([]byte("secret"))
	for _, tc := range []struct {
		path         string
		tokenMetrics bool
		want         int
	}{
		{"/metrics", false, http.StatusOK},
		{"/metrics", true, http.StatusUnauthorized},
		{"/healthz", false, http.StatusOK},
		{"/readyz", false, http.StatusOK},
		{"/", false, http.StatusOK},
		{"/status.js", false, http.StatusOK},
		{"/status.css", false, http.StatusOK},
		{"/admin/status", false, http.StatusUnauthorized},
		{"/admin/pools", false, http.StatusUnauthorized},
		{"/admin/config", false, http.StatusUnauthorized},
		{"/admin/control", false, http.StatusUnauthorized},
		{"/admin/shadow", false, http.StatusUnauthorized},
	} {
		name := tc.path
		if tc.tokenMetrics {
			name += " with admin_token_metrics"
		}
		t.Run(name, func(t *testing.T) {
			h := Handler(openPathsView{run: Running{Token: &token, TokenMetrics: tc.tokenMetrics, AdminListen: "127.0.0.1:9090"}},
				Options{Registry: prometheus.NewRegistry(), Now: time.Now, Started: time.Now(), Ring: &Ring{}})
			req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1:9090"+tc.path, nil)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tc.want {
				t.Errorf("GET %s without the token: %d, want %d (%s)", tc.path, rec.Code, tc.want, rec.Body)
			}
		})
	}
}
