package deploy

import (
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/switchyard/switchyard/policy"
	"github.com/switchyard/switchyard/router"
)

const discoveryExample = "kustomize/examples/vllm-discovery"

// TestKustomizeDiscoveryExample: the discovery example renders and decodes
// strictly; its vLLM Services are headless with a selector; and its policy
// loads, every discovered pool naming one of those Services (by name and
// port name through the API, by its cluster DNS name for SRV records); and
// its Role lets the gateway's service account read their EndpointSlices.
func TestKustomizeDiscoveryExample(t *testing.T) {
	r := renderKustomize(t, discoveryExample)
	checkKinds(t, r, []string{"Deployment", "Role", "RoleBinding", "Service"})
	checkEndpointSliceReader(t, r, "switchyard", "switchyard")
	if n := r.count()["Service"]; n != 2 {
		t.Errorf("%d Services, want 2 (the Deployment's and the LeaderWorkerSet leaders')", n)
	}
	reg := router.LoadOptions()
	reg.SkipEnv = true
	cfg, err := policy.Load("switchyard.yaml", readFile(t, filepath.Join(discoveryExample, "switchyard.yaml")), reg)
	if err != nil {
		t.Fatalf("the example's policy: %v", err)
	}
	deploys := all[*appsv1.Deployment](r)
	services := map[string]*corev1.Service{}
	for _, s := range all[*corev1.Service](r) {
		if s.Spec.ClusterIP != corev1.ClusterIPNone || len(s.Spec.Selector) == 0 {
			t.Errorf("Service %s: want headless (clusterIP None) with a selector", s.Name)
		}
		if s.Namespace != "inference" {
			t.Errorf("Service %s in namespace %q, want inference", s.Name, s.Namespace)
		}
		for _, d := range deploys {
			if labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) {
				if p := d.Spec.Template.Spec.Containers[0].Ports; len(p) == 0 || p[0].Name != s.Spec.Ports[0].TargetPort.String() {
					t.Errorf("Service %s: targetPort %s is not Deployment %s's port", s.Name, s.Spec.Ports[0].TargetPort.String(), d.Name)
				}
			}
		}
		services[s.Name+"."+s.Namespace+".svc.cluster.local"] = s
	}
	pools := 0
	for _, p := range cfg.Pools {
		d := p.Discovery
		if d == nil {
			t.Errorf("pool %s: no discovery section", p.Name)
			continue
		}
		pools++
		if d.IsKubernetes() {
			k := d.Kubernetes
			s := services[k.Service+"."+k.Namespace+".svc.cluster.local"]
			if s == nil {
				t.Errorf("pool %s: %s names no Service of the example", p.Name, d.Name())
				continue
			}
			if s.Spec.Ports[0].Name != k.Port.Name {
				t.Errorf("pool %s: port %s, Service %s's port is named %q", p.Name, k.Port, s.Name, s.Spec.Ports[0].Name)
			}
			continue
		}
		name := d.DNS
		if d.SRV != "" {
			rest, ok := strings.CutPrefix(d.SRV, "_http._tcp.")
			if !ok {
				t.Errorf("pool %s: srv %s is not _http._tcp.SERVICE", p.Name, d.SRV)
			}
			name = rest
		}
		s := services[name]
		if s == nil {
			t.Errorf("pool %s: %s names no Service of the example", p.Name, d.Name())
			continue
		}
		if d.DNS != "" && int32(d.Port) != s.Spec.Ports[0].Port {
			t.Errorf("pool %s: port %d, Service %s serves %d", p.Name, d.Port, s.Name, s.Spec.Ports[0].Port)
		}
		if d.SRV != "" && s.Spec.Ports[0].Name != "http" {
			t.Errorf("pool %s: Service %s has no port named http for _http._tcp", p.Name, s.Name)
		}
	}
	if pools != 2 {
		t.Errorf("%d discovered pools, want 2 (kubernetes and srv)", pools)
	}
}
