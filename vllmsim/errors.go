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

// writeError answers e with vLLM's body:
// {"error":{"message":…,"type":…,"param":null,"code":status}}.
// It is the one place that maps simulator errors to HTTP.
func writeError(w http.ResponseWriter, e *apiError) {
	b := make([]byte, 0, 96+len(e.message))
	b = append(b, `{"error":{"message":`...)
	b = appendString(b, e.message)
	b = append(b, `,"type":`...)
	b = appendString(b, errorType(e.status))
	b = append(b, `,"param":null,"code":`...)
	b = strconv.AppendInt(b, int64(e.status), 10)
	b = append(b, "}}"...)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(e.status)
	_, _ = w.Write(b)
}
