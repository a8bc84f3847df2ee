package upstream

import (
	"errors"
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/textproto"
	"strings"
)

// IsEventStream reports an answer that is a 200 event stream. The media
// type is matched as RFC 9110 §8.3.1 reads it, as httputil's flushInterval
// does: any case, parameters (charset=utf-8) allowed, a malformed parameter
// ignored; "text/event-streams" is not one.
func IsEventStream(resp *http.Response) bool {
	if resp.StatusCode != http.StatusOK {
		return false
	}
	ct := resp.Header.Get("Content-Type")
	if ct == eventStream {
		return true // the common answer, without the parser's allocations
	}
	mt, _, _ := mime.ParseMediaType(ct)
	return mt == eventStream
}

const eventStream = "text/event-stream"

// Error is a failure to reach a replica or read its answer; it
// keeps the cause (a timeout maps to 504) and reads as ErrUpstream.
type Error struct {
	Pool, Replica string
	Err           error
}

func (e *Error) Error() string {
	return fmt.Sprintf("%v: pool %q replica %q: %s", ErrUpstream, e.Pool, e.Replica, trimURLError(e.Err))
}

func (e *Error) Unwrap() []error { return []error{ErrUpstream, e.Err} }

func trimURLError(err error) string {
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 && strings.HasPrefix(s, "Post ") {
		return s[i+2:]
	}
	return s
}

// hopHeaders are connection-specific (RFC 9110 §7.6.1) and never forwarded.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

func IsHop(k string) bool {
	for _, h := range hopHeaders {
		if k == h {
			return true
		}
	}
	return false
}

// CopyRequestHeaders forwards the client's headers except hop-by-hop ones,
// the client's credentials for Switchyard, and those the transport sets.
func CopyRequestHeaders(dst, src http.Header) {
	for k, vv := range src {
		switch k {
		case "Authorization", "X-Api-Key", "Content-Length", "Host", "Accept-Encoding", HeaderRequestID:
			continue // the client's credentials are for Switchyard
		}
		if IsHop(k) {
			continue
		}
		dst[k] = vv
	}
	DropConnectionHeaders(dst, src)
}

// DropConnectionHeaders removes from dst the headers that src's Connection
// header names: they are hop-by-hop too (RFC 9110 §7.6.1).
func DropConnectionHeaders(dst, src http.Header) {
	for _, f := range src["Connection"] {
		for name := range strings.SplitSeq(f, ",") {
			if name = textproto.TrimString(name); name != "" {
				dst.Del(name)
			}
		}
	}
}

// SetForwarded tells the replica who the client is, as
// httputil.ReverseProxy does: the peer's address is appended to
// X-Forwarded-For, and X-Forwarded-Host and X-Forwarded-Proto describe the
// request the gateway received. A Forwarded element (RFC 7239) is
// appended with the same facts.
func SetForwarded(dst http.Header, in *http.Request) {
	proto, protoV := "http", protoHTTP
	if in.TLS != nil {
		proto, protoV = "https", protoHTTPS
	}
	dst["X-Forwarded-Proto"] = protoV // shared, read-only
	ip, _, err := net.SplitHostPort(in.RemoteAddr)
	if err != nil {
		dst.Del("X-Forwarded-For")
		dst.Del("Forwarded")
		return
	}
	// One backing array for the three values: one allocation, not three.
	vals := make([]string, 3)
	if in.Host != "" {
		vals[0] = in.Host
		dst["X-Forwarded-Host"] = vals[0:1:1]
	}
	vals[1] = ip
	if prior := dst["X-Forwarded-For"]; len(prior) > 0 {
		vals[1] = strings.Join(prior, ", ") + ", " + ip
	}
	dst["X-Forwarded-For"] = vals[1:2:2]
	node := ip
	if strings.Contains(ip, ":") {
		node = `"[` + ip + `]"` // IPv6 is quoted and bracketed (RFC 7239 §6)
	}
	vals[2] = "for=" + node + ";proto=" + proto
	if prior := strings.Join(dst["Forwarded"], ", "); prior != "" && strings.Count(prior, `"`)%2 == 0 {
		// A client's value with an open quote would swallow ours; such a
		// value is dropped rather than passed on.
		vals[2] = prior + ", " + vals[2]
	}
	dst["Forwarded"] = vals[2:3:3]
}

func IsTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// The upstream package's sentinels, as the request path names them.
var (
	ErrNoReplica = errors.New("no replica available")
	ErrUpstream  = errors.New("upstream failed")
)

// HeaderRequestID is the request id header, passed on to the replica.
const HeaderRequestID = "X-Request-Id"

var (
	protoHTTP  = []string{"http"}
	protoHTTPS = []string{"https"}
)
