// Package policytest loads configs for the tests of policy and
// policy/routing: the strategy names other packages register, the
// environment that key_env and api_key_env read, and Load for a config
// written inline in a test.
package policytest

import (
	"testing"

	"github.com/switchyard/switchyard/policy"
)

// Env is the environment key_env and api_key_env read in tests.
var Env = map[string]string{
	"SWITCHYARD_KEY_AGENTS": "sk-agents",
	"SWITCHYARD_KEY_CI":     "sk-ci",
	"VLLM_KEY":              "sk-vllm",
}

// LoadOptions name the balancers and classifier kinds the gateway
// registers, and read Env.
var LoadOptions = policy.LoadOptions{
	Balancers:   []string{"round_robin", "least_outstanding", "p2c", "kv_aware", "affinity"},
	Classifiers: []string{"model", "heuristic"},
	Getenv:      func(k string) string { return Env[k] },
}

// Load decodes an inline config, failing the test on any problem.
func Load(t testing.TB, yaml string) *policy.Config {
	t.Helper()
	cfg, err := policy.Load("inline.yaml", []byte(yaml), LoadOptions)
	if err != nil {
		t.Fatalf("Load:\n%v\nconfig:\n%s", err, yaml)
	}
	return cfg
}
