package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"github.com/switchyard/switchyard/internal/kubetest"
)

// applied is what a server-side apply stored of one rendering.
type applied struct {
	objects []*unstructured.Unstructured
	// skipped are the kinds the server does not serve (the Prometheus
	// Operator's CRDs, not installed on the test server).
	skipped []string
}

// apply server-side applies every document of out (a rendering), in its
// order, into namespace ns where a namespaced object names none, as
// `kubectl apply --server-side` does; a Namespace it needs but does not
// hold is created first. Every object the server refuses fails the test.
func apply(t *testing.T, srv *kubetest.Server, out []byte, ns string) applied {
	t.Helper()
	dyn, err := dynamic.NewForConfig(srv.Config)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(srv.Client.Discovery()))
	ensureNamespace(t, srv, ns)
	var a applied
	rd := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(out)))
	for {
		doc, err := rd.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		js, err := yaml.YAMLToJSON(doc)
		if err != nil {
			t.Fatal(err)
		}
		if s := string(bytes.TrimSpace(js)); s == "null" || s == "" {
			continue
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(js); err != nil {
			t.Fatal(err)
		}
		gvk := u.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if meta.IsNoMatchError(err) {
			a.skipped = append(a.skipped, gvk.String())
			continue
		}
		if err != nil {
			t.Fatalf("%s %s: %v", gvk, u.GetName(), err)
		}
		var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			if u.GetNamespace() == "" {
				u.SetNamespace(ns)
			}
			ensureNamespace(t, srv, u.GetNamespace())
			ri = dyn.Resource(m.Resource).Namespace(u.GetNamespace())
		}
		got, err := ri.Apply(t.Context(), u.GetName(), u, metav1.ApplyOptions{FieldManager: "switchyard-deploy-test"})
		if err != nil {
			t.Errorf("server-side apply of %s %s/%s refused: %v", gvk.Kind, u.GetNamespace(), u.GetName(), err)
			continue
		}
		a.objects = append(a.objects, got)
	}
	return a
}

func ensureNamespace(t *testing.T, srv *kubetest.Server, ns string) {
	t.Helper()
	if _, err := srv.Client.CoreV1().Namespaces().Get(t.Context(), ns, metav1.GetOptions{}); err == nil {
		return
	}
	if _, err := srv.Client.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// stored returns the object of kind and name a applied, as the server
// stored it, decoded into T.
func stored[T any](t *testing.T, a applied, kind, name string) *T {
	t.Helper()
	for _, u := range a.objects {
		if u.GetKind() == kind && u.GetName() == name {
			var out T
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &out); err != nil {
				t.Fatalf("%s %s: %v", kind, name, err)
			}
			return &out
		}
	}
	t.Fatalf("the server stored no %s %s", kind, name)
	return nil
}

// TestManifestsOnAPIServer applies the kustomize base, the DGX Spark
// overlay, the discovery example and the Helm chart to a real API server
// (server-side apply: its validation, defaulting and field management ran
// on every object but the Prometheus Operator's, whose CRDs it lacks) and
// checks what it stored: the gateway's probes as rendered plus the
// server's defaults, the ConfigMap's policy byte for byte (which `switchyard
// validate` accepts), and the RBAC objects.
func TestManifestsOnAPIServer(t *testing.T) {
	srv := kubetest.Start(t)
	bin := staticBinary(t)
	helmOut, err := helmTemplate(t, "adminToken.value="+helmTestToken,
		"monitoring.podMonitor.enabled=true", "monitoring.prometheusRule.enabled=true")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, ns string
		out      []byte
		gateway  bool // the rendering holds the gateway (not only vLLM)
	}{
		{"kustomize base", "base", kustomizeYAML(t, basePath), true},
		{"dgx-spark overlay", overlayNS, kustomizeYAML(t, overlayPath), true},
		{"discovery example", "inference", kustomizeYAML(t, discoveryExample), false},
		// Its own namespace name is the overlay's: run last.
		{"helm chart", helmNamespace, helmOut, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "helm chart" {
				deleteAll(t, srv, overlayNS)
			}
			a := apply(t, srv, tc.out, tc.ns)
			t.Logf("%d objects stored; not served by the test server: %v", len(a.objects), a.skipped)
			for _, k := range a.skipped {
				if k != "monitoring.coreos.com/v1, Kind=PodMonitor" && k != "monitoring.coreos.com/v1, Kind=PrometheusRule" {
					t.Errorf("kind %s not served by the API server", k)
				}
			}
			r := decode(t, tc.name, tc.out)
			if !tc.gateway {
				checkEndpointSliceReaderStored(t, a, r)
				return
			}
			g := checkGateway(t, r)
			d := stored[appsv1.Deployment](t, a, "Deployment", g.deploy.Name)
			var c *corev1.Container
			for i := range d.Spec.Template.Spec.Containers {
				if d.Spec.Template.Spec.Containers[i].Name == gatewayName {
					c = &d.Spec.Template.Spec.Containers[i]
				}
			}
			if c == nil {
				t.Fatalf("the stored Deployment has no container %s", gatewayName)
			}
			for _, p := range []struct {
				what           string
				rendered, kept *corev1.Probe
			}{
				{"readinessProbe", g.container.ReadinessProbe, c.ReadinessProbe},
				{"livenessProbe", g.container.LivenessProbe, c.LivenessProbe},
				{"startupProbe", g.container.StartupProbe, c.StartupProbe},
			} {
				if p.rendered == nil {
					continue
				}
				if p.kept == nil || p.kept.HTTPGet == nil || p.rendered.HTTPGet == nil {
					t.Errorf("%s: stored %+v, rendered %+v", p.what, p.kept, p.rendered)
					continue
				}
				if p.kept.HTTPGet.Path != p.rendered.HTTPGet.Path || p.kept.HTTPGet.Port != p.rendered.HTTPGet.Port {
					t.Errorf("%s: stored %s %s, rendered %s %s", p.what, p.kept.HTTPGet.Path, p.kept.HTTPGet.Port.String(),
						p.rendered.HTTPGet.Path, p.rendered.HTTPGet.Port.String())
				}
				// The server's defaults filled in what the manifest left out.
				if p.kept.HTTPGet.Scheme != corev1.URISchemeHTTP || p.kept.TimeoutSeconds < 1 || p.kept.PeriodSeconds < 1 ||
					p.kept.SuccessThreshold != 1 || p.kept.FailureThreshold < 1 {
					t.Errorf("%s: stored without the server's defaults: %+v", p.what, p.kept)
				}
			}
			if sa := d.Spec.Template.Spec.ServiceAccountName; sa != g.deploy.Spec.Template.Spec.ServiceAccountName {
				t.Errorf("stored serviceAccountName %q, rendered %q", sa, g.deploy.Spec.Template.Spec.ServiceAccountName)
			}

			// The ConfigMap: the policy as rendered, and valid.
			var cmName string
			for _, v := range g.deploy.Spec.Template.Spec.Volumes {
				if v.ConfigMap != nil {
					cmName = v.ConfigMap.Name
				}
			}
			cm := stored[corev1.ConfigMap](t, a, "ConfigMap", cmName)
			var text string
			for _, v := range cm.Data {
				text = v
			}
			if len(cm.Data) != 1 || text != g.configText {
				t.Errorf("ConfigMap %s stored %d keys, want the rendered policy as its one key", cmName, len(cm.Data))
			}
			file := filepath.Join(t.TempDir(), "switchyard.yaml")
			if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(bin, "validate", file)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("switchyard validate on the stored ConfigMap's policy: %v\n%s", err, out)
			}

			// RBAC: the ServiceAccount, and the Role and RoleBinding as
			// rendered.
			stored[corev1.ServiceAccount](t, a, "ServiceAccount", d.Spec.Template.Spec.ServiceAccountName)
			checkEndpointSliceReaderStored(t, a, r)
		})
	}
}

// checkEndpointSliceReaderStored: the server stored every Role and
// RoleBinding of r with the rules and subjects rendered.
func checkEndpointSliceReaderStored(t *testing.T, a applied, r *rendering) {
	t.Helper()
	roles := all[*rbacv1.Role](r)
	if len(roles) == 0 {
		t.Errorf("%s: no Role", r.source)
	}
	for _, role := range roles {
		got := stored[rbacv1.Role](t, a, "Role", role.Name)
		if diff := cmp.Diff(role.Rules, got.Rules); diff != "" {
			t.Errorf("Role %s: stored rules (-rendered +stored):\n%s", role.Name, diff)
		}
	}
	for _, b := range all[*rbacv1.RoleBinding](r) {
		got := stored[rbacv1.RoleBinding](t, a, "RoleBinding", b.Name)
		if diff := cmp.Diff(b.Subjects, got.Subjects); diff != "" || got.RoleRef != b.RoleRef {
			t.Errorf("RoleBinding %s: stored subjects (-rendered +stored):\n%s\nroleRef %+v, rendered %+v", b.Name, diff, got.RoleRef, b.RoleRef)
		}
	}
}

// deleteAll deletes the objects of namespace ns that the tests apply (the
// test server runs no garbage collector nor namespace controller, so the
// namespace itself stays).
func deleteAll(t *testing.T, srv *kubetest.Server, ns string) {
	t.Helper()
	ctx := t.Context()
	c := srv.Client
	var errs []error
	del := func(err error) { errs = append(errs, err) }
	opts := metav1.DeleteOptions{}
	list := metav1.ListOptions{}
	del(c.AppsV1().Deployments(ns).DeleteCollection(ctx, opts, list))
	del(c.CoreV1().ConfigMaps(ns).DeleteCollection(ctx, opts, list))
	del(c.CoreV1().Secrets(ns).DeleteCollection(ctx, opts, list))
	del(c.CoreV1().ServiceAccounts(ns).DeleteCollection(ctx, opts, list))
	del(c.RbacV1().Roles(ns).DeleteCollection(ctx, opts, list))
	del(c.RbacV1().RoleBindings(ns).DeleteCollection(ctx, opts, list))
	del(c.PolicyV1().PodDisruptionBudgets(ns).DeleteCollection(ctx, opts, list))
	del(c.AutoscalingV2().HorizontalPodAutoscalers(ns).DeleteCollection(ctx, opts, list))
	del(c.NetworkingV1().NetworkPolicies(ns).DeleteCollection(ctx, opts, list))
	del(c.DiscoveryV1().EndpointSlices(ns).DeleteCollection(ctx, opts, list))
	services, err := c.CoreV1().Services(ns).List(ctx, list)
	del(err)
	if services != nil {
		for _, s := range services.Items {
			del(c.CoreV1().Services(ns).Delete(ctx, s.Name, opts))
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}
