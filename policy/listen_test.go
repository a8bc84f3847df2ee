package policy

import "testing"

func TestListenAddr(t *testing.T) {
	for _, tc := range []struct {
		addr string
		ok   bool
	}{
		{"0.0.0.0:8080", true},
		{":8080", true},
		{"127.0.0.1:0", true},
		{"[::1]:9090", true},
		{"localhost:9090", true},
		{"gateway-0.example.internal:443", true},
		{":http", true},
		{"127.0.0.1:65535", true},
		{"127.0.0.1:65536", false},
		{"127.0.0.1:99999", false},
		{"127.0.0.1:", false},
		{"127.0.0.1", false},
		{"8080", false},
		{"127.0.0.1:no-such-service", false},
		{"bad host:80", false},
		{"[::1:80", false},
	} {
		if got := listenAddrErr(tc.addr); (got == "") != tc.ok {
			t.Errorf("listenAddrErr(%q) = %q, want ok %v", tc.addr, got, tc.ok)
		}
	}
}

func TestSameListener(t *testing.T) {
	for _, tc := range []struct {
		name string
		a, b string
		same bool
	}{
		{"same address", "127.0.0.1:8080", "127.0.0.1:8080", true},
		{"every interface and loopback", ":8080", "127.0.0.1:8080", true},
		{"IPv6 wildcard and IPv4", "[::]:8080", "127.0.0.1:8080", true},
		{"IPv4 wildcard and IPv4", "0.0.0.0:8080", "127.0.0.1:8080", true},
		{"IPv4 wildcard and IPv6 loopback", "0.0.0.0:8080", "[::1]:8080", false},
		{"two loopbacks", "127.0.0.1:8080", "127.0.0.2:8080", false},
		{"other ports", "0.0.0.0:8080", "127.0.0.1:9090", false},
		{"both any free port", "127.0.0.1:0", "127.0.0.1:0", false},
		{"a service name and its number", ":http", "127.0.0.1:80", true},
	} {
		if got := sameListener(tc.a, tc.b); got != tc.same {
			t.Errorf("%s: sameListener(%q, %q) = %v, want %v", tc.name, tc.a, tc.b, got, tc.same)
		}
	}
}
