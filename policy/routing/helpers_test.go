package routing_test

import (
	"testing"

	"github.com/switchyard/switchyard/policy"
)

// The config helpers of policy's load_test.go, copied (they are small):
// routing's tests build their policies from inline configs.

// testEnv is the environment key_env and api_key_env read in tests.
var testEnv = map[string]string{
	"SWITCHYARD_KEY_AGENTS": "sk-agents",
	"SWITCHYARD_KEY_CI":     "sk-ci",
	"VLLM_KEY":              "sk-vllm",
}

var testLoadOptions = policy.LoadOptions{
	Balancers:   []string{"round_robin", "least_outstanding", "p2c", "kv_aware", "affinity"},
	Classifiers: []string{"model", "heuristic"},
	Getenv:      func(k string) string { return testEnv[k] },
}

// load decodes an inline config, failing the test on any problem.
func load(t testing.TB, yaml string) *policy.Config {
	t.Helper()
	cfg, err := policy.Load("inline.yaml", []byte(yaml), testLoadOptions)
	if err != nil {
		t.Fatalf("Load:\n%v\nconfig:\n%s", err, yaml)
	}
	return cfg
}
