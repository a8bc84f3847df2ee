package admin

import (
	"crypto/sha256"
	"crypto/subtle"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/switchyard/switchyard/router/internal/wire"
)

// View is what the admin API reads of the gateway and may ask of it. The
// gateway implements it; the admin API knows nothing else of it.
type View interface {
	// Running is what the admin API reads of the running config.
	Running() Running
	// ConfigYAML is the running config as YAML, with its generation.
	ConfigYAML() ([]byte, int64, error)
	// Ready is the readiness answer: its status and document.
	Ready() (int, map[string]any)
	// Reload reloads the config: the generation running afterwards, and
	// for a refused config each of its problems and the whole error.
	Reload() (gen int64, problems []string, err error)
	// Explain answers POST /admin/explain for r.
	Explain(r *http.Request) (any, *wire.APIError)
	// Pools is every pool and replica as /admin/pools shows them.
	Pools(now time.Time) []PoolView
	// Control is the share controller's state; ok false without one.
	Control() (state any, ok bool)
	// Shadow is the shadow policy's summary, nil without one.
	Shadow() *ShadowSummary
	// LastReload is what the last reload came to, nil before any.
	LastReload() *ReloadOutcome
}

// Options are the admin API's fixed parts.
type Options struct {
	// Registry is gathered for /metrics and the status page's classifier
	// figures.
	Registry *prometheus.Registry
	// CacheHitRate is the classifier's cache hit rate from its
	// classifications by result (classifier.CacheHitRate, the one
	// definition); ok false when no classification asked the cache.
	CacheHitRate func(results map[string]float64) (rate float64, ok bool)
	Version      string
	// Started is when the gateway started; Now its clock.
	Started time.Time
	Now     func() time.Time
	// Ring is the status page's memory, recorded by the request path.
	Ring *Ring
}

type handler struct {
	view View
	Options
}

// Handler returns the admin API: /metrics, /admin/*, the probes and the
// status page.
func Handler(v View, o Options) http.Handler {
	h := &handler{view: v, Options: o}
	r := chi.NewRouter()
	r.Use(h.guard)
	r.Handle("/metrics", promhttp.HandlerFor(o.Registry, promhttp.HandlerOpts{Registry: o.Registry}))
	r.Post("/admin/reload", h.reload)
	r.Post("/admin/explain", h.explain)
	r.Get("/admin/pools", h.pools)
	r.Get("/admin/config", h.config)
	r.Get("/admin/control", h.control)
	r.Get("/admin/shadow", h.shadow)
	r.Get("/admin/status", h.status)
	r.Get("/", asset("index.html", "text/html; charset=utf-8"))
	r.Get("/status.js", asset("status.js", "text/javascript; charset=utf-8"))
	r.Get("/status.css", asset("status.css", "text/css; charset=utf-8"))
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		wire.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	r.Get("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		code, doc := v.Ready()
		wire.WriteJSON(w, code, doc)
	})
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		wire.WriteError(w, &wire.APIError{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "not_found",
			Message: "no such admin endpoint: " + wire.Clip(r.Method) + " " + wire.Clip(r.URL.Path)})
	})
	return r
}

// guard protects the admin API. With server.admin_token_env set,
// /admin/* (and /metrics with admin_token_metrics) need that bearer token;
// /healthz and /readyz stay open for probes. A state-changing call (any
// method but GET and HEAD) from a browser page of another origin is
// refused whatever the token, so a page the operator visits cannot reload
// the config or spend classifier calls.
func (h *handler) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead && crossOrigin(r) {
			wire.WriteError(w, &wire.APIError{Status: http.StatusForbidden, Type: "permission_error", Code: "cross_origin",
				Message: "cross-origin requests to the admin API are refused"})
			return
		}
		sc := h.view.Running()
		probe := r.URL.Path == "/healthz" || r.URL.Path == "/readyz"
		if sc.Token == nil && !probe && !trustedHost(r.Host, sc.AdminListen) {
			wire.WriteError(w, &wire.APIError{Status: http.StatusForbidden, Type: "permission_error", Code: "host_not_allowed",
				Message: "without an admin token the admin API answers only requests addressed to an IP address, localhost or its admin_listen host (Host " +
					strconv.Quote(wire.Clip(r.Host)) + "); set server.admin_token_env to reach it by another name"})
			return
		}
		guarded := strings.HasPrefix(r.URL.Path, "/admin/") || (r.URL.Path == "/metrics" && sc.TokenMetrics)
		if guarded && sc.Token != nil && !bearerIs(r, sc.Token) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="switchyard-admin"`)
			wire.WriteError(w, &wire.APIError{Status: http.StatusUnauthorized, Type: "invalid_request_error", Code: "invalid_api_key",
				Message: "the admin API needs Authorization: Bearer <admin token> (server.admin_token_env)"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// trustedHost reports whether a request's Host may reach an admin API that
// has no token: an IP address, localhost (or a name under .localhost,
// which browsers resolve to loopback themselves), or the host admin_listen
// names. A DNS rebinding attack makes a browser send the attacker's own
// domain name as Host, so a name outside these is refused, as Prometheus
// and Consul do.
func trustedHost(host, adminListen string) bool {
	h := host
	if hh, _, err := net.SplitHostPort(host); err == nil {
		h = hh
	}
	h = strings.TrimSuffix(strings.ToLower(strings.Trim(h, "[]")), ".")
	if h == "" {
		return false
	}
	if _, err := netip.ParseAddr(h); err == nil {
		return true
	}
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return true
	}
	if lh, _, err := net.SplitHostPort(adminListen); err == nil && strings.EqualFold(strings.TrimSuffix(lh, "."), h) {
		return true
	}
	return false
}

// crossOrigin reports whether a browser sent r from a page of another
// origin: Sec-Fetch-Site says so, or Origin names another host than the
// one r was sent to. Clients that are not browsers send neither.
func crossOrigin(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "cross-site", "same-site":
		return true
	}
	o := r.Header.Get("Origin")
	if o == "" {
		return false
	}
	u, err := url.Parse(o)
	return err != nil || !strings.EqualFold(u.Host, r.Host)
}

// bearerIs reports whether r carries the bearer token want, compared in
// constant time over digests.
func bearerIs(r *http.Request, want *[sha256.Size]byte) bool {
	h := r.Header.Get("Authorization")
	if len(h) < 7 || !strings.EqualFold(h[:7], "Bearer ") {
		return false
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(h[7:])))
	return subtle.ConstantTimeCompare(got[:], want[:]) == 1
}

func (h *handler) reload(w http.ResponseWriter, _ *http.Request) {
	gen, list, err := h.view.Reload()
	if err != nil {
		wire.WriteJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]any{
			"message": "config reload refused; the running config keeps serving", "type": "invalid_request_error",
			"code": "invalid_config", "param": nil, "errors": list}, "generation": gen})
		return
	}
	wire.WriteJSON(w, http.StatusOK, map[string]any{"generation": gen})
}

func (h *handler) explain(w http.ResponseWriter, r *http.Request) {
	e, ae := h.view.Explain(r)
	if ae != nil {
		wire.WriteError(w, ae)
		return
	}
	wire.WriteJSON(w, http.StatusOK, e)
}

func (h *handler) pools(w http.ResponseWriter, _ *http.Request) {
	run := h.view.Running()
	resp := map[string]any{"generation": run.Generation, "pools": h.view.Pools(h.Now())}
	if t := run.Topology; t != nil {
		resp["topology"] = t
	}
	wire.WriteJSON(w, http.StatusOK, resp)
}

// control shows the share controller's state.
func (h *handler) control(w http.ResponseWriter, _ *http.Request) {
	gen := h.view.Running().Generation
	state, ok := h.view.Control()
	if !ok {
		wire.WriteJSON(w, http.StatusOK, map[string]any{"enabled": false, "generation": gen})
		return
	}
	wire.WriteJSON(w, http.StatusOK, map[string]any{"enabled": true, "generation": gen, "share": state})
}

func (h *handler) shadow(w http.ResponseWriter, _ *http.Request) {
	if sum := h.view.Shadow(); sum != nil {
		wire.WriteJSON(w, http.StatusOK, sum)
		return
	}
	wire.WriteJSON(w, http.StatusOK, ShadowSummary{})
}

// config prints the running config as YAML. Secrets are never in it:
// keys are read from the environment and the config's secrets redact
// themselves (policy.Secret).
func (h *handler) config(w http.ResponseWriter, _ *http.Request) {
	out, gen, err := h.view.ConfigYAML()
	if err != nil {
		wire.WriteError(w, &wire.APIError{Status: http.StatusInternalServerError, Type: "internal_error", Code: "internal_error",
			Message: "could not render config"})
		return
	}
	w.Header().Set("Content-Type", "application/yaml")
	w.Header().Set("X-Switchyard-Generation", strconv.FormatInt(gen, 10))
	_, _ = w.Write([]byte("# generation " + strconv.FormatInt(gen, 10) + "\n"))
	_, _ = w.Write(out)
}
