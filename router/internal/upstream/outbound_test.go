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

// TestSetForwarded: the replica learns the client's address after any
// proxy's, in X-Forwarded-For and Forwarded; a client's Forwarded value
// with an open quote, which would swallow the gateway's element, is
// dropped.
func TestSetForwarded(t *testing.T) {
	for _, tc := range []struct{ name, xff, fwd, wantXFF, wantFwd string }{
		{"plain", "", "", "127.0.0.1", "for=127.0.0.1;proto=http"},
		{"after a proxy", "203.0.113.9", "for=203.0.113.9", "203.0.113.9, 127.0.0.1", "for=203.0.113.9, for=127.0.0.1;proto=http"},
		{"malformed Forwarded", "", `for="x`, "127.0.0.1", "for=127.0.0.1;proto=http"},
	} {
		in := &http.Request{RemoteAddr: "127.0.0.1:5000", Host: "gw.example"}
		dst := http.Header{}
		if tc.xff != "" {
			dst.Set("X-Forwarded-For", tc.xff)
		}
		if tc.fwd != "" {
			dst.Set("Forwarded", tc.fwd)
		}
		SetForwarded(dst, in)
		if dst.Get("X-Forwarded-For") != tc.wantXFF || dst.Get("Forwarded") != tc.wantFwd ||
			dst.Get("X-Forwarded-Proto") != "http" || dst.Get("X-Forwarded-Host") != "gw.example" {
			t.Errorf("%s: %v", tc.name, dst)
		}
	}
}

// TestCopyRequestHeaders: hop-by-hop headers, those the client names in
// Connection and its credentials for the gateway are not forwarded.
func TestCopyRequestHeaders(t *testing.T) {
	src := http.Header{"Connection": {"X-Hop, keep-alive"}, "X-Hop": {"1"}, "Keep-Alive": {"timeout=5"},
		"Authorization": {"Bearer sk"}, "X-Api-Key": {"sk"}, "X-Kept": {"yes"}}
	dst := http.Header{}
	CopyRequestHeaders(dst, src)
	if len(dst) != 1 || dst.Get("X-Kept") != "yes" {
		t.Errorf("forwarded %v", dst)
	}
}
