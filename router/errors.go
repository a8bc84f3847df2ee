package router

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"
)

// apiError is an error with its OpenAI shape and HTTP status. Every error
// that reaches a client goes through status() and writeError().
type apiError struct {
	Status  int
	Type    string
	Code    string
	Param   string
	Message string
	// RetryAfter, in seconds, is sent as Retry-After when > 0.
	RetryAfter int
	cause      error
}

func (e *apiError) Error() string { return e.Message }
func (e *apiError) Unwrap() error { return e.cause }

// Sentinel errors of the request path, mapped to statuses by toAPIError.
var (
	errUnauthorized  = errors.New("missing or unknown API key")
	errForbidden     = errors.New("API key not allowed")
	errModelNotFound = errors.New("model not found")
	errTooLarge      = errors.New("request body too large")
	errBodyTimeout   = errors.New("request body too slow")
	errRateLimited   = errors.New("rate limited")
	errNoReplica     = errors.New("no replica available")
	errUpstream      = errors.New("upstream failed")
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

// badRequest is a 400 invalid_request_error about param.
func badRequest(param, msg string) *apiError {
	return &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: param, Message: msg}
}

// toAPIError maps any error of the request path to its status and OpenAI
// shape. It is the one place that decides statuses.
func toAPIError(err error, detail string) *apiError {
	var uf *upstreamFailure
	if errors.As(err, &uf) {
		// A replica's refusal that no other replica took over: its status
		// class and message, in the gateway's shape.
		if uf.status == http.StatusTooManyRequests {
			err = &retryAfter{err: fmt.Errorf("%w: %s", errUpstream429, uf.msg), after: uf.retryAfter}
		} else {
			err = fmt.Errorf("%w: replica answered %d: %s", errUpstream, uf.status, uf.msg)
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

func mapError(err error, detail string) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	msg := err.Error()
	if detail != "" {
		msg = detail
	}
	switch {
	case errors.Is(err, errUnauthorized):
		return &apiError{Status: 401, Type: "authentication_error", Code: "invalid_api_key", Message: msg}
	case errors.Is(err, errForbidden):
		return &apiError{Status: 403, Type: "permission_error", Code: "model_not_allowed", Param: "model", Message: msg}
	case errors.Is(err, errModelNotFound):
		return &apiError{Status: 404, Type: "invalid_request_error", Code: "model_not_found", Param: "model", Message: msg}
	case errors.Is(err, errTooLarge):
		return &apiError{Status: 413, Type: "invalid_request_error", Code: "request_too_large", Message: msg}
	case errors.Is(err, errBodyTimeout):
		return &apiError{Status: http.StatusRequestTimeout, Type: "invalid_request_error", Code: "request_timeout", Message: msg}
	case errors.Is(err, errRateLimited):
		return &apiError{Status: 429, Type: "rate_limit_error", Code: "rate_limit_exceeded", Message: msg, RetryAfter: 1}
	case errors.Is(err, errUpstream429):
		return &apiError{Status: 429, Type: "rate_limit_error", Code: "upstream_rate_limited", Message: msg, RetryAfter: 1}
	case errors.Is(err, errNoReplica):
		return &apiError{Status: 503, Type: "service_unavailable", Code: "no_replica_available", Message: msg, RetryAfter: 1}
	case errors.Is(err, context.DeadlineExceeded), isTimeout(err):
		return &apiError{Status: 504, Type: "upstream_error", Code: "upstream_timeout", Message: msg}
	case errors.Is(err, errUpstream):
		return &apiError{Status: 502, Type: "upstream_error", Code: "upstream_failed", Message: msg}
	}
	return &apiError{Status: 500, Type: "internal_error", Code: "internal_error", Message: msg}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

type errorBody struct {
	Error errorFields `json:"error"`
}

type errorFields struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func (e *apiError) body() []byte {
	f := errorFields{Message: e.Message, Type: e.Type}
	if e.Param != "" {
		f.Param = &e.Param
	}
	if e.Code != "" {
		f.Code = &e.Code
	}
	return marshal(errorBody{Error: f}) // messages such as "queue > 8" stay readable
}

// marshal encodes v without HTML escaping and without a final newline.
func marshal(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// anthropicType is the Anthropic API's error type for an HTTP status.
func anthropicType(status int) string {
	switch status {
	case http.StatusBadRequest, http.StatusRequestTimeout, http.StatusMethodNotAllowed, http.StatusUnprocessableEntity:
		return "invalid_request_error"
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusServiceUnavailable, 529:
		return "overloaded_error"
	case http.StatusGatewayTimeout:
		return "timeout_error"
	}
	return "api_error"
}

// anthropicBody is the error in the Anthropic API's shape.
func (e *apiError) anthropicBody() []byte {
	type inner struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	}
	return marshal(struct {
		Type  string `json:"type"`
		Error inner  `json:"error"`
	}{"error", inner{anthropicType(e.Status), e.Message}})
}

// responsesEvent is the error as a Responses API stream error event.
func (e *apiError) responsesEvent(seq int64) []byte {
	var code, param *string
	if e.Code != "" {
		code = &e.Code
	}
	if e.Param != "" {
		param = &e.Param
	}
	return marshal(struct {
		Type     string  `json:"type"`
		Code     *string `json:"code"`
		Message  string  `json:"message"`
		Param    *string `json:"param"`
		Sequence int64   `json:"sequence_number"`
	}{"error", code, e.Message, param, seq})
}

// writeErrorFor writes e in the shape of the API ep speaks.
func writeErrorFor(w http.ResponseWriter, ep endpoint, e *apiError) {
	if ep.anthropic() {
		writeBody(w, e, e.anthropicBody())
		return
	}
	writeError(w, e)
}

// writeError writes err as an OpenAI-shaped JSON error.
func writeError(w http.ResponseWriter, e *apiError) { writeBody(w, e, e.body()) }

// writeBody writes body, the error e in some API's shape.
func writeBody(w http.ResponseWriter, e *apiError, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if e.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	if e.Status == http.StatusRequestTimeout {
		h.Set("Connection", "close") // the rest of the body may still be coming
	}
	h.Del("Content-Length")
	w.WriteHeader(e.Status)
	_, _ = w.Write(append(body, '\n'))
}
