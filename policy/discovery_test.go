package policy_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard/switchyard/policy"
)

// TestDiscoveryBad maps every testdata/discovery/*.bad.yaml to the exact
// problems the loader reports.
func TestDiscoveryBad(t *testing.T) {
	tests := []struct {
		name string // testdata/discovery/<name>.bad.yaml
		want []string
	}{
		{"both", []string{
			`../testdata/discovery/both.bad.yaml:7:5: pool "small": give either replicas or discovery, not both`,
		}},
		{"dns-and-srv", []string{
			`../testdata/discovery/dns-and-srv.bad.yaml:8:7: pool "small": discovery: give either dns or srv, not both`,
		}},
		{"dns-without-port", []string{
			`../testdata/discovery/dns-without-port.bad.yaml:6:7: pool "small": discovery: port is required with dns (the replicas' port)`,
		}},
		{"neither-name", []string{
			`../testdata/discovery/neither-name.bad.yaml:5:17: pool "small": discovery: dns (a name whose A/AAAA records are the replicas) or srv (a name whose SRV records are) is required`,
		}},
		{"srv-with-port", []string{
			`../testdata/discovery/srv-with-port.bad.yaml:7:13: pool "small": discovery: port is not used with srv (the SRV records give each replica's port); remove it`,
		}},
		{"unknown-key", []string{
			`../testdata/discovery/unknown-key.bad.yaml:8:7: pool "small": discovery: unknown key "intervall" (known: dns, port, srv, interval, resolver)`,
			`../testdata/discovery/unknown-key.bad.yaml:13:13: pool "other": discovery: port: expected an integer, got "eighty"`,
			`../testdata/discovery/unknown-key.bad.yaml:14:17: pool "other": discovery: interval: invalid duration "soon" (use Go durations such as 250ms, 30s, 5m)`,
		}},
		{"values", []string{
			`../testdata/discovery/values.bad.yaml:6:12: pool "a": discovery: dns "http://vllm.example.internal:8000" is not a DNS name (give a name such as vllm.inference.svc.cluster.local, without scheme or port)`,
			`../testdata/discovery/values.bad.yaml:7:13: pool "a": discovery: port must be within 1..65535`,
			`../testdata/discovery/values.bad.yaml:8:17: pool "a": discovery: interval must be at least 100ms`,
			`../testdata/discovery/values.bad.yaml:9:17: pool "a": discovery: resolver "dns.example.internal:53" must be IP:PORT (e.g. 10.96.0.10:53 or [fd00::10]:53)`,
			`../testdata/discovery/values.bad.yaml:13:12: pool "b": discovery: srv "_http._tcp..example" is not a DNS name (give a name such as _http._tcp.vllm.inference.svc.cluster.local)`,
			`../testdata/discovery/values.bad.yaml:14:17: pool "b": discovery: resolver "10.0.0.10" must be IP:PORT (e.g. 10.96.0.10:53 or [fd00::10]:53)`,
			`../testdata/discovery/values.bad.yaml:19:13: pool "c": discovery: port must be within 1..65535`,
		}},
	}
	covered := map[string]bool{}
	for _, tc := range tests {
		covered[tc.name] = true
		t.Run(tc.name, func(t *testing.T) {
			path := "../testdata/discovery/" + tc.name + ".bad.yaml"
			cfg, err := policy.LoadFile(path, testLoadOptions)
			if err == nil {
				t.Fatalf("LoadFile(%s) = %+v, want errors", path, cfg)
			}
			if diff := cmp.Diff(strings.Join(tc.want, "\n"), err.Error()); diff != "" {
				t.Errorf("LoadFile(%s) errors (-want +got):\n%s", path, diff)
			}
			var es policy.Errors
			if !errors.As(err, &es) || len(es) != len(tc.want) {
				t.Fatalf("LoadFile(%s) = %T with %d entries, want policy.Errors with %d", path, err, len(es), len(tc.want))
			}
		})
	}
	files, err := filepath.Glob("../testdata/discovery/*.bad.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if name := strings.TrimSuffix(filepath.Base(f), ".bad.yaml"); !covered[name] {
			t.Errorf("%s has no entry in the table", f)
		}
	}
}

// TestDiscoveryGood: the section decodes with its defaults, the pool has no
// replicas of its own, and the topology section does not ask discovered
// replicas for nodes.
func TestDiscoveryGood(t *testing.T) {
	cfg := loadFile(t, "../testdata/discovery.good.yaml")
	want := map[string]*policy.Discovery{
		"qwen":    {DNS: "vllm-qwen.inference.svc.cluster.local", Port: 8000, Interval: policy.Duration(10 * time.Second), Resolver: "10.96.0.10:53"},
		"minicpm": {SRV: "_http._tcp.vllm-minicpm.inference.svc.cluster.local.", Interval: policy.Duration(policy.DefaultDiscoveryInterval)},
		"static":  nil,
	}
	for name, w := range want {
		p := cfg.Pools.Get(name)
		if diff := cmp.Diff(w, p.Discovery); diff != "" {
			t.Errorf("pool %s: discovery (-want +got):\n%s", name, diff)
		}
		if w != nil && len(p.Replicas) != 0 {
			t.Errorf("pool %s: %d replicas, want none listed", name, len(p.Replicas))
		}
	}
	if d := cfg.Pools.Get("minicpm").Discovery; d.Kind() != "srv" || d.Name() != d.SRV {
		t.Errorf("minicpm: Kind, Name = %s, %s", d.Kind(), d.Name())
	}
	if d := cfg.Pools.Get("qwen").Discovery; d.Kind() != "dns" || d.Name() != d.DNS {
		t.Errorf("qwen: Kind, Name = %s, %s", d.Kind(), d.Name())
	}
}
