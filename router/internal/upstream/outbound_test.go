package upstream

import (
	"net/http"
	"testing"
)

// TestIsEventStream: a 200 answer is a stream when its media type is
// text/event-stream in any case, with or without parameters, as
// mime.ParseMediaType reads it.
func TestIsEventStream(t *testing.T) {
	for _, tc := range []struct {
		name        string
		status      int
		contentType string
		want        bool
	}{
		{name: "plain", status: 200, contentType: "text/event-stream", want: true},
		{name: "charset", status: 200, contentType: "text/event-stream; charset=utf-8", want: true},
		{name: "upper case", status: 200, contentType: "TEXT/EVENT-STREAM", want: true},
		{name: "mixed case with parameter", status: 200, contentType: "Text/Event-Stream;Charset=UTF-8", want: true},
		{name: "spaces", status: 200, contentType: "text/event-stream ; charset=utf-8", want: true},
		{name: "malformed parameter", status: 200, contentType: "text/event-stream; charset", want: true},
		{name: "json", status: 200, contentType: "application/json", want: false},
		{name: "longer subtype", status: 200, contentType: "text/event-streams", want: false},
		{name: "prefix only", status: 200, contentType: "text/event", want: false},
		{name: "empty", status: 200, contentType: "", want: false},
		{name: "not ok", status: 500, contentType: "text/event-stream", want: false},
		{name: "accepted", status: 202, contentType: "text/event-stream", want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := &http.Response{StatusCode: tc.status, Header: http.Header{}}
			if tc.contentType != "" {
				resp.Header.Set("Content-Type", tc.contentType)
			}
			if got := IsEventStream(resp); got != tc.want {
				t.Errorf("IsEventStream(%d, %q) = %v, want %v", tc.status, tc.contentType, got, tc.want)
			}
		})
	}
}
