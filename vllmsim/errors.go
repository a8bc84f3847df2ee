package vllmsim

import (
	"fmt"
	"net/http"
	"strconv"
)

// apiError is an error answered to the client with vLLM's error body.
type apiError struct {
	status  int
	message string
	// typ, when set, replaces the type errorType derives from the status
	// (vLLM's Responses endpoint names some errors "invalid_request_error").
	typ string
	// param, when set, is the body's "param" (null otherwise).
	param string
	// validation marks an error in the request's shape, which vLLM's FastAPI
	// layer answers before an endpoint's handler runs, in the OpenAI shape
	// whatever the endpoint (also on /v1/messages).
	validation bool
}

func badRequest(format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, message: fmt.Sprintf(format, args...)}
}

// errorType is the "type" vLLM gives an error of this status (the class name
// of the matching OpenAI Python exception).
func errorType(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "BadRequestError"
	case http.StatusUnauthorized:
		return "AuthenticationError"
	case http.StatusForbidden:
		return "PermissionDeniedError"
	case http.StatusNotFound:
		return "NotFoundError"
	case http.StatusConflict:
		return "ConflictError"
	case http.StatusRequestEntityTooLarge:
		return "RequestEntityTooLargeError"
	case http.StatusUnprocessableEntity:
		return "UnprocessableEntityError"
	case http.StatusTooManyRequests:
		return "RateLimitError"
	case http.StatusServiceUnavailable:
		return "ServiceUnavailableError"
	}
	if status >= 500 {
		return "InternalServerError"
	}
	return "BadRequestError"
}

// typeName is the "type" of e's body.
func (e *apiError) typeName() string {
	if e.typ != "" {
		return e.typ
	}
	return errorType(e.status)
}

// writeError answers e with vLLM's body:
// {"error":{"message":…,"type":…,"param":null,"code":status}}.
// It and writeAnthropicError are the places that map simulator errors to
// HTTP.
func writeError(w http.ResponseWriter, e *apiError) {
	b := make([]byte, 0, 96+len(e.message))
	b = append(b, `{"error":{"message":`...)
	b = appendString(b, e.message)
	b = append(b, `,"type":`...)
	b = appendString(b, e.typeName())
	b = append(b, `,"param":`...)
	if e.param != "" {
		b = appendString(b, e.param)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"code":`...)
	b = strconv.AppendInt(b, int64(e.status), 10)
	b = append(b, "}}"...)
	writeJSON(w, e.status, b)
}

// writeJSON answers status with the JSON body b.
func writeJSON(w http.ResponseWriter, status int, b []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
