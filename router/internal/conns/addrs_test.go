package conns

import (
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/switchyard/switchyard/policy"
)

func prefixes(t testing.TB, ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		p, err := policy.ParseTrustedProxy(s)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

// TestClientAddr: the client address is the peer's unless the peer is a
// trusted proxy; then it is the last untrusted X-Forwarded-For hop, so a
// client cannot choose its address by writing the header itself.
func TestClientAddr(t *testing.T) {
	trusted := prefixes(t, "10.0.0.0/8", "fd00::1")
	for _, tc := range []struct {
		name, remote string
		xff          []string
		want         string
	}{
		{"untrusted peer, header ignored", "192.0.2.7:5000", []string{"198.51.100.1"}, "192.0.2.7"},
		{"trusted peer, one hop", "10.1.2.3:5000", []string{"198.51.100.1"}, "198.51.100.1"},
		{"forged left part ignored", "10.1.2.3:5000", []string{"1.2.3.4, 198.51.100.1"}, "198.51.100.1"},
		{"chain of trusted proxies", "10.1.2.3:5000", []string{"198.51.100.1, 10.9.9.9", "10.8.8.8"}, "198.51.100.1"},
		{"all trusted", "10.1.2.3:5000", []string{"10.9.9.9"}, "10.9.9.9"},
		{"no header", "10.1.2.3:5000", nil, "10.1.2.3"},
		{"garbage hop stops the walk", "10.1.2.3:5000", []string{"198.51.100.1, bogus"}, "10.1.2.3"},
		{"ipv6 trusted peer", "[fd00::1]:5000", []string{"2001:db8::5"}, "2001:db8::5"},
		{"mapped v4", "[::ffff:10.0.0.1]:1", []string{"192.0.2.9"}, "192.0.2.9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &http.Request{RemoteAddr: tc.remote, Header: http.Header{}}
			for _, v := range tc.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			if got := ClientAddr(r, trusted); got != tc.want {
				t.Errorf("clientAddr = %q, want %q", got, tc.want)
			}
		})
	}
}

// FuzzClientAddr: reading X-Forwarded-For never panics and always yields
// an address (the peer's or one the header holds).
func FuzzClientAddr(f *testing.F) {
	for _, s := range []string{"198.51.100.1", "1.2.3.4, 10.0.0.1", "", ",,,", "[::1]", "fe80::1%eth0", "::ffff:1.2.3.4", strings.Repeat("1.1.1.1,", 50)} {
		f.Add("10.1.2.3:5000", s)
	}
	trusted := prefixes(f, "10.0.0.0/8", "::/0")
	f.Fuzz(func(t *testing.T, remote, xff string) {
		r := &http.Request{RemoteAddr: remote, Header: http.Header{"X-Forwarded-For": {xff}}}
		got := ClientAddr(r, trusted)
		if got == remote {
			return // an unreadable peer address is kept as it is
		}
		if _, err := netip.ParseAddr(got); err != nil {
			t.Fatalf("clientAddr(%q, %q) = %q: not an address", remote, xff, got)
		}
	})
}

// TestSelfAddr: a replica address is the gateway's own when it names a
// listener's port on the listener's address, or on any local address for
// a wildcard listener.
func TestSelfAddr(t *testing.T) {
	local := []netip.Addr{netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("fe80::1")}
	for _, tc := range []struct {
		name, listen, admin, addr string
		want                      bool
	}{
		{"wildcard, loopback", "0.0.0.0:8080", "127.0.0.1:9090", "127.0.0.1:8080", true},
		{"wildcard, other loopback", "0.0.0.0:8080", "127.0.0.1:9090", "127.0.0.2:8080", true},
		{"wildcard, interface address", "0.0.0.0:8080", "127.0.0.1:9090", "192.0.2.10:8080", true},
		{"wildcard, localhost", ":8080", "127.0.0.1:9090", "localhost:8080", true},
		{"wildcard v6, interface", "[::]:8080", "127.0.0.1:9090", "[fe80::1]:8080", true},
		{"wildcard, other host", "0.0.0.0:8080", "127.0.0.1:9090", "192.0.2.11:8080", false},
		{"wildcard, other port", "0.0.0.0:8080", "127.0.0.1:9090", "127.0.0.1:8000", false},
		{"admin listener", "0.0.0.0:8080", "127.0.0.1:9090", "127.0.0.1:9090", true},
		{"specific listener, other address", "192.0.2.10:8080", "127.0.0.1:9090", "127.0.0.1:8080", false},
		{"specific listener, same address", "192.0.2.10:8080", "127.0.0.1:9090", "192.0.2.10:8080", true},
		{"mapped v4", "0.0.0.0:8080", "127.0.0.1:9090", "[::ffff:127.0.0.1]:8080", true},
		{"a host name is not resolved", "0.0.0.0:8080", "127.0.0.1:9090", "vllm.internal:8080", false},
		{"garbage", "0.0.0.0:8080", "127.0.0.1:9090", "nonsense", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			own := []Own{{Key: "server.listen", Addr: tc.listen}, {Key: "server.admin_listen", Addr: tc.admin}}
			if _, got := SelfAddr(own, local, tc.addr); got != tc.want {
				t.Errorf("selfAddr(%s | %s, %s) = %t, want %t", tc.listen, tc.admin, tc.addr, got, tc.want)
			}
		})
	}
}
