package deploy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/prometheus/prometheus/promql/parser"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/switchyard/switchyard/policy"
	"github.com/switchyard/switchyard/router"
)

// Paths, relative to this directory (go test runs in it).
const (
	basePath       = "kustomize/base"
	overlayPath    = "kustomize/overlays/dgx-spark"
	chartPath      = "helm/switchyard"
	alertsPath     = "../examples/prometheus/alerts.yml"
	referencePath  = "../examples/policies/dgx-spark-8node.yaml"
	tokenEnv       = "SWITCHYARD_ADMIN_TOKEN"
	gatewayName    = "switchyard" // the container's name
	overlayNS      = "switchyard"
	helmNamespace  = "switchyard"
	helmTestToken  = "test-token"
	drainDelayDflt = 5 * time.Second // server.drain_delay's default
)

// The kinds the kustomize base and the Helm chart (monitoring on) produce,
// one object each.
var gatewayKinds = []string{
	"ConfigMap", "Deployment", "HorizontalPodAutoscaler", "NetworkPolicy",
	"PodDisruptionBudget", "PodMonitor", "PrometheusRule", "Role", "RoleBinding",
	"Secret", "Service", "ServiceAccount",
}

// types maps apiVersion/kind to the Go type a rendered document must decode
// into strictly. A kind missing here fails the test: a new object needs its
// type (and its checks) added.
var types = map[string]func() metav1.Object{
	"v1/ConfigMap":                      func() metav1.Object { return new(corev1.ConfigMap) },
	"v1/Namespace":                      func() metav1.Object { return new(corev1.Namespace) },
	"v1/Secret":                         func() metav1.Object { return new(corev1.Secret) },
	"v1/Service":                        func() metav1.Object { return new(corev1.Service) },
	"v1/ServiceAccount":                 func() metav1.Object { return new(corev1.ServiceAccount) },
	"rbac.authorization.k8s.io/v1/Role": func() metav1.Object { return new(rbacv1.Role) },
	"rbac.authorization.k8s.io/v1/RoleBinding": func() metav1.Object { return new(rbacv1.RoleBinding) },
	"apps/v1/Deployment":                       func() metav1.Object { return new(appsv1.Deployment) },
	"autoscaling/v2/HorizontalPodAutoscaler":   func() metav1.Object { return new(autoscalingv2.HorizontalPodAutoscaler) },
	"discovery.k8s.io/v1/EndpointSlice":        func() metav1.Object { return new(discoveryv1.EndpointSlice) },
	"networking.k8s.io/v1/NetworkPolicy":       func() metav1.Object { return new(networkingv1.NetworkPolicy) },
	"policy/v1/PodDisruptionBudget":            func() metav1.Object { return new(policyv1.PodDisruptionBudget) },
	"monitoring.coreos.com/v1/PodMonitor":      func() metav1.Object { return new(monitoringv1.PodMonitor) },
	"monitoring.coreos.com/v1/PrometheusRule":  func() metav1.Object { return new(monitoringv1.PrometheusRule) },
}

// object is one decoded document of a rendering.
type object struct {
	kind string
	obj  metav1.Object
}

// rendering is the decoded output of kustomize build or helm template.
type rendering struct {
	source  string
	objects []object
}

// decode splits out into YAML documents and decodes each strictly into its
// type: duplicate keys, unknown fields (matched case-sensitively, as the API
// server does) and wrong types are errors.
func decode(t *testing.T, source string, out []byte) *rendering {
	t.Helper()
	r := &rendering{source: source}
	rd := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(out)))
	for i := 0; ; i++ {
		doc, err := rd.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s: document %d: %v", source, i, err)
		}
		js, err := yaml.YAMLToJSONStrict(doc)
		if err != nil {
			t.Errorf("%s: document %d: %v", source, i, err)
			continue
		}
		if s := string(bytes.TrimSpace(js)); s == "null" || s == "" {
			continue // only comments
		}
		var tm metav1.TypeMeta
		if err := json.Unmarshal(js, &tm); err != nil {
			t.Errorf("%s: document %d: %v", source, i, err)
			continue
		}
		newObj, ok := types[tm.APIVersion+"/"+tm.Kind]
		if !ok {
			t.Errorf("%s: document %d: unexpected object %s %s", source, i, tm.APIVersion, tm.Kind)
			continue
		}
		obj := newObj()
		strict, err := kjson.UnmarshalStrict(js, obj, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
		if err = errors.Join(append([]error{err}, strict...)...); err != nil {
			t.Errorf("%s: %s %q: strict decoding: %v", source, tm.Kind, obj.GetName(), err)
			continue
		}
		r.objects = append(r.objects, object{kind: tm.Kind, obj: obj})
	}
	if len(r.objects) == 0 {
		t.Fatalf("%s: no objects", source)
	}
	return r
}

// kinds lists the kinds of r's objects, sorted, each once.
func (r *rendering) kinds() []string {
	var ks []string
	for _, o := range r.objects {
		ks = append(ks, o.kind)
	}
	slices.Sort(ks)
	return slices.Compact(ks)
}

// count says how many objects of each kind r has.
func (r *rendering) count() map[string]int {
	n := map[string]int{}
	for _, o := range r.objects {
		n[o.kind]++
	}
	return n
}

// all returns r's objects of type T.
func all[T metav1.Object](r *rendering) []T {
	var out []T
	for _, o := range r.objects {
		if v, ok := o.obj.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

// named returns r's object of type T named name, or the zero T.
func named[T metav1.Object](r *rendering, name string) (T, bool) {
	for _, v := range all[T](r) {
		if v.GetName() == name {
			return v, true
		}
	}
	var zero T
	return zero, false
}

// gateway is what checkGateway learnt of a rendering's gateway.
type gateway struct {
	deploy      *appsv1.Deployment
	container   *corev1.Container
	config      *policy.Config
	configText  string
	tokenSecret string // the Secret and key SWITCHYARD_ADMIN_TOKEN comes from
	tokenKey    string
}

// checkGateway checks what the gateway needs of a rendering: the Deployment
// (args, ports, probes on real endpoints, the policy mounted from a
// ConfigMap that passes validation, the admin token, the drain time,
// security, spreading) and the objects around it (Service, PDB, HPA,
// NetworkPolicy, PodMonitor, PrometheusRule), each selecting the gateway's
// pods.
func checkGateway(t *testing.T, r *rendering) *gateway {
	t.Helper()
	ds := all[*appsv1.Deployment](r)
	if len(ds) != 1 {
		t.Fatalf("%s: %d Deployments, want 1", r.source, len(ds))
	}
	d := ds[0]
	g := &gateway{deploy: d}
	pod := d.Spec.Template
	podLabels := labels.Set(pod.Labels)
	if !selects(t, d.Spec.Selector, podLabels) {
		t.Errorf("%s: Deployment %s: its selector does not select its pods", r.source, d.Name)
	}
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == gatewayName {
			g.container = &pod.Spec.Containers[i]
		}
	}
	if g.container == nil {
		t.Fatalf("%s: Deployment %s: no container %q", r.source, d.Name, gatewayName)
	}
	c := g.container

	// Replicas: two or more, or an HPA keeping two or more.
	var hpas []*autoscalingv2.HorizontalPodAutoscaler
	for _, h := range all[*autoscalingv2.HorizontalPodAutoscaler](r) {
		ref := h.Spec.ScaleTargetRef
		if ref.APIVersion != "apps/v1" || ref.Kind != "Deployment" || ref.Name != d.Name {
			t.Errorf("%s: HPA %s scales %s %s %q, want the Deployment %q", r.source, h.Name, ref.APIVersion, ref.Kind, ref.Name, d.Name)
			continue
		}
		hpas = append(hpas, h)
		if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas < 2 || h.Spec.MaxReplicas < *h.Spec.MinReplicas {
			t.Errorf("%s: HPA %s: minReplicas %s, maxReplicas %d: want 2 <= min <= max", r.source, h.Name, fmtPtr(h.Spec.MinReplicas), h.Spec.MaxReplicas)
		}
		cpu := false
		for _, m := range h.Spec.Metrics {
			if m.Type == autoscalingv2.ResourceMetricSourceType && m.Resource != nil && m.Resource.Name == corev1.ResourceCPU &&
				m.Resource.Target.Type == autoscalingv2.UtilizationMetricType && m.Resource.Target.AverageUtilization != nil {
				cpu = true
			}
		}
		if !cpu {
			t.Errorf("%s: HPA %s: no CPU utilization target", r.source, h.Name)
		}
	}
	switch {
	case d.Spec.Replicas != nil && *d.Spec.Replicas < 2:
		t.Errorf("%s: Deployment %s: %d replicas, want 2 or more", r.source, d.Name, *d.Spec.Replicas)
	case d.Spec.Replicas == nil && len(hpas) == 0:
		t.Errorf("%s: Deployment %s: no replicas and no HPA: one pod", r.source, d.Name)
	}
	if ru := d.Spec.Strategy.RollingUpdate; ru == nil || ru.MaxUnavailable == nil || ru.MaxUnavailable.String() != "0" {
		t.Errorf("%s: Deployment %s: rolling update must keep maxUnavailable 0", r.source, d.Name)
	}

	// Args and ports.
	if len(c.Args) == 0 || c.Args[0] != "serve" {
		t.Fatalf("%s: container args %q, want serve …", r.source, c.Args)
	}
	configPath, adminListen := flagValue(c.Args, "--config"), flagValue(c.Args, "--admin-listen")
	if configPath == "" || adminListen == "" {
		t.Fatalf("%s: container args %q: want --config and --admin-listen", r.source, c.Args)
	}
	httpPort, adminPort := containerPort(c, "http"), containerPort(c, "admin")
	if httpPort == 0 || adminPort == 0 {
		t.Fatalf("%s: container ports %v: want ports named http and admin", r.source, c.Ports)
	}
	if host, port := splitPort(t, adminListen); host != "0.0.0.0" || port != adminPort {
		t.Errorf("%s: --admin-listen %s: want 0.0.0.0 and the admin port %d", r.source, adminListen, adminPort)
	}

	// Probes on the gateway's real endpoints (README: HTTP endpoints), on
	// the admin listener: a client listener full of a tenant's
	// connections must not get the pod restarted.
	checkProbe(t, r.source+": livenessProbe", c.LivenessProbe, "/healthz", c, adminPort)
	checkProbe(t, r.source+": readinessProbe", c.ReadinessProbe, "/readyz", c, adminPort)

	// The policy: the ConfigMap mounted as the directory of --config (no
	// subPath, which the kubelet's symlink swap would not reach).
	var mount *corev1.VolumeMount
	for i, m := range c.VolumeMounts {
		if m.MountPath == path.Dir(configPath) {
			mount = &c.VolumeMounts[i]
		}
	}
	if mount == nil {
		t.Fatalf("%s: no volume mounted at %s, the directory of --config %s", r.source, path.Dir(configPath), configPath)
	}
	if mount.SubPath != "" || mount.SubPathExpr != "" {
		t.Errorf("%s: the config volume is mounted with a subPath: ConfigMap updates would never reach the pod", r.source)
	}
	var cmName string
	for _, v := range pod.Spec.Volumes {
		if v.Name == mount.Name && v.ConfigMap != nil {
			cmName = v.ConfigMap.Name
		}
	}
	cm, ok := named[*corev1.ConfigMap](r, cmName)
	if !ok {
		t.Fatalf("%s: the config volume %q is no ConfigMap of the rendering (%q)", r.source, mount.Name, cmName)
	}
	key := path.Base(configPath)
	text, ok := cm.Data[key]
	if !ok {
		t.Fatalf("%s: ConfigMap %s has no key %q", r.source, cm.Name, key)
	}
	g.configText = text
	reg := router.LoadOptions()
	reg.SkipEnv = true
	cfg, err := policy.Load(fmt.Sprintf("%s: ConfigMap %s: %s", r.source, cm.Name, key), []byte(text), reg)
	if err != nil {
		t.Fatalf("the policy does not validate:\n%v", err)
	}
	g.config = cfg
	if _, port := splitPort(t, cfg.Server.Listen); port != httpPort {
		t.Errorf("%s: server.listen %s, but the container's http port is %d", r.source, cfg.Server.Listen, httpPort)
	}

	// The admin token: the policy names the variable, the container sets
	// it from a Secret.
	if cfg.Server.AdminTokenEnv != tokenEnv || !cfg.Server.AdminTokenMetrics {
		t.Errorf("%s: the policy has admin_token_env %q, admin_token_metrics %v: want %s and true (the admin API listens on %s)",
			r.source, cfg.Server.AdminTokenEnv, cfg.Server.AdminTokenMetrics, tokenEnv, adminListen)
	}
	for _, e := range c.Env {
		if e.Name == tokenEnv && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			g.tokenSecret, g.tokenKey = e.ValueFrom.SecretKeyRef.Name, e.ValueFrom.SecretKeyRef.Key
		}
	}
	if g.tokenSecret == "" {
		t.Errorf("%s: the container does not set %s from a Secret", r.source, tokenEnv)
	}

	// The kubelet must not kill a pod that is still draining.
	drain, instances := serverKeys(t, text)
	grace := cfg.Server.ShutdownGrace.Std() + drain
	if tg := pod.Spec.TerminationGracePeriodSeconds; tg == nil || time.Duration(*tg)*time.Second <= grace {
		t.Errorf("%s: terminationGracePeriodSeconds %s, want more than shutdown_grace plus drain_delay (%v)", r.source, fmtPtr(tg), grace)
	}

	// server.instances, when set, is the number of gateways the
	// Deployment starts with.
	replicas := d.Spec.Replicas
	if replicas == nil && len(hpas) > 0 {
		replicas = hpas[0].Spec.MinReplicas
	}
	if instances != 0 && (replicas == nil || int(*replicas) != instances) {
		t.Errorf("%s: server.instances %d, but the Deployment starts %s gateways", r.source, instances, fmtPtr(replicas))
	}

	// Security and resources.
	psc, csc := pod.Spec.SecurityContext, c.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
		t.Errorf("%s: the pod must run as non-root", r.source)
	}
	if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: the pod's seccomp profile must be RuntimeDefault", r.source)
	}
	switch {
	case csc == nil:
		t.Errorf("%s: the container has no securityContext", r.source)
	case csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation,
		csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem,
		csc.Capabilities == nil || !slices.Contains(csc.Capabilities.Drop, "ALL"):
		t.Errorf("%s: the container must disallow privilege escalation, have a read-only root filesystem and drop ALL capabilities", r.source)
	}
	for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if c.Resources.Requests.Name(res, "").IsZero() || c.Resources.Limits.Name(res, "").IsZero() {
			t.Errorf("%s: the container has no %s request or limit", r.source, res)
		}
	}
	spread := false
	for _, tsc := range pod.Spec.TopologySpreadConstraints {
		if tsc.TopologyKey == "kubernetes.io/hostname" && selects(t, tsc.LabelSelector, podLabels) {
			spread = true
		}
	}
	if !spread {
		t.Errorf("%s: no topology spread over kubernetes.io/hostname selecting the gateway's pods", r.source)
	}

	// The Service (the one with a selector: the overlay's vLLM Services
	// have none).
	var svcs []*corev1.Service
	for _, s := range all[*corev1.Service](r) {
		if len(s.Spec.Selector) > 0 {
			svcs = append(svcs, s)
		}
	}
	if len(svcs) != 1 {
		t.Fatalf("%s: %d Services with a selector, want 1", r.source, len(svcs))
	}
	svc := svcs[0]
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(podLabels) {
		t.Errorf("%s: Service %s does not select the gateway's pods", r.source, svc.Name)
	}
	if svc.Spec.Type != corev1.ServiceTypeClusterIP {
		t.Errorf("%s: Service %s is %s, want ClusterIP", r.source, svc.Name, svc.Spec.Type)
	}
	svcPorts := map[string][2]int32{}
	for _, p := range svc.Spec.Ports {
		svcPorts[p.Name] = [2]int32{p.Port, resolvePort(c, p.TargetPort)}
	}
	if diff := cmp.Diff(map[string][2]int32{"http": {80, httpPort}, "admin": {adminPort, adminPort}}, svcPorts); diff != "" {
		t.Errorf("%s: Service %s ports (name: port, container port) (-want +got):\n%s", r.source, svc.Name, diff)
	}

	// The PodDisruptionBudget.
	for _, p := range all[*policyv1.PodDisruptionBudget](r) {
		if !selects(t, p.Spec.Selector, podLabels) {
			t.Errorf("%s: PodDisruptionBudget %s does not select the gateway's pods", r.source, p.Name)
		}
		if p.Spec.MinAvailable == nil || *p.Spec.MinAvailable != intstr.FromInt32(1) {
			t.Errorf("%s: PodDisruptionBudget %s: minAvailable %s, want 1", r.source, p.Name, fmtPtr(p.Spec.MinAvailable))
		}
	}

	// The NetworkPolicy: the client port open to all, the admin port only
	// to named peers, among them the pods of the namespace.
	for _, np := range all[*networkingv1.NetworkPolicy](r) {
		checkNetworkPolicy(t, r.source, np, podLabels, httpPort, adminPort)
	}

	// The Prometheus Operator's objects.
	for _, pm := range all[*monitoringv1.PodMonitor](r) {
		if !selects(t, &pm.Spec.Selector, podLabels) {
			t.Errorf("%s: PodMonitor %s does not select the gateway's pods", r.source, pm.Name)
		}
		if len(pm.Spec.PodMetricsEndpoints) != 1 {
			t.Fatalf("%s: PodMonitor %s: %d endpoints, want 1", r.source, pm.Name, len(pm.Spec.PodMetricsEndpoints))
		}
		ep := pm.Spec.PodMetricsEndpoints[0]
		if ep.Port == nil || containerPort(c, *ep.Port) != adminPort || ep.Path != "/metrics" {
			t.Errorf("%s: PodMonitor %s scrapes port %s path %q, want the admin port and /metrics", r.source, pm.Name, fmtPtr(ep.Port), ep.Path)
		}
		a := ep.Authorization
		if a == nil || !strings.EqualFold(a.Type, "Bearer") || a.Credentials == nil ||
			a.Credentials.Name != g.tokenSecret || a.Credentials.Key != g.tokenKey {
			t.Errorf("%s: PodMonitor %s: authorization %+v, want a Bearer token from Secret %s key %s (admin_token_metrics)",
				r.source, pm.Name, a, g.tokenSecret, g.tokenKey)
		}
	}
	for _, pr := range all[*monitoringv1.PrometheusRule](r) {
		checkRules(t, r.source, pr)
	}
	// RBAC: the pods run as a ServiceAccount of the rendering, with its
	// token mounted, that may read EndpointSlices and nothing else.
	sa := pod.Spec.ServiceAccountName
	if _, ok := named[*corev1.ServiceAccount](r, sa); !ok || sa == "" {
		t.Errorf("%s: the pods' service account %q is not a ServiceAccount of the rendering", r.source, sa)
	}
	// Without a Role (the chart's rbac.enabled=false), no token either.
	apiAccess := len(all[*rbacv1.Role](r)) > 0
	if a := pod.Spec.AutomountServiceAccountToken; a == nil || *a != apiAccess {
		t.Errorf("%s: automountServiceAccountToken %s, want %t (discovery.kubernetes reads the API with it, when a Role allows)", r.source, fmtPtr(a), apiAccess)
	}
	if apiAccess {
		checkEndpointSliceReader(t, r, sa, d.Namespace)
	}
	return g
}

// checkNetworkPolicy checks that np applies to the gateway's pods, opens
// the client port to everyone, and lets only named peers, the pods of the
// namespace among them, reach the admin port.
func checkNetworkPolicy(t *testing.T, source string, np *networkingv1.NetworkPolicy, pod labels.Set, httpPort, adminPort int32) {
	t.Helper()
	if !selects(t, &np.Spec.PodSelector, pod) {
		t.Errorf("%s: NetworkPolicy %s does not select the gateway's pods", source, np.Name)
	}
	if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
		t.Errorf("%s: NetworkPolicy %s does not restrict ingress", source, np.Name)
	}
	covers := func(rule networkingv1.NetworkPolicyIngressRule, port int32) bool {
		if len(rule.Ports) == 0 {
			return true
		}
		for _, p := range rule.Ports {
			if p.Port != nil && p.Port.Type == intstr.Int && p.Port.IntVal == port {
				return true
			}
		}
		return false
	}
	httpOpen, namespace := false, false
	for _, rule := range np.Spec.Ingress {
		if len(rule.From) == 0 && covers(rule, httpPort) {
			httpOpen = true
		}
		if !covers(rule, adminPort) {
			continue
		}
		if len(rule.From) == 0 {
			t.Errorf("%s: NetworkPolicy %s opens the admin port %d to everyone", source, np.Name, adminPort)
		}
		for _, peer := range rule.From {
			if peer.PodSelector != nil && peer.NamespaceSelector == nil && peer.IPBlock == nil {
				namespace = true
			}
		}
	}
	if !httpOpen {
		t.Errorf("%s: NetworkPolicy %s does not open the client port %d to everyone", source, np.Name, httpPort)
	}
	if !namespace {
		t.Errorf("%s: NetworkPolicy %s does not let the namespace's pods reach the admin port %d", source, np.Name, adminPort)
	}
}

// checkRules checks that pr holds the rules of examples/prometheus/alerts.yml
// unchanged, and that every expression parses as PromQL.
func checkRules(t *testing.T, source string, pr *monitoringv1.PrometheusRule) {
	t.Helper()
	var want struct {
		Groups []monitoringv1.RuleGroup `json:"groups"`
	}
	if err := yaml.UnmarshalStrict(readFile(t, alertsPath), &want); err != nil {
		t.Fatalf("%s: %v", alertsPath, err)
	}
	if diff := cmp.Diff(want.Groups, pr.Spec.Groups); diff != "" {
		t.Errorf("%s: PrometheusRule %s differs from %s (-want +got):\n%s", source, pr.Name, alertsPath, diff)
	}
	p := parser.NewParser(parser.Options{})
	n := 0
	for _, grp := range pr.Spec.Groups {
		for _, rule := range grp.Rules {
			n++
			if _, err := p.ParseExpr(rule.Expr.String()); err != nil {
				t.Errorf("%s: PrometheusRule %s: %s: %v", source, pr.Name, rule.Alert, err)
			}
		}
	}
	if n == 0 {
		t.Errorf("%s: PrometheusRule %s has no rules", source, pr.Name)
	}
}

// checkProbe checks that p asks GET path on the container's port wantPort.
func checkProbe(t *testing.T, what string, p *corev1.Probe, want string, c *corev1.Container, wantPort int32) {
	t.Helper()
	switch {
	case p == nil || p.HTTPGet == nil:
		t.Errorf("%s: want an httpGet probe of %s", what, want)
	case p.HTTPGet.Path != want || resolvePort(c, p.HTTPGet.Port) != wantPort:
		t.Errorf("%s: GET %s on port %s, want %s on port %d", what, p.HTTPGet.Path, p.HTTPGet.Port.String(), want, wantPort)
	case p.HTTPGet.Scheme != "" && p.HTTPGet.Scheme != corev1.URISchemeHTTP:
		t.Errorf("%s: scheme %s, want HTTP", what, p.HTTPGet.Scheme)
	}
}

// selects reports whether sel selects set.
func selects(t *testing.T, sel *metav1.LabelSelector, set labels.Set) bool {
	t.Helper()
	if sel == nil {
		return false
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Errorf("label selector %v: %v", sel, err)
		return false
	}
	return !s.Empty() && s.Matches(set)
}

// flagValue returns the value of flag in args (--flag value or
// --flag=value), or "".
func flagValue(args []string, flag string) string {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
	}
	return ""
}

// containerPort returns the number of c's port named name, or 0.
func containerPort(c *corev1.Container, name string) int32 {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	return 0
}

// resolvePort returns the container port p names (by number or name).
func resolvePort(c *corev1.Container, p intstr.IntOrString) int32 {
	if p.Type == intstr.Int {
		return p.IntVal
	}
	return containerPort(c, p.StrVal)
}

func splitPort(t *testing.T, addr string) (string, int32) {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	n, err := strconv.ParseInt(port, 10, 32)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	return host, int32(n)
}

// serverKeys returns the policy's server.drain_delay (or its default) and
// server.instances (0 when absent). They are read from the text, after
// policy.Load has validated it, so that this test does not depend on how
// the policy package holds them.
func serverKeys(t *testing.T, text string) (drainDelay time.Duration, instances int) {
	t.Helper()
	var doc struct {
		Server struct {
			DrainDelay string `json:"drain_delay"`
			Instances  int    `json:"instances"`
		} `json:"server"`
	}
	if err := yaml.Unmarshal([]byte(text), &doc); err != nil {
		t.Fatalf("policy: %v", err)
	}
	if doc.Server.DrainDelay == "" {
		return drainDelayDflt, doc.Server.Instances
	}
	d, err := time.ParseDuration(doc.Server.DrainDelay)
	if err != nil {
		t.Fatalf("policy: server.drain_delay: %v", err)
	}
	return d, doc.Server.Instances
}

// fmtPtr formats *p, or "unset" for nil.
func fmtPtr[T any](p *T) string {
	if p == nil {
		return "unset"
	}
	return fmt.Sprint(*p)
}

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkKinds checks that r has objects of the kinds want and no other, and
// one object of each of the gateway's kinds but Service (an overlay may add
// Services; checkGateway finds the gateway's).
func checkKinds(t *testing.T, r *rendering, want []string) {
	t.Helper()
	want = slices.Sorted(slices.Values(want))
	if diff := cmp.Diff(want, r.kinds()); diff != "" {
		t.Errorf("%s: kinds (-want +got):\n%s", r.source, diff)
	}
	for _, k := range gatewayKinds {
		if n := r.count()[k]; n > 1 && k != "Service" {
			t.Errorf("%s: %d objects of kind %s, want 1", r.source, n, k)
		}
	}
}

// TestKustomizeBase: the base renders, decodes strictly, and wires the
// gateway as it needs.
func TestKustomizeBase(t *testing.T) {
	r := renderKustomize(t, basePath)
	checkKinds(t, r, gatewayKinds)
	g := checkGateway(t, r)
	if g.container.Image != "switchyard:latest" {
		t.Errorf("image %q, want the documented placeholder switchyard:latest", g.container.Image)
	}
	if g.deploy.Spec.Replicas == nil || *g.deploy.Spec.Replicas < 2 {
		t.Errorf("Deployment replicas %s, want 2 or more", fmtPtr(g.deploy.Spec.Replicas))
	}
	s, ok := named[*corev1.Secret](r, g.tokenSecret)
	if !ok {
		t.Fatalf("no Secret %s for %s", g.tokenSecret, tokenEnv)
	}
	if v, ok := s.StringData[g.tokenKey]; !ok || !strings.HasPrefix(v, "REPLACE-ME") {
		t.Errorf("Secret %s key %s: %q, want the documented placeholder REPLACE-ME…", s.Name, g.tokenKey, v)
	}
	if want := string(readFile(t, filepath.Join(basePath, "switchyard.yaml"))); g.configText != want {
		t.Errorf("the ConfigMap's policy differs from %s/switchyard.yaml", basePath)
	}
}

// TestKustomizeDGXSpark: the reference cluster's overlay renders, decodes
// strictly, puts everything in its namespace, and gives every vLLM replica
// of its policy a headless Service with a static EndpointSlice.
func TestKustomizeDGXSpark(t *testing.T) {
	r := renderKustomize(t, overlayPath)
	checkKinds(t, r, append(slices.Clone(gatewayKinds), "EndpointSlice", "Namespace"))
	g := checkGateway(t, r)
	if want := string(readFile(t, filepath.Join(overlayPath, "switchyard.yaml"))); g.configText != want {
		t.Errorf("the ConfigMap's policy differs from %s/switchyard.yaml", overlayPath)
	}
	if _, ok := named[*corev1.Namespace](r, overlayNS); !ok {
		t.Errorf("no Namespace %s", overlayNS)
	}
	for _, o := range r.objects {
		if o.kind != "Namespace" && o.obj.GetNamespace() != overlayNS {
			t.Errorf("%s %s is in namespace %q, want %s", o.kind, o.obj.GetName(), o.obj.GetNamespace(), overlayNS)
		}
	}
	if _, ok := named[*corev1.Secret](r, g.tokenSecret); !ok {
		t.Errorf("no Secret %s for %s", g.tokenSecret, tokenEnv)
	}

	// Every replica URL names a Service of the overlay, headless and
	// without a selector, whose EndpointSlice holds an address on the
	// URL's port.
	endpoints := map[string]*discoveryv1.EndpointSlice{}
	for _, s := range all[*discoveryv1.EndpointSlice](r) {
		endpoints[s.Labels[discoveryv1.LabelServiceName]] = s
	}
	replicas := 0
	for _, pool := range g.config.Pools {
		name := pool.Name
		for _, rep := range pool.Replicas {
			replicas++
			u, err := url.Parse(rep.URL)
			if err != nil {
				t.Fatalf("pool %s replica %s: %v", name, rep.Name, err)
			}
			port, _ := strconv.ParseInt(u.Port(), 10, 32)
			svc, ok := named[*corev1.Service](r, u.Hostname())
			if !ok {
				t.Errorf("pool %s replica %s: %s names no Service of the overlay", name, rep.Name, rep.URL)
				continue
			}
			if svc.Spec.ClusterIP != corev1.ClusterIPNone || len(svc.Spec.Selector) > 0 {
				t.Errorf("Service %s: want headless (clusterIP None) and no selector", svc.Name)
			}
			es := endpoints[svc.Name]
			if es == nil {
				t.Errorf("Service %s: no EndpointSlice", svc.Name)
				continue
			}
			ok = false
			for _, p := range es.Ports {
				ok = ok || p.Port != nil && int64(*p.Port) == port
			}
			addrs := 0
			for _, ep := range es.Endpoints {
				for _, a := range ep.Addresses {
					if net.ParseIP(a) == nil {
						t.Errorf("EndpointSlice %s: address %q is no IP address", es.Name, a)
					}
					addrs++
				}
			}
			if !ok || addrs == 0 || es.AddressType != discoveryv1.AddressTypeIPv4 {
				t.Errorf("EndpointSlice %s: want an IPv4 address on port %d", es.Name, port)
			}
		}
	}
	if replicas != 5 {
		t.Errorf("the policy has %d replicas, want the reference cluster's 5", replicas)
	}
}

// TestHelmChart: the chart renders the kustomize base's objects (with the
// monitoring objects switched on), each decoding strictly and wired as the
// gateway needs, with the same default policy; its switches do what
// values.yaml says.
func TestHelmChart(t *testing.T) {
	r := renderHelm(t, "adminToken.value="+helmTestToken,
		"monitoring.podMonitor.enabled=true", "monitoring.prometheusRule.enabled=true")
	checkKinds(t, r, gatewayKinds)
	g := checkGateway(t, r)
	if want := string(readFile(t, filepath.Join(basePath, "switchyard.yaml"))); g.configText != strings.TrimSuffix(want, "\n") {
		t.Errorf("the chart's default policy differs from %s/switchyard.yaml", basePath)
	}
	s, ok := named[*corev1.Secret](r, g.tokenSecret)
	if !ok || s.StringData[g.tokenKey] != helmTestToken {
		t.Errorf("Secret %s key %s: want the token given in adminToken.value", g.tokenSecret, g.tokenKey)
	}
	if g.deploy.Spec.Replicas != nil {
		t.Errorf("with autoscaling the Deployment must leave replicas to the HPA, got %d", *g.deploy.Spec.Replicas)
	}

	t.Run("same kinds as kustomize", func(t *testing.T) {
		base := renderKustomize(t, basePath)
		if diff := cmp.Diff(base.kinds(), r.kinds()); diff != "" {
			t.Errorf("kinds (-kustomize base +helm):\n%s", diff)
		}
	})
	t.Run("monitoring off by default", func(t *testing.T) {
		r := renderHelm(t, "adminToken.value="+helmTestToken)
		want := slices.DeleteFunc(slices.Clone(gatewayKinds), func(k string) bool { return k == "PodMonitor" || k == "PrometheusRule" })
		checkKinds(t, r, want)
		checkGateway(t, r)
	})
	t.Run("existing secret", func(t *testing.T) {
		r := renderHelm(t, "adminToken.existingSecret=my-token", "adminToken.key=bearer",
			"monitoring.podMonitor.enabled=true")
		if n := len(all[*corev1.Secret](r)); n != 0 {
			t.Errorf("%d Secrets, want none: the Secret exists", n)
		}
		if g := checkGateway(t, r); g.tokenSecret != "my-token" || g.tokenKey != "bearer" {
			t.Errorf("the token comes from Secret %s key %s, want my-token key bearer", g.tokenSecret, g.tokenKey)
		}
	})
	t.Run("autoscaling off", func(t *testing.T) {
		// replicaCount stays 2, the policy's server.instances.
		r := renderHelm(t, "adminToken.value="+helmTestToken, "autoscaling.enabled=false")
		if n := len(all[*autoscalingv2.HorizontalPodAutoscaler](r)); n != 0 {
			t.Errorf("%d HPAs, want none", n)
		}
		if g := checkGateway(t, r); g.deploy.Spec.Replicas == nil || *g.deploy.Spec.Replicas != 2 {
			t.Errorf("Deployment replicas %s, want replicaCount 2", fmtPtr(g.deploy.Spec.Replicas))
		}
	})
	t.Run("rbac off", func(t *testing.T) {
		r := renderHelm(t, "adminToken.value="+helmTestToken, "rbac.enabled=false")
		want := slices.DeleteFunc(slices.Clone(gatewayKinds), func(k string) bool {
			return k == "PodMonitor" || k == "PrometheusRule" || k == "Role" || k == "RoleBinding"
		})
		checkKinds(t, r, want)
		checkGateway(t, r)
	})
	t.Run("no token", func(t *testing.T) {
		_, err := helmTemplate(t)
		if err == nil || !strings.Contains(err.Error(), "set adminToken.value") {
			t.Errorf("helm template without a token: %v, want the error asking for adminToken.value", err)
		}
	})
}

// TestPolicies checks the policy files of deploy/ without rendering
// anything: each validates, the chart's default is the base's, its alert
// rules are examples/prometheus/alerts.yml, and the overlay's policy is the
// reference example with only the documented changes.
func TestPolicies(t *testing.T) {
	reg := router.LoadOptions()
	reg.SkipEnv = true
	for _, f := range []string{filepath.Join(basePath, "switchyard.yaml"), filepath.Join(overlayPath, "switchyard.yaml")} {
		if _, err := policy.LoadFile(f, reg); err != nil {
			t.Errorf("%v", err)
		}
	}

	var values struct {
		Config string `json:"config"`
	}
	if err := yaml.Unmarshal(readFile(t, filepath.Join(chartPath, "values.yaml")), &values); err != nil {
		t.Fatal(err)
	}
	if values.Config != string(readFile(t, filepath.Join(basePath, "switchyard.yaml"))) {
		t.Errorf("%s/values.yaml: config differs from %s/switchyard.yaml", chartPath, basePath)
	}
	if !bytes.Equal(readFile(t, filepath.Join(chartPath, "files/alerts.yml")), readFile(t, alertsPath)) {
		t.Errorf("%s/files/alerts.yml differs from %s: copy it", chartPath, alertsPath)
	}

	// The overlay's policy, with its documented changes undone, is the
	// reference example.
	var want, got map[string]any
	if err := yaml.Unmarshal(readFile(t, referencePath), &want); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(readFile(t, filepath.Join(overlayPath, "switchyard.yaml")), &got); err != nil {
		t.Fatal(err)
	}
	server := got["server"].(map[string]any)
	if server["admin_listen"] != "0.0.0.0:9090" || server["admin_token_env"] != tokenEnv || server["admin_token_metrics"] != true {
		t.Errorf("overlay policy: server %v: want admin_listen 0.0.0.0:9090, admin_token_env %s, admin_token_metrics true", server, tokenEnv)
	}
	if server["instances"] != 2.0 {
		t.Errorf("overlay policy: server.instances %v, want the Deployment's 2 replicas", server["instances"])
	}
	server["admin_listen"] = want["server"].(map[string]any)["admin_listen"]
	delete(server, "admin_token_env")
	delete(server, "admin_token_metrics")
	delete(server, "instances")
	wantURLs := map[string]any{}
	for _, pool := range want["pools"].(map[string]any) {
		for _, rep := range pool.(map[string]any)["replicas"].([]any) {
			rep := rep.(map[string]any)
			wantURLs[rep["name"].(string)] = rep["url"]
		}
	}
	for _, pool := range got["pools"].(map[string]any) {
		for _, rep := range pool.(map[string]any)["replicas"].([]any) {
			rep := rep.(map[string]any)
			name := rep["name"].(string)
			if u := "http://vllm-" + name + ":8000"; rep["url"] != u {
				t.Errorf("overlay policy: replica %s: url %v, want %s (its Service in vllm-endpoints.yaml)", name, rep["url"], u)
			}
			rep["url"] = wantURLs[name]
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("overlay policy differs from %s beyond the documented changes (-want +got):\n%s", referencePath, diff)
	}
}

// checkEndpointSliceReader: r's Roles grant exactly get, list and watch on
// EndpointSlices, and a RoleBinding of r binds one to the ServiceAccount
// sa of namespace ns (empty: the binding's own).
func checkEndpointSliceReader(t *testing.T, r *rendering, sa, ns string) {
	t.Helper()
	roles := map[string]*rbacv1.Role{}
	want := []rbacv1.PolicyRule{{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get", "list", "watch"}}}
	for _, role := range all[*rbacv1.Role](r) {
		roles[role.Name] = role
		if diff := cmp.Diff(want, role.Rules); diff != "" {
			t.Errorf("%s: Role %s: rules (-want +got):\n%s", r.source, role.Name, diff)
		}
	}
	bound := false
	for _, b := range all[*rbacv1.RoleBinding](r) {
		if b.RoleRef.APIGroup != rbacv1.GroupName || b.RoleRef.Kind != "Role" || roles[b.RoleRef.Name] == nil {
			t.Errorf("%s: RoleBinding %s binds %s %s, not a Role of the rendering", r.source, b.Name, b.RoleRef.Kind, b.RoleRef.Name)
			continue
		}
		for _, s := range b.Subjects {
			sns := s.Namespace
			if sns == "" {
				sns = b.Namespace
			}
			if s.Kind == rbacv1.ServiceAccountKind && s.Name == sa && (ns == "" || sns == ns) {
				bound = true
			}
		}
	}
	if !bound {
		t.Errorf("%s: no RoleBinding binds the EndpointSlice reader to ServiceAccount %s (namespace %q)", r.source, sa, ns)
	}
}
