package policy_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard/switchyard/policy"
	"github.com/switchyard/switchyard/policy/internal/policytest"
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
		{"kubernetes", []string{
			`../testdata/discovery/kubernetes.bad.yaml:6:19: pool "a": discovery: kubernetes: service (the name of the Service whose EndpointSlices list the replicas) is required`,
			`../testdata/discovery/kubernetes.bad.yaml:6:19: pool "a": discovery: kubernetes: port is required (the EndpointSlices' port: its name, such as http, or the pods' port number)`,
			`../testdata/discovery/kubernetes.bad.yaml:10:7: pool "b": discovery: dns is for dns and srv, not used with kubernetes (its EndpointSlices give the replicas, and the API server tells every change); remove it`,
			`../testdata/discovery/kubernetes.bad.yaml:11:7: pool "b": discovery: port is for dns and srv, not used with kubernetes (its EndpointSlices give the replicas, and the API server tells every change); remove it`,
			`../testdata/discovery/kubernetes.bad.yaml:17:18: pool "c": discovery: kubernetes: service "9vllm" is not a Service name (lower-case letters, digits and '-', starting with a letter, at most 63)`,
			`../testdata/discovery/kubernetes.bad.yaml:18:20: pool "c": discovery: kubernetes: namespace "Inference" is not a namespace name (lower-case letters, digits and '-', at most 63)`,
			`../testdata/discovery/kubernetes.bad.yaml:19:15: pool "c": discovery: kubernetes: port "http--api" is neither a number nor a port name (lower-case letters, digits and '-', at most 15, with a letter)`,
			`../testdata/discovery/kubernetes.bad.yaml:20:21: pool "c": discovery: kubernetes: kubeconfig is empty (give a file, or remove the key to use the pod's service account)`,
			`../testdata/discovery/kubernetes.bad.yaml:24:41: pool "d": discovery: kubernetes: port must be within 1..65535`,
			`../testdata/discovery/kubernetes.bad.yaml:25:7: pool "d": discovery: interval is for dns and srv, not used with kubernetes (its EndpointSlices give the replicas, and the API server tells every change); remove it`,
			`../testdata/discovery/kubernetes.bad.yaml:29:41: pool "e": discovery: kubernetes: port: expected a port name or number, got a list`,
			`../testdata/discovery/kubernetes.bad.yaml:33:47: pool "f": discovery: kubernetes: unknown key "kubeconfg" (known: service, namespace, port, kubeconfig)`,
		}},
		{"neither-name", []string{
			`../testdata/discovery/neither-name.bad.yaml:5:17: pool "small": discovery: dns (a name whose A/AAAA records are the replicas) or srv (a name whose SRV records are) is required`,
		}},
		{"srv-with-port", []string{
			`../testdata/discovery/srv-with-port.bad.yaml:7:13: pool "small": discovery: port is not used with srv (the SRV records give each replica's port); remove it`,
		}},
		{"unknown-key", []string{
			`../testdata/discovery/unknown-key.bad.yaml:8:7: pool "small": discovery: unknown key "intervall" (known: dns, port, srv, interval, resolver, kubernetes)`,
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
			cfg, err := policy.LoadFile(path, policytest.LoadOptions)
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
		"gemma": {Interval: policy.Duration(policy.DefaultDiscoveryInterval),
			Kubernetes: policy.KubernetesDiscovery{Service: "vllm-gemma", Port: policy.PortRef{Name: "http"}}},
		"gemma-big": {Interval: policy.Duration(policy.DefaultDiscoveryInterval),
			Kubernetes: policy.KubernetesDiscovery{Service: "vllm-gemma-big", Namespace: "inference", Port: policy.PortRef{Number: 8000}, Kubeconfig: "/etc/switchyard/kubeconfig"}},
		"static": nil,
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
	if d := cfg.Pools.Get("gemma").Discovery; d.Kind() != "kubernetes" || d.Name() != "/vllm-gemma" || d.Kubernetes.Port.String() != "http" {
		t.Errorf("gemma: Kind, Name, Port = %s, %s, %s", d.Kind(), d.Name(), d.Kubernetes.Port)
	}
	if d := cfg.Pools.Get("gemma-big").Discovery; d.Name() != "inference/vllm-gemma-big" || d.Kubernetes.Port.String() != "8000" {
		t.Errorf("gemma-big: Name, Port = %s, %s", d.Name(), d.Kubernetes.Port)
	}
}
