package router_test

import (
	"encoding/json"
	"testing"

	"github.com/switchyard/switchyard/internal/gatewaytest"
)

// The replicas and gateways of these tests, shared with the examples'
// tests: internal/gatewaytest.
type (
	replica = gatewaytest.Replica
	gateway = gatewaytest.Gateway
)

var (
	startReplica = gatewaytest.StartReplica
	fast         = gatewaytest.Fast
	refusedURL   = gatewaytest.RefusedURL
	loadConfig   = gatewaytest.LoadConfig
	startGateway = gatewaytest.Start
	post         = gatewaytest.Post
	get          = gatewaytest.Get
	request      = gatewaytest.Do
)

// adminPools is GET /admin/pools: each pool's discovery and replicas.
type adminPools struct {
	Pools []struct {
		Name      string `json:"name"`
		Discovery *struct {
			Kind         string   `json:"kind"`
			Name         string   `json:"name"`
			Addresses    []string `json:"addresses"`
			LastResolved string   `json:"last_resolved"`
			Result       string   `json:"result"`
			Error        string   `json:"error"`
		} `json:"discovery"`
		Replicas []adminReplica `json:"replicas"`
	} `json:"pools"`
}

type adminReplica struct {
	Name          string `json:"name"`
	URL           string `json:"url"`
	Source        string `json:"source"`
	State         string `json:"state"`
	Healthy       bool   `json:"healthy"`
	Ejected       bool   `json:"ejected"`
	Misconfigured bool   `json:"misconfigured"`
	Why           string `json:"why"`
	Inflight      int64  `json:"inflight"`
	Waiting       int64  `json:"waiting"`
	Ejections     int64  `json:"ejections"`
	LastError     string `json:"last_error"`
}

func getPools(t *testing.T, gw *gateway) adminPools {
	t.Helper()
	var out adminPools
	if _, b := get(t, gw.Admin.URL+"/admin/pools", nil); json.Unmarshal(b, &out) != nil {
		t.Fatalf("/admin/pools: %s", b)
	}
	return out
}

// adminReplicaView is one replica of GET /admin/pools.
func adminReplicaView(t *testing.T, gw *gateway, pool, name string) adminReplica {
	t.Helper()
	for _, p := range getPools(t, gw).Pools {
		for _, r := range p.Replicas {
			if p.Name == pool && r.Name == name {
				return r
			}
		}
	}
	t.Fatalf("/admin/pools has no replica %s/%s", pool, name)
	return adminReplica{}
}
