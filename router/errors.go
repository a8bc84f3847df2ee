package router

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/switchyard/switchyard/router/internal/keys"
	"github.com/switchyard/switchyard/router/internal/upstream"

	"github.com/switchyard/switchyard/router/internal/wire"
)

// Sentinel errors of the request path, mapped to statuses by toAPIError.
var (
	errUnauthorized  = keys.ErrUnauthorized
	errForbidden     = errors.New("API key not allowed")
	errModelNotFound = errors.New("model not found")
	errTooLarge      = errors.New("request body too large")
	errBodyTimeout   = errors.New("request body too slow")
	errRateLimited   = keys.ErrRateLimited
	errUpstream429   = errors.New("upstream rate limited")
)

// retryAfter carries how long a client should wait before trying again: the
// time until the key's token bucket has a token, or the largest
// Retry-After of the replicas that answered 429.
type retryAfter struct {
	err   error
	after time.Duration
}

func (r *retryAfter) Error() string { return r.err.Error() }
func (r *retryAfter) Unwrap() error { return r.err }

// retryAfterSeconds rounds d up to whole seconds, at least 1.
func retryAfterSeconds(d time.Duration) int {
	return max(1, int((d+time.Second-1)/time.Second))
}

// toAPIError maps any error of the request path to its status and OpenAI
// shape. It is the one place that decides statuses.
func toAPIError(err error, detail string) *wire.APIError {
	var uf *upstream.Failure
	if errors.As(err, &uf) {
		// A replica's refusal that no other replica took over: its status
		// class and message, in the gateway's shape.
		if uf.Status == http.StatusTooManyRequests {
			err = &retryAfter{err: fmt.Errorf("%w: %s", errUpstream429, uf.Msg), after: uf.RetryAfter}
		} else {
			err = fmt.Errorf("%w: replica answered %d: %s", upstream.ErrUpstream, uf.Status, uf.Msg)
		}
		detail = ""
	}
	ae := mapError(err, detail)
	var ra *retryAfter
	if errors.As(err, &ra) && ae.RetryAfter > 0 {
		ae.RetryAfter = retryAfterSeconds(ra.after)
	}
	return ae
}

func mapError(err error, detail string) *wire.APIError {
	var ae *wire.APIError
	if errors.As(err, &ae) {
		return ae
	}
	msg := err.Error()
	if detail != "" {
		msg = detail
	}
	switch {
	case errors.Is(err, errUnauthorized):
		return &wire.APIError{Status: 401, Type: "authentication_error", Code: "invalid_api_key", Message: msg}
	case errors.Is(err, errForbidden):
		return &wire.APIError{Status: 403, Type: "permission_error", Code: "model_not_allowed", Param: "model", Message: msg}
	case errors.Is(err, errModelNotFound):
		return &wire.APIError{Status: 404, Type: "invalid_request_error", Code: "model_not_found", Param: "model", Message: msg}
	case errors.Is(err, errTooLarge):
		return &wire.APIError{Status: 413, Type: "invalid_request_error", Code: "request_too_large", Message: msg}
	case errors.Is(err, errBodyTimeout):
		return &wire.APIError{Status: http.StatusRequestTimeout, Type: "invalid_request_error", Code: "request_timeout", Message: msg}
	case errors.Is(err, errRateLimited):
		return &wire.APIError{Status: 429, Type: "rate_limit_error", Code: "rate_limit_exceeded", Message: msg, RetryAfter: 1}
	case errors.Is(err, errUpstream429):
		return &wire.APIError{Status: 429, Type: "rate_limit_error", Code: "upstream_rate_limited", Message: msg, RetryAfter: 1}
	case errors.Is(err, upstream.ErrNoReplica):
		return &wire.APIError{Status: 503, Type: "service_unavailable", Code: "no_replica_available", Message: msg, RetryAfter: 1}
	case errors.Is(err, context.DeadlineExceeded), upstream.IsTimeout(err):
		return &wire.APIError{Status: 504, Type: "upstream_error", Code: "upstream_timeout", Message: msg}
	case errors.Is(err, upstream.ErrUpstream):
		return &wire.APIError{Status: 502, Type: "upstream_error", Code: "upstream_failed", Message: msg}
	}
	return &wire.APIError{Status: 500, Type: "internal_error", Code: "internal_error", Message: msg}
}

// apiOf guesses the API a request outside the known endpoints speaks:
// Anthropic's when it sends anthropic-version or asks under /v1/messages.
func apiOf(r *http.Request) wire.Endpoint {
	if r.Header.Get("Anthropic-Version") != "" || strings.HasPrefix(r.URL.Path, "/v1/messages") {
		return wire.Messages
	}
	return wire.Chat
}
