package examples_test

import (
	"bytes"
	"log/slog"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/policy"
	"github.com/switchyard/switchyard/router"
	"github.com/switchyard/switchyard/vllmsim"
)

// A gateway on real sockets in front of simulated replicas: what the
// monitoring examples are checked against.

func startReplica(t *testing.T, model string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(vllmsim.New(vllmsim.Profile{Model: model, DefaultMaxTokens: 8, MaxModelLen: 4096}))
	t.Cleanup(srv.Close)
	return srv
}

func loadConfig(t *testing.T, yaml string) *policy.Config {
	t.Helper()
	cfg, err := policy.Load("test.yaml", []byte(yaml), router.LoadOptions())
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg
}

type gateway struct {
	API, Admin *httptest.Server
	Reg        *prometheus.Registry
}

func startGateway(t *testing.T, cfg *policy.Config, opts ...func(*router.Options)) *gateway {
	t.Helper()
	o := router.Options{Logger: slog.New(slog.DiscardHandler), Version: "test"}
	for _, f := range opts {
		f(&o)
	}
	g, err := router.New(cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	api, admin := httptest.NewServer(g.Handler()), httptest.NewServer(g.AdminHandler())
	t.Cleanup(func() {
		api.Close()
		admin.Close()
		g.Close()
	})
	return &gateway{API: api, Admin: admin, Reg: g.Registry()}
}

// metricValue is the value of the counter name{labels} in the gateway's
// registry (0 when absent).
func metricValue(t *testing.T, gw *gateway, name string, labels map[string]string) float64 {
	t.Helper()
	fams, err := gw.Reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue series
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
