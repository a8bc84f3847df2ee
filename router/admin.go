package router

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/switchyard/switchyard/policy"
	"github.com/switchyard/switchyard/pools"
)

// Handler returns the client-facing API.
func (g *Gateway) Handler() http.Handler {
	r := chi.NewRouter()
	r.Post("/v1/chat/completions", g.chat)
	r.Post("/v1/completions", g.completions)
	r.Post("/v1/responses", g.endpointHandler(responsesEndpoint))
	r.Get("/v1/responses/{id}", g.storedHandler(""))
	r.Delete("/v1/responses/{id}", g.storedHandler(""))
	r.Post("/v1/responses/{id}/cancel", g.storedHandler("/cancel"))
	r.Post("/v1/messages", g.endpointHandler(messagesEndpoint))
	r.Post("/v1/messages/count_tokens", g.endpointHandler(countTokensEndpoint))
	r.Post("/v1/embeddings", g.endpointHandler(embeddingsEndpoint))
	r.Post("/tokenize", g.endpointHandler(tokenizeEndpoint))
	r.Post("/detokenize", g.endpointHandler(detokenizeEndpoint))
	r.Get("/v1/models", g.listModels)
	r.Get("/v1/models/{id}", g.getModel)
	// Claude Code checks that the server answers before its first call.
	r.Head("/", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	r.Get("/readyz", g.ready)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		writeErrorFor(w, apiOf(r), &apiError{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "not_found",
			Message: "no such endpoint: " + clip(r.Method) + " " + clip(r.URL.Path)})
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		writeErrorFor(w, apiOf(r), &apiError{Status: http.StatusMethodNotAllowed, Type: "invalid_request_error", Code: "method_not_allowed",
			Message: "method " + clip(r.Method) + " is not allowed on " + clip(r.URL.Path)})
	})
	return g.bounded(false, r)
}

// apiOf guesses the API a request outside the known endpoints speaks:
// Anthropic's when it sends anthropic-version or asks under /v1/messages.
func apiOf(r *http.Request) endpoint {
	if r.Header.Get("Anthropic-Version") != "" || strings.HasPrefix(r.URL.Path, "/v1/messages") {
		return messagesEndpoint
	}
	return chatEndpoint
}

// AdminHandler returns the admin API.
func (g *Gateway) AdminHandler() http.Handler {
	r := chi.NewRouter()
	r.Use(g.adminGuard)
	r.Handle("/metrics", promhttp.HandlerFor(g.reg, promhttp.HandlerOpts{Registry: g.reg}))
	r.Post("/admin/reload", g.adminReload)
	r.Post("/admin/explain", g.adminExplain)
	r.Get("/admin/pools", g.adminPools)
	r.Get("/admin/config", g.adminConfig)
	r.Get("/admin/control", g.adminControl)
	r.Get("/admin/shadow", g.adminShadow)
	r.Get("/admin/status", g.adminStatus)
	r.Get("/", statusAsset("index.html", "text/html; charset=utf-8"))
	r.Get("/status.js", statusAsset("status.js", "text/javascript; charset=utf-8"))
	r.Get("/status.css", statusAsset("status.css", "text/css; charset=utf-8"))
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	r.Get("/readyz", g.ready)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &apiError{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "not_found",
			Message: "no such admin endpoint: " + clip(r.Method) + " " + clip(r.URL.Path)})
	})
	return g.bounded(true, r)
}

// adminGuard protects the admin API. With server.admin_token_env set,
// /admin/* (and /metrics with admin_token_metrics) need that bearer token;
// /healthz and /readyz stay open for probes. A state-changing call (any
// method but GET and HEAD) from a browser page of another origin is
// refused whatever the token, so a page the operator visits cannot reload
// the config or spend classifier calls.
func (g *Gateway) adminGuard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead && crossOrigin(r) {
			writeError(w, &apiError{Status: http.StatusForbidden, Type: "permission_error", Code: "cross_origin",
				Message: "cross-origin requests to the admin API are refused"})
			return
		}
		sc := &g.snap.Load().Config.Server
		probe := r.URL.Path == "/healthz" || r.URL.Path == "/readyz"
		if sc.AdminToken == "" && !probe && !trustedHost(r.Host, sc.AdminListen) {
			writeError(w, &apiError{Status: http.StatusForbidden, Type: "permission_error", Code: "host_not_allowed",
				Message: "without an admin token the admin API answers only requests addressed to an IP address, localhost or its admin_listen host (Host " +
					strconv.Quote(clip(r.Host)) + "); set server.admin_token_env to reach it by another name"})
			return
		}
		guarded := strings.HasPrefix(r.URL.Path, "/admin/") || (r.URL.Path == "/metrics" && sc.AdminTokenMetrics)
		if guarded && sc.AdminToken != "" && !bearerIs(r, string(sc.AdminToken)) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="switchyard-admin"`)
			writeError(w, &apiError{Status: http.StatusUnauthorized, Type: "invalid_request_error", Code: "invalid_api_key",
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
func bearerIs(r *http.Request, want string) bool {
	h := r.Header.Get("Authorization")
	if len(h) < 7 || !strings.EqualFold(h[:7], "Bearer ") {
		return false
	}
	got, exp := sha256.Sum256([]byte(strings.TrimSpace(h[7:]))), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(got[:], exp[:]) == 1
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // reasons such as "queue > 8" stay readable
	_ = enc.Encode(v)
}

type modelEntry struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// listModels lists the routable names, filtered by the API
// key's allow-list when auth is on.
func (g *Gateway) listModels(w http.ResponseWriter, r *http.Request) {
	s := g.snap.Load()
	ep := apiOf(r)
	key, err := s.authenticate(r)
	if err != nil {
		writeErrorFor(w, ep, toAPIError(err, ""))
		return
	}
	names := make([]string, 0, len(s.models))
	for n := range s.models {
		if key.allows(n) {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	created := g.opts.Now()
	if ep.anthropic() {
		data := make([]anthropicModel, len(names))
		for i, n := range names {
			data[i] = newAnthropicModel(n, created)
		}
		var first, last *string
		if len(names) > 0 {
			first, last = &names[0], &names[len(names)-1]
		}
		writeJSON(w, http.StatusOK, map[string]any{"data": data, "has_more": false, "first_id": first, "last_id": last})
		return
	}
	data := make([]modelEntry, len(names))
	for i, n := range names {
		data[i] = modelEntry{ID: n, Object: "model", Created: created.Unix(), OwnedBy: "switchyard"}
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

// anthropicModel is a model in the Anthropic API's shape.
type anthropicModel struct {
	Type        string `json:"type"`
	ID          string `json:"id"`
	DisplayName string `json:"display_name"`
	CreatedAt   string `json:"created_at"`
}

func newAnthropicModel(id string, at time.Time) anthropicModel {
	return anthropicModel{Type: "model", ID: id, DisplayName: id, CreatedAt: at.UTC().Format(time.RFC3339)}
}

// getModel answers GET /v1/models/{id} for any name the gateway routes,
// pattern matches included, in the shape of the API the client speaks.
func (g *Gateway) getModel(w http.ResponseWriter, r *http.Request) {
	s := g.snap.Load()
	ep := apiOf(r)
	key, err := s.authenticate(r)
	if err != nil {
		writeErrorFor(w, ep, toAPIError(err, ""))
		return
	}
	id := chi.URLParam(r, "id")
	if _, ok := s.resolve(id); !ok || !key.allows(id) {
		writeErrorFor(w, ep, toAPIError(fmt.Errorf("%w: the model `%s` does not exist", errModelNotFound, clip(id)), ""))
		return
	}
	if ep.anthropic() {
		writeJSON(w, http.StatusOK, newAnthropicModel(id, g.opts.Now()))
		return
	}
	writeJSON(w, http.StatusOK, modelEntry{ID: id, Object: "model", Created: g.opts.Now().Unix(), OwnedBy: "switchyard"})
}

func (g *Gateway) ready(w http.ResponseWriter, _ *http.Request) {
	s := g.snap.Load()
	if s == nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready", "reason": "no config loaded"})
		return
	}
	if g.draining.Load() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "not ready", "reason": "draining: shutting down", "generation": s.Generation})
		return
	}
	if why := s.readiness(); why != "" {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "not ready", "reason": why, "generation": s.Generation})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"status": "ready", "generation": s.Generation})
}

func (g *Gateway) adminReload(w http.ResponseWriter, _ *http.Request) {
	gen, err := g.Reload()
	if err != nil {
		var errs policy.Errors
		list := []string{err.Error()}
		if errors.As(err, &errs) {
			list = list[:0]
			for _, e := range errs {
				list = append(list, e.Error())
			}
		}
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]any{
			"message": "config reload refused; the running config keeps serving", "type": "invalid_request_error",
			"code": "invalid_config", "param": nil, "errors": list}, "generation": gen})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"generation": gen})
}

// Explanation is the answer of explain.
type Explanation struct {
	Route    string             `json:"route"`
	Pool     string             `json:"pool"`
	Replica  string             `json:"replica,omitempty"`
	Class    string             `json:"class,omitempty"`
	Scores   map[string]float64 `json:"scores"`
	Matched  []string           `json:"matched"`
	Skipped  []policy.Skip      `json:"skipped"`
	Fallback []string           `json:"fallback"`
	Spill    *policy.Spill      `json:"spill,omitempty"`
	Sticky   bool               `json:"sticky,omitempty"`
	// Why are the matched route's conditions that held, with the
	// request's values.
	Why []string `json:"why,omitempty"`
	// Side: a side route decided the request (routed on its own, the
	// session's decision unchanged).
	Side bool `json:"side,omitempty"`
	// Session is what the session store would do (new, kept, moved_up,
	// side, not_kept) and SessionReason says it in words; both absent
	// without a session id.
	Session       string `json:"session,omitempty"`
	SessionReason string `json:"session_reason,omitempty"`
	// ContextSkips are the pools of the chain the request would skip
	// because its prompt estimate and a minimal answer cannot fit their
	// max_model_len (the last pool of the chain is never skipped).
	ContextSkips []string `json:"context_skips,omitempty"`
	// Classifier says how the class was obtained when the classifier was
	// asked; Fallback is true when it could not answer and on_error's
	// label was used.
	Classifier *ClassifierOutcome `json:"classifier,omitempty"`
}

// ClassifierOutcome is the classifier's part of an explanation.
type ClassifierOutcome struct {
	Result   string `json:"result"`
	Fallback bool   `json:"fallback"`
	Error    string `json:"error,omitempty"`
}

// Explain says which route, pool and replica a request body would get and
// why. With class set, the classifier is not called; without it the
// classifier runs as for a request (and is counted and cached like one).
// No request is sent to a replica, no session decision is stored, and no
// API key is presented, so key conditions do not match.
func (g *Gateway) Explain(ctx context.Context, header http.Header, body []byte, class string) (*Explanation, error) {
	return g.ExplainAPI(ctx, header, body, class, "")
}

// ExplainAPI is Explain for a body of api (chat, completions, responses or
// messages); "" detects it from the body (DetectAPI) or, with an
// anthropic-version header, takes the Messages API. The decision is made
// as serving makes it (the same policy request, session and sticky
// decision); class, when set, stands in for the classifier's answer.
func (g *Gateway) ExplainAPI(ctx context.Context, header http.Header, body []byte, class, api string) (*Explanation, error) {
	s := g.snap.Load()
	if api == "" {
		api = string(DetectAPI(body))
		if header.Get("Anthropic-Version") != "" {
			api = string(APIMessages)
		}
	}
	ep, ok := apiEndpoints[API(api)]
	if !ok {
		names := make([]string, 0, len(apiEndpoints))
		for _, a := range APIs() {
			names = append(names, string(a))
		}
		return nil, badRequest("api", fmt.Sprintf("unknown API %q (known: %s)", clip(api), strings.Join(names, ", ")))
	}
	info, err := parseRequest(body, ep, s.Config.Server.MaxJSONDepth)
	if err != nil {
		return nil, err
	}
	x := &exchange{snap: s, info: info, body: body, id: "explain", ep: ep}
	tgt, ok := s.resolve(info.Model)
	if !ok {
		return nil, toAPIError(errModelNotFound, "the model `"+clip(info.Model)+"` does not exist")
	}
	if class != "" && s.classifier != nil && !slices.Contains(s.classifier.Labels(), class) {
		return nil, badRequest("class", fmt.Sprintf("class %q is not a label (labels: %s)", clip(class), strings.Join(s.classifier.Labels(), ", ")))
	}
	var d policy.Decision
	r := (&http.Request{Header: header}).WithContext(ctx)
	if r.Header == nil {
		r.Header = http.Header{}
	}
	if !tgt.policy {
		d = policy.Decision{Route: "direct", Pools: []string{tgt.pool.Name}, Matched: []string{"direct"}}
	} else {
		x.forceClass = class
		d = g.decide(ctx, r, x, true)
	}
	e := &Explanation{Route: d.Route, Pool: d.Pools[0], Fallback: d.Pools[1:], Matched: d.Matched, Skipped: d.Skipped,
		Spill: d.Spill, Sticky: d.Sticky, Scores: d.Scores, Why: d.Why, Side: d.Side, Session: d.Session, SessionReason: d.SessionReason}
	for i, p := range d.Pools[:len(d.Pools)-1] {
		if ps := s.pools[p]; ps != nil && !fitsContext(ps, x) {
			e.ContextSkips = append(e.ContextSkips, d.Pools[i])
		}
	}
	e.Scores = rounded(e.Scores)
	if e.Scores == nil {
		e.Scores = map[string]float64{}
	}
	if e.Matched == nil {
		e.Matched = []string{}
	}
	if e.Skipped == nil {
		e.Skipped = []policy.Skip{}
	}
	if d.Classified {
		e.Class = d.Class
	}
	if r := x.classRes; r.Outcome != "" {
		e.Classifier = &ClassifierOutcome{Result: r.Outcome, Fallback: r.Fallback()}
		if r.Err != nil {
			e.Classifier.Error = r.Err.Error()
		}
	}
	if ps := s.pools[e.Pool]; ps != nil {
		preq := &pools.Request{}
		if ps.NeedsKey() {
			preq.Key = affinityKey(x, r, ps.cfg.Affinity.Depth)
		}
		if rep := ps.Pick(preq); rep != nil {
			e.Replica = rep.Name
		}
	}
	return e, nil
}

func (g *Gateway) adminExplain(w http.ResponseWriter, r *http.Request) {
	s := g.snap.Load()
	body, err := readBody(r, int64(s.Config.Server.MaxBodyBytes))
	if err != nil {
		writeError(w, toAPIError(err, ""))
		return
	}
	e, err := g.ExplainAPI(r.Context(), r.Header, body, r.URL.Query().Get("class"), r.URL.Query().Get("api"))
	if err != nil {
		writeError(w, toAPIError(err, ""))
		return
	}
	writeJSON(w, http.StatusOK, e)
}

type replicaView struct {
	Name string `json:"name"`
	URL  string `json:"url"`
	// Source is where the replica came from: config (listed), dns or srv
	// (discovered).
	Source string   `json:"source"`
	Nodes  []string `json:"nodes,omitempty"`
	// State is one word for the replica: probing (new, no probe passed
	// yet), healthy, unhealthy, ejected, misconfigured or draining
	// (removed by a reload, finishing its requests).
	State   string `json:"state"`
	Healthy bool   `json:"healthy"`
	Ejected bool   `json:"ejected"`
	// Misconfigured: the server refused the pool's key or does not serve
	// the pool's model (why says which).
	Misconfigured bool   `json:"misconfigured"`
	Why           string `json:"why,omitempty"`
	// Inflight counts requests on the server over every pool listing it;
	// Waiting those queued for one of its slots.
	Inflight   int64    `json:"inflight"`
	Waiting    int64    `json:"waiting"`
	Queue      *float64 `json:"queue,omitempty"`
	Running    *float64 `json:"running,omitempty"`
	KVUsage    *float64 `json:"kv_cache_usage,omitempty"`
	LastScrape string   `json:"last_scrape,omitempty"`
	ScrapeErr  string   `json:"scrape_error,omitempty"`
	Missing    []string `json:"missing_signals,omitempty"`
	Ejections  int64    `json:"ejections"`
	// EjectedUntil, while ejected, is when the ejection ends.
	EjectedUntil *time.Time `json:"ejected_until,omitempty"`
	LastError    string     `json:"last_error,omitempty"`
	// Recent is the replica's outcomes over the last minute, as the
	// gateway saw them (its requests, error rate, time to first token).
	Recent replicaStats `json:"recent"`
}

type poolView struct {
	Name        string        `json:"name"`
	Model       string        `json:"model"`
	Balance     string        `json:"balance"`
	MaxInflight int           `json:"max_inflight"`
	Healthy     int           `json:"healthy_replicas"`
	Replicas    []replicaView `json:"replicas"`
	// Discovery is set for a pool whose replicas come from DNS.
	Discovery *discoveryView `json:"discovery,omitempty"`
}

// rounded returns scores rounded to 3 decimals, for people to read
// (0.85, not 0.8500000000000001).
func rounded(scores map[string]float64) map[string]float64 {
	if scores == nil {
		return nil
	}
	out := make(map[string]float64, len(scores))
	for k, v := range scores {
		out[k] = math.Round(v*1000) / 1000
	}
	return out
}

// replicaState is the one word /admin/pools shows for a replica, the most
// telling first.
func replicaState(rep *pools.Replica, now time.Time) string {
	switch {
	case rep.Retired():
		return "draining"
	case rep.Probing():
		return "probing"
	case rep.Misconfigured():
		return "misconfigured"
	case rep.Ejected(now):
		return "ejected"
	case !rep.Healthy():
		return "unhealthy"
	}
	return "healthy"
}

func (g *Gateway) adminPools(w http.ResponseWriter, _ *http.Request) {
	s := g.snap.Load()
	resp := map[string]any{"generation": s.Generation, "pools": g.poolViews(s, g.opts.Now())}
	if t := s.Config.Topology; t != nil {
		resp["topology"] = t
	}
	writeJSON(w, http.StatusOK, resp)
}

// poolViews is every pool and replica of s as /admin/pools and the status
// page show them.
func (g *Gateway) poolViews(s *Snapshot, now time.Time) []poolView {
	out := make([]poolView, 0, len(s.poolOrder))
	for _, ps := range s.poolOrder {
		pv := poolView{Name: ps.Name, Model: ps.Model, Balance: ps.Balance(), MaxInflight: ps.MaxInflight(), Healthy: ps.HealthyCount(),
			Discovery: s.discoveryView(ps.Name), Replicas: []replicaView{}}
		source := replicaSource(ps.cfg)
		for _, rep := range ps.Replicas() {
			lastErr, why := rep.LastError()
			rv := replicaView{Name: rep.Name, URL: rep.URL().String(), Source: source, Nodes: rep.Nodes, State: replicaState(rep, now), Healthy: rep.Healthy(),
				Ejected: rep.Ejected(now), Misconfigured: rep.Misconfigured(), Why: why, Inflight: rep.Inflight(),
				Waiting: rep.Waiting(), Ejections: rep.Ejections(), LastError: lastErr,
				Recent: g.status.replica(rep.Endpoint, now, time.Minute)}
			if rv.Ejected {
				u := rep.EjectedUntil().UTC()
				rv.EjectedUntil = &u
			}
			if l := rep.CurrentLoad(); l != nil {
				rv.LastScrape = l.At.UTC().Format(time.RFC3339Nano)
				rv.ScrapeErr = l.Err
				if l.Err == "" {
					rv.Missing = l.Missing()
					if l.HasQueue {
						rv.Queue = &l.Waiting
					}
					if l.HasRunning {
						rv.Running = &l.Running
					}
					if l.HasKV {
						rv.KVUsage = &l.KVUsage
					}
				}
			}
			pv.Replicas = append(pv.Replicas, rv)
		}
		out = append(out, pv)
	}
	return out
}

// adminControl shows the share controller's state.
func (g *Gateway) adminControl(w http.ResponseWriter, _ *http.Request) {
	s := g.snap.Load()
	ctrl := s.Policy.Controller()
	if ctrl == nil {
		writeJSON(w, http.StatusOK, map[string]any{"enabled": false, "generation": s.Generation})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"enabled": true, "generation": s.Generation, "share": ctrl.State()})
}

// adminConfig prints the running config as YAML. Secrets are never in it:
// keys are read from the environment and policy.Secret redacts itself.
func (g *Gateway) adminConfig(w http.ResponseWriter, _ *http.Request) {
	s := g.snap.Load()
	out, err := policy.Render(s.Config)
	if err != nil {
		writeError(w, toAPIError(err, "could not render config"))
		return
	}
	w.Header().Set("Content-Type", "application/yaml")
	w.Header().Set("X-Switchyard-Generation", itoa(s.Generation))
	_, _ = w.Write([]byte("# generation " + itoa(s.Generation) + "\n"))
	_, _ = w.Write(out)
}
