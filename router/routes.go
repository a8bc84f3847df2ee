package router

import (
	"fmt"
	"net/http"
	"sort"
	"time"

	"github.com/switchyard/switchyard/router/internal/wire"

	"github.com/go-chi/chi/v5"
)

// Handler returns the client-facing API.
func (g *Gateway) Handler() http.Handler {
	r := chi.NewRouter()
	r.Post("/v1/chat/completions", g.chat)
	r.Post("/v1/completions", g.completions)
	r.Post("/v1/responses", g.endpointHandler(wire.Responses))
	r.Get("/v1/responses/{id}", g.storedHandler(""))
	r.Delete("/v1/responses/{id}", g.storedHandler(""))
	r.Post("/v1/responses/{id}/cancel", g.storedHandler("/cancel"))
	r.Post("/v1/messages", g.endpointHandler(wire.Messages))
	r.Post("/v1/messages/count_tokens", g.endpointHandler(wire.CountTokens))
	r.Post("/v1/embeddings", g.endpointHandler(wire.Embeddings))
	r.Post("/tokenize", g.endpointHandler(wire.Tokenize))
	r.Post("/detokenize", g.endpointHandler(wire.Detokenize))
	r.Get("/v1/models", g.listModels)
	r.Get("/v1/models/{id}", g.getModel)
	// Claude Code checks that the server answers before its first call.
	r.Head("/", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		wire.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	r.Get("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		code, doc := g.readiness()
		wire.WriteJSON(w, code, doc)
	})
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		wire.WriteErrorFor(w, apiOf(r), &wire.APIError{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "not_found",
			Message: "no such endpoint: " + wire.Clip(r.Method) + " " + wire.Clip(r.URL.Path)})
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		wire.WriteErrorFor(w, apiOf(r), &wire.APIError{Status: http.StatusMethodNotAllowed, Type: "invalid_request_error", Code: "method_not_allowed",
			Message: "method " + wire.Clip(r.Method) + " is not allowed on " + wire.Clip(r.URL.Path)})
	})
	return g.bounded(false, r)
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
	key, err := s.keys.Authenticate(r)
	if err != nil {
		wire.WriteErrorFor(w, ep, toAPIError(err, ""))
		return
	}
	names := make([]string, 0, len(s.models))
	for n := range s.models {
		if key.Allows(n) {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	created := g.opts.Now()
	if ep.Anthropic() {
		data := make([]anthropicModel, len(names))
		for i, n := range names {
			data[i] = newAnthropicModel(n, created)
		}
		var first, last *string
		if len(names) > 0 {
			first, last = &names[0], &names[len(names)-1]
		}
		wire.WriteJSON(w, http.StatusOK, map[string]any{"data": data, "has_more": false, "first_id": first, "last_id": last})
		return
	}
	data := make([]modelEntry, len(names))
	for i, n := range names {
		data[i] = modelEntry{ID: n, Object: "model", Created: created.Unix(), OwnedBy: "switchyard"}
	}
	wire.WriteJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
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
	key, err := s.keys.Authenticate(r)
	if err != nil {
		wire.WriteErrorFor(w, ep, toAPIError(err, ""))
		return
	}
	id := chi.URLParam(r, "id")
	if _, ok := s.resolve(id); !ok || !key.Allows(id) {
		wire.WriteErrorFor(w, ep, toAPIError(fmt.Errorf("%w: the model `%s` does not exist", errModelNotFound, wire.Clip(id)), ""))
		return
	}
	if ep.Anthropic() {
		wire.WriteJSON(w, http.StatusOK, newAnthropicModel(id, g.opts.Now()))
		return
	}
	wire.WriteJSON(w, http.StatusOK, modelEntry{ID: id, Object: "model", Created: g.opts.Now().Unix(), OwnedBy: "switchyard"})
}

// readiness is the answer of /readyz on both listeners.
func (g *Gateway) readiness() (int, map[string]any) {
	s := g.snap.Load()
	if s == nil {
		return http.StatusServiceUnavailable, map[string]any{"status": "not ready", "reason": "no config loaded"}
	}
	if g.draining.Load() {
		return http.StatusServiceUnavailable, map[string]any{"status": "not ready", "reason": "draining: shutting down", "generation": s.Generation}
	}
	if why := s.readiness(); why != "" {
		return http.StatusServiceUnavailable, map[string]any{"status": "not ready", "reason": why, "generation": s.Generation}
	}
	return http.StatusOK, map[string]any{"status": "ready", "generation": s.Generation}
}
