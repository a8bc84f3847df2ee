package wire

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
)

// APIError is an error with its OpenAI shape and HTTP status. Every error
// that reaches a client goes through status() and WriteError().
type APIError struct {
	Status  int
	Type    string
	Code    string
	Param   string
	Message string
	// RetryAfter, in seconds, is sent as Retry-After when > 0.
	RetryAfter int
	cause      error
}

func (e *APIError) Error() string { return e.Message }

func (e *APIError) Unwrap() error { return e.cause }

// BadRequest is a 400 invalid_request_error about param.
func BadRequest(param, msg string) *APIError {
	return &APIError{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: param, Message: msg}
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

func (e *APIError) Body() []byte {
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
func (e *APIError) AnthropicBody() []byte {
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
func (e *APIError) ResponsesEvent(seq int64) []byte {
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

// WriteErrorFor writes e in the shape of the API ep speaks.
func WriteErrorFor(w http.ResponseWriter, ep Endpoint, e *APIError) {
	if ep.Anthropic() {
		writeBody(w, e, e.AnthropicBody())
		return
	}
	WriteError(w, e)
}

// WriteError writes err as an OpenAI-shaped JSON error.
func WriteError(w http.ResponseWriter, e *APIError) { writeBody(w, e, e.Body()) }

// writeBody writes body, the error e in some API's shape.
func writeBody(w http.ResponseWriter, e *APIError, body []byte) {
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

// WriteJSON writes v as an indented JSON answer with status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // reasons such as "queue > 8" stay readable
	_ = enc.Encode(v)
}
