package admin

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/router/internal/wire"
)

// fakeView is a gateway as the admin API sees it, with answers set by the
// test.
type fakeView struct {
	run      Running
	yaml     string
	problems []string
	reloaded int
}

func (v *fakeView) Running() Running { return v.run }
func (v *fakeView) ConfigYAML() ([]byte, int64, error) {
	return []byte(v.yaml), v.run.Generation, nil
}
func (v *fakeView) Ready() (int, map[string]any) { return 200, map[string]any{"ready": true} }
func (v *fakeView) Reload() (int64, []string, error) {
	v.reloaded++
	if v.problems != nil {
		return v.run.Generation, v.problems, errors.New(strings.Join(v.problems, "\n"))
	}
	v.run.Generation++
	return v.run.Generation, nil, nil
}
func (v *fakeView) Explain(*http.Request) (any, *wire.APIError) {
	return nil, wire.BadRequest("", "explain needs a request body")
}
func (v *fakeView) Pools(time.Time) []PoolView {
	return []PoolView{{Name: "qwen", Model: "Qwen/Qwen3", Balance: "p2c", Healthy: 1,
		Replicas: []ReplicaView{{Name: "a", URL: "http://10.0.0.1:8000", Source: "config",
			State: ReplicaFlags{Healthy: true}.State(), Healthy: true}}}}
}
func (v *fakeView) Control() (any, bool)       { return nil, false }
func (v *fakeView) Shadow() *ShadowSummary     { return nil }
func (v *fakeView) LastReload() *ReloadOutcome { return nil }

func newAdmin(t *testing.T, v *fakeView) *httptest.Server {
	t.Helper()
	now := time.Unix(1_800_000_000, 0)
	reg := prometheus.NewRegistry()
	srv := httptest.NewServer(Handler(v, Options{Registry: reg, Version: "test", Started: now,
		Now: func() time.Time { return now }, Ring: &Ring{Gather: reg}, CacheHitRate: func(map[string]float64) (float64, bool) { return 0, false }}))
	t.Cleanup(srv.Close)
	return srv
}

func do(t *testing.T, method, url string, h map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// decode reads a JSON object answer.
func decode(t *testing.T, body string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	return m
}

// TestGuard: without a token the admin API answers only requests
// addressed to an IP, localhost or admin_listen's host; with one, /admin/*
// (and /metrics when asked) need it; a cross-origin browser call that
// changes state is refused whatever the token; the probes stay open.
func TestGuard(t *testing.T) {
	token := sha256.Sum256([]byte("s3cret"))
	for _, tc := range []struct {
		name         string
		run          Running
		method, path string
		header       map[string]string
		want         int
	}{
		{"no token, IP host", Running{}, "GET", "/admin/pools", nil, 200},
		{"no token, localhost", Running{}, "GET", "/admin/pools", map[string]string{"Host": "localhost:9090"}, 200},
		{"no token, admin_listen host", Running{AdminListen: "admin.internal:9090"}, "GET", "/admin/pools", map[string]string{"Host": "Admin.Internal:9090"}, 200},
		{"no token, other name", Running{}, "GET", "/admin/pools", map[string]string{"Host": "attacker.example"}, 403},
		{"no token, other name and port", Running{}, "GET", "/admin/pools", map[string]string{"Host": "attacker.example:9090"}, 403},
		{"no token, localhost as a label", Running{}, "GET", "/admin/pools", map[string]string{"Host": "localhost.attacker.example"}, 403},
		{"no token, metrics by name", Running{}, "GET", "/metrics", map[string]string{"Host": "attacker.example"}, 403},
		{"no token, IPv6 loopback", Running{}, "GET", "/admin/pools", map[string]string{"Host": "[::1]:9090"}, 200},
		{"no token, other IP", Running{}, "GET", "/admin/pools", map[string]string{"Host": "10.1.2.3:9090"}, 200},
		{"no token, a .localhost name", Running{}, "GET", "/admin/pools", map[string]string{"Host": "app.localhost"}, 200},
		{"no token, LOCALHOST.", Running{}, "GET", "/admin/pools", map[string]string{"Host": "LOCALHOST."}, 200},
		{"no token, readyz by name", Running{}, "GET", "/readyz", map[string]string{"Host": "attacker.example"}, 200},
		{"no token, probe by name", Running{}, "GET", "/healthz", map[string]string{"Host": "attacker.example"}, 200},
		{"token missing", Running{Token: &token}, "GET", "/admin/pools", nil, 401},
		{"token wrong", Running{Token: &token}, "GET", "/admin/pools", map[string]string{"Authorization": "Bearer nope"}, 401},
		{"token right, any case", Running{Token: &token}, "GET", "/admin/pools", map[string]string{"Authorization": "bearer s3cret"}, 200},
		{"token, any host", Running{Token: &token}, "GET", "/admin/pools", map[string]string{"Authorization": "Bearer s3cret", "Host": "gw.example"}, 200},
		{"token, service name", Running{Token: &token}, "GET", "/admin/config", map[string]string{"Authorization": "Bearer s3cret", "Host": "switchyard.inference.svc:9090"}, 200},
		{"metrics open by default", Running{Token: &token}, "GET", "/metrics", nil, 200},
		{"metrics guarded when asked", Running{Token: &token, TokenMetrics: true}, "GET", "/metrics", nil, 401},
		{"cross-site reload", Running{Token: &token}, "POST", "/admin/reload",
			map[string]string{"Authorization": "Bearer s3cret", "Sec-Fetch-Site": "cross-site"}, 403},
		{"other origin reload", Running{}, "POST", "/admin/reload", map[string]string{"Origin": "http://evil.example"}, 403},
		{"null origin reload", Running{Token: &token}, "POST", "/admin/reload", map[string]string{"Authorization": "Bearer s3cret", "Origin": "null"}, 403},
		{"same origin reload", Running{Token: &token}, "POST", "/admin/reload", map[string]string{"Authorization": "Bearer s3cret", "Origin": "SELF"}, 200},
		{"cross-site read", Running{}, "GET", "/admin/pools", map[string]string{"Sec-Fetch-Site": "cross-site"}, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := &fakeView{run: tc.run}
			srv := newAdmin(t, v)
			if tc.header["Origin"] == "SELF" {
				tc.header["Origin"] = srv.URL
			}
			code, body := do(t, tc.method, srv.URL+tc.path, tc.header)
			if code != tc.want {
				t.Errorf("%s %s: %d %s, want %d", tc.method, tc.path, code, body, tc.want)
			}
			if tc.header["Origin"] != "" && tc.want == 403 && !strings.Contains(body, `"cross_origin"`) {
				t.Errorf("%s %s: %s, want the code cross_origin", tc.method, tc.path, body)
			}
			if tc.want == 403 && v.reloaded > 0 {
				t.Error("a refused call reloaded the config")
			}
		})
	}
}

// TestReloadAnswers: a reload answers the generation now running; a
// refused config lists each of its problems and keeps the generation.
func TestReloadAnswers(t *testing.T) {
	v := &fakeView{run: Running{Generation: 4}}
	srv := newAdmin(t, v)
	code, body := do(t, "POST", srv.URL+"/admin/reload", nil)
	if diff := cmp.Diff(map[string]any{"generation": 5.0}, decode(t, body)); code != 200 || diff != "" {
		t.Errorf("reload: %d (-want +got):\n%s", code, diff)
	}
	v.problems = []string{`policy.yaml:3:5: pools.a: unknown key "modle"`, `policy.yaml:9:3: routes[0]: pool "b" is not defined`}
	code, body = do(t, "POST", srv.URL+"/admin/reload", nil)
	var got struct {
		Generation int64
		Error      struct {
			Code   string
			Errors []string
		}
	}
	if err := json.Unmarshal([]byte(body), &got); err != nil || code != 400 {
		t.Fatalf("refused reload: %d %s (%v)", code, body, err)
	}
	if got.Generation != 5 || got.Error.Code != "invalid_config" {
		t.Errorf("refused reload: %+v", got)
	}
	if diff := cmp.Diff(v.problems, got.Error.Errors); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
}

// TestReadEndpoints: /admin/pools shows the views and the topology when
// there is one, /admin/config the rendered YAML under its generation,
// /admin/control and /admin/shadow their disabled answers, and an unknown
// path an OpenAI-shaped 404.
func TestReadEndpoints(t *testing.T) {
	v := &fakeView{run: Running{Generation: 2, Topology: map[string]any{"nodes": []string{"n1"}}}, yaml: "version: 1\n"}
	srv := newAdmin(t, v)
	code, body := do(t, "GET", srv.URL+"/admin/pools", nil)
	doc := decode(t, body)
	pools, _ := doc["pools"].([]any)
	if code != 200 || doc["generation"] != 2.0 || len(pools) != 1 ||
		!cmp.Equal(doc["topology"], map[string]any{"nodes": []any{"n1"}}) || !strings.Contains(body, `"state": "healthy"`) {
		t.Errorf("/admin/pools: %d %s", code, body)
	}
	v.run.Topology = nil
	if _, body := do(t, "GET", srv.URL+"/admin/pools", nil); strings.Contains(body, "topology") {
		t.Errorf("/admin/pools without a topology: %s", body)
	}
	if code, body := do(t, "GET", srv.URL+"/admin/config", nil); code != 200 || body != "# generation 2\nversion: 1\n" {
		t.Errorf("/admin/config: %d %q", code, body)
	}
	if _, body := do(t, "GET", srv.URL+"/admin/control", nil); !cmp.Equal(decode(t, body), map[string]any{"enabled": false, "generation": 2.0}) {
		t.Errorf("/admin/control: %s", body)
	}
	if _, body := do(t, "GET", srv.URL+"/admin/shadow", nil); decode(t, body)["enabled"] != false {
		t.Errorf("/admin/shadow: %s", body)
	}
	if code, body := do(t, "GET", srv.URL+"/admin/nope", nil); code != 404 || !strings.Contains(body, `"not_found"`) {
		t.Errorf("unknown path: %d %s", code, body)
	}
	if code, body := do(t, "POST", srv.URL+"/admin/explain", nil); code != 400 || !strings.Contains(body, "explain needs") {
		t.Errorf("/admin/explain's error: %d %s", code, body)
	}
}

// TestReplicaState: the one word shown for a replica is the most telling
// of its facts.
func TestReplicaState(t *testing.T) {
	for _, tc := range []struct {
		f    ReplicaFlags
		want string
	}{
		{ReplicaFlags{Healthy: true}, "healthy"},
		{ReplicaFlags{}, "unhealthy"},
		{ReplicaFlags{Ejected: true, Healthy: true}, "ejected"},
		{ReplicaFlags{Misconfigured: true, Ejected: true}, "misconfigured"},
		{ReplicaFlags{Probing: true, Misconfigured: true}, "probing"},
		{ReplicaFlags{Retired: true, Probing: true, Healthy: true}, "draining"},
	} {
		if got := tc.f.State(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.f, got, tc.want)
		}
	}
}
