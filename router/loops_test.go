package router

import (
	"log/slog"
	"net/netip"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/switchyard/switchyard/policy"
	"github.com/switchyard/switchyard/router/internal/conns"
	"github.com/switchyard/switchyard/router/internal/metrics"
)

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
			sc := &policy.Server{Listen: tc.listen, AdminListen: tc.admin}
			if _, got := conns.SelfAddr(listens(sc), local, tc.addr); got != tc.want {
				t.Errorf("selfAddr(%s | %s, %s) = %t, want %t", tc.listen, tc.admin, tc.addr, got, tc.want)
			}
		})
	}
}

// TestDiscoveryRefusesSelf: a discovery answer naming the gateway's own
// listener is refused, logged and counted; other addresses pass.
func TestDiscoveryRefusesSelf(t *testing.T) {
	var logs strings.Builder
	g := &Gateway{log: slog.New(slog.NewTextHandler(&logs, nil)), metrics: metrics.New(prometheus.NewRegistry(), "test")}
	refuse := g.refuseSelf("p", &policy.Server{Listen: "0.0.0.0:8080", AdminListen: "127.0.0.1:9090"})
	if !refuse("127.0.0.1:8080") {
		t.Error("the gateway's own listener was not refused")
	}
	if refuse("10.0.0.1:8000") {
		t.Error("a replica was refused")
	}
	if v := testutil.ToFloat64(g.metrics.DiscoverySelf.WithLabelValues("p")); v != 1 {
		t.Errorf("switchyard_discovery_self_refused_total = %v, want 1", v)
	}
	if !strings.Contains(logs.String(), "names this gateway's own listener") || !strings.Contains(logs.String(), "addr=127.0.0.1:8080") {
		t.Errorf("log: %s", logs.String())
	}
}
