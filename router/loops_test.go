package router

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/switchyard/switchyard/policy"
	"github.com/switchyard/switchyard/router/internal/metrics"
)

// TestDiscoveryRefusesSelf: a discovery answer naming the gateway's own
// listener is refused, logged and counted; other addresses pass.
func TestDiscoveryRefusesSelf(t *testing.T) {
	var logs strings.Builder
	g := &Gateway{log: slog.New(slog.NewTextHandler(&logs, nil)), metrics: metrics.New(prometheus.NewRegistry(), "test")}
	refuse := g.refuseSelf("p", &policy.Server{Listen: "0.0.0.0:8080", AdminListen: "127.0.0.1:9090"})
	if !refuse("127.0.0.1:8080") {
		t.Error("the gateway's own listener was not refused")
	}
	if !refuse("127.0.0.1:9090") {
		t.Error("the gateway's admin listener was not refused")
	}
	if refuse("10.0.0.1:8000") {
		t.Error("a replica was refused")
	}
	if v := testutil.ToFloat64(g.metrics.DiscoverySelf.WithLabelValues("p")); v != 2 {
		t.Errorf("switchyard_discovery_self_refused_total = %v, want 2", v)
	}
	if !strings.Contains(logs.String(), "names this gateway's own listener") || !strings.Contains(logs.String(), "addr=127.0.0.1:8080") {
		t.Errorf("log: %s", logs.String())
	}
}
