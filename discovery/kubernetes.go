package discovery

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

// KubernetesOptions names a Service whose EndpointSlices are a pool's
// replicas.
type KubernetesOptions struct {
	// Service and Namespace name the Service; an empty Namespace is the
	// gateway's own (see NewKubernetes).
	Service, Namespace string
	// PortName or PortNumber selects the EndpointSlices' port: by its
	// name, else by its number (the pods' port).
	PortName   string
	PortNumber int
	// Kubeconfig is a kubeconfig file (its current context); empty means
	// the pod's service account (in-cluster).
	Kubeconfig string
}

// serviceAccountNamespace is the file holding a pod's namespace.
var serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// ErrNoReadyEndpoints is a Service whose EndpointSlices, as the API server
// lists them, hold no ready (nor serving) endpoint on the port. Unlike a
// DNS name without records, this answer is authoritative (the informer's
// store is the API server's own state): the pool's set becomes empty and
// its requests get 503 at once, as Envoy's EDS and kube-proxy drop every
// endpoint then. A failed list or a lost watch is another error, which
// keeps the last good set. It is an ErrNoRecords too (result "empty").
var ErrNoReadyEndpoints error = noReadyEndpoints{}

type noReadyEndpoints struct{}

func (noReadyEndpoints) Error() string {
	return "no ready or serving endpoint on the port in its EndpointSlices"
}

func (noReadyEndpoints) Is(target error) bool { return target == ErrNoRecords }

// Kubernetes follows a Service's discovery.k8s.io/v1 EndpointSlices (those
// labelled kubernetes.io/service-name=SERVICE) with a client-go informer
// over the dynamic client. The slices are read as unstructured objects,
// not as k8s.io/api's types: those link core/v1 with them, which cost the
// stripped binary 3.3 MB and a gateway's idle RSS 0.7-1.0 MB, Kubernetes
// discovery in use or not.
// It is a Lookup (one List, for a discovery's first set) and a Watcher
// (the informer, for every change after). The set in use is the ready
// endpoints that are not terminating; when there is none, the serving
// terminating ones (kube-proxy's fallback, so a Service whose every pod is
// terminating still serves while they drain).
type Kubernetes struct {
	o         KubernetesOptions
	namespace string
	slices    dynamic.ResourceInterface
	// err is why no client could be made (no kubeconfig, not in a pod):
	// every lookup and the watch report it.
	err error
}

// NewKubernetes returns the source for o. It does not reach the API
// server; a configuration that cannot make a client (an unreadable
// kubeconfig, no service account) is reported by every Lookup and Watch.
func NewKubernetes(o KubernetesOptions) *Kubernetes {
	k := &Kubernetes{o: o, namespace: o.Namespace}
	cfg, ns, err := restConfig(o.Kubeconfig)
	if err != nil {
		k.err = err
	} else {
		cfg.UserAgent = "switchyard"
	}
	if k.namespace == "" {
		k.namespace = ns
	}
	if k.namespace == "" {
		k.namespace = "default"
	}
	if k.err == nil {
		var dyn *dynamic.DynamicClient
		dyn, k.err = dynamic.NewForConfig(cfg)
		if k.err == nil {
			k.slices = dyn.Resource(endpointSlices).Namespace(k.namespace)
		}
	}
	return k
}

// restConfig reads the kubeconfig file, or the pod's service account when
// path is empty, and returns the namespace it implies.
func restConfig(path string) (*rest.Config, string, error) {
	if path == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, "", fmt.Errorf("no kubeconfig given and not in a pod with a service account: %w", err)
		}
		ns, _ := os.ReadFile(serviceAccountNamespace)
		return cfg, strings.TrimSpace(string(ns)), nil
	}
	raw, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return nil, "", fmt.Errorf("kubeconfig: %w", err)
	}
	cc := clientcmd.NewDefaultClientConfig(*raw, &clientcmd.ConfigOverrides{})
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	ns, _, _ := cc.Namespace()
	return cfg, ns, nil
}

// Name is the Service as NAMESPACE/SERVICE.
func (k *Kubernetes) Name() string { return k.namespace + "/" + k.o.Service }

// noEndpoints is ErrNoReadyEndpoints naming the Service and the port:
// `service "inference/vllm" (port "http"): no ready or serving endpoint…`.
func (k *Kubernetes) noEndpoints() error {
	port := strconv.Itoa(k.o.PortNumber)
	if k.o.PortName != "" {
		port = strconv.Quote(k.o.PortName)
	}
	return fmt.Errorf("service %q (port %s): %w", k.Name(), port, ErrNoReadyEndpoints)
}

// endpointSlices is the resource the source lists and watches.
var endpointSlices = schema.GroupVersionResource{Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices"}

// selector selects the Service's slices by the label their controller
// sets (discovery.k8s.io/v1's LabelServiceName).
func (k *Kubernetes) selector() string {
	return "kubernetes.io/service-name=" + k.o.Service
}

// Lookup lists the Service's EndpointSlices once and returns the set in
// use (kind, name and port are the options'). It implements Lookup.
func (k *Kubernetes) Lookup(ctx context.Context, _, _ string, _ int) ([]string, time.Duration, error) {
	if k.err != nil {
		return nil, -1, k.err
	}
	list, err := k.slices.List(ctx, metav1.ListOptions{LabelSelector: k.selector()})
	if err != nil {
		return nil, -1, fmt.Errorf("listing the EndpointSlices of %s: %w", k.Name(), err)
	}
	eps := make([]*unstructured.Unstructured, len(list.Items))
	for i := range list.Items {
		eps[i] = &list.Items[i]
	}
	addrs := k.addresses(eps)
	if len(addrs) == 0 {
		return nil, -1, k.noEndpoints()
	}
	return addrs, -1, nil
}

// Watch runs an informer on the Service's EndpointSlices until ctx ends.
// After its first sync, every change the informer tells is the whole set
// again; a failed list or watch is the error (the informer retries with
// its own backoff), and the next successful list or watch the set again.
// It implements Watcher.
func (k *Kubernetes) Watch(ctx context.Context, update func(addrs []string, err error)) {
	if k.err != nil {
		update(nil, k.err)
		<-ctx.Done()
		return
	}
	var (
		mu sync.Mutex // serialises updates: handlers and the reflector run apart
		// synced: the first sync is done; before it, the store is partial.
		synced bool
		inf    cache.SharedIndexInformer
	)
	current := func() {
		mu.Lock()
		defer mu.Unlock()
		if !synced {
			return
		}
		objs := inf.GetStore().List()
		eps := make([]*unstructured.Unstructured, 0, len(objs))
		for _, o := range objs {
			if s, ok := o.(*unstructured.Unstructured); ok {
				eps = append(eps, s)
			}
		}
		addrs := k.addresses(eps)
		if len(addrs) == 0 {
			update(nil, k.noEndpoints())
			return
		}
		update(addrs, nil)
	}
	failed := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		update(nil, fmt.Errorf("watching the EndpointSlices of %s: %w", k.Name(), err))
	}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = k.selector()
			return k.slices.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = k.selector()
			w, err := k.slices.Watch(ctx, o)
			switch {
			case err == nil:
				// The API server answers again: the set is the store's
				// (a relist after a lost watch tells its changes too).
				current()
			case ctx.Err() == nil:
				// The reflector retries a refused watch quietly, with
				// its backoff, without telling the error handler.
				failed(err)
			}
			return w, err
		},
	}
	inf = cache.NewSharedIndexInformerWithOptions(lw, &unstructured.Unstructured{}, cache.SharedIndexInformerOptions{
		ObjectDescription: "EndpointSlices of " + k.Name()})
	// The handler replaces client-go's default one, which logs every
	// retry: the discovery logs once per change instead.
	_ = inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		if !errors.Is(err, context.Canceled) && ctx.Err() == nil {
			failed(err)
		}
	})
	changed := func() {
		if ctx.Err() == nil {
			current()
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { changed() },
		UpdateFunc: func(_, _ any) { changed() },
		DeleteFunc: func(any) { changed() },
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		inf.RunWithContext(ctx)
	}()
	if cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		mu.Lock()
		synced = true
		mu.Unlock()
		current()
	}
	<-done
}

// addresses returns the set in use from a Service's EndpointSlices: the
// HOST:PORT of each ready, not terminating endpoint on the port (or, with
// none, of each serving terminating one), sorted, without duplicates (an
// endpoint may show in two slices while the controller moves it). Slices
// of FQDN addresses, other protocols and unparsable addresses are skipped.
func (k *Kubernetes) addresses(eps []*unstructured.Unstructured) []string {
	var ready, serving []string
	for _, s := range eps {
		typ, _, _ := unstructured.NestedString(s.Object, "addressType")
		if typ != "IPv4" && typ != "IPv6" {
			continue
		}
		ports, _, _ := unstructured.NestedFieldNoCopy(s.Object, "ports")
		port, ok := k.port(ports)
		if !ok {
			continue
		}
		endpoints, _, _ := unstructured.NestedFieldNoCopy(s.Object, "endpoints")
		list, _ := endpoints.([]any)
		for _, e := range list {
			ep, ok := e.(map[string]any)
			if !ok {
				continue
			}
			isReady := condition(ep, "ready", true)
			isServing := condition(ep, "serving", isReady)
			terminating := condition(ep, "terminating", false)
			addrs, _, _ := unstructured.NestedStringSlice(ep, "addresses")
			for _, a := range addrs {
				ip, err := netip.ParseAddr(a)
				if err != nil || ip.Zone() != "" {
					continue
				}
				hp := net.JoinHostPort(ip.String(), strconv.Itoa(port))
				switch {
				case isReady && !terminating:
					ready = append(ready, hp)
				case isServing && terminating:
					serving = append(serving, hp)
				}
			}
		}
	}
	set := ready
	if len(set) == 0 {
		set = serving
	}
	return slices.Compact(slices.Sorted(slices.Values(set)))
}

// condition is an endpoint's condition, or unset when it is not a boolean
// (an unknown state: the API's own default for ready and serving).
func condition(ep map[string]any, name string, unset bool) bool {
	v, found, err := unstructured.NestedBool(ep, "conditions", name)
	if !found || err != nil {
		return unset
	}
	return v
}

// port returns the number of the slice's port the options select (TCP; a
// port without a protocol is TCP).
func (k *Kubernetes) port(ports any) (int, bool) {
	list, _ := ports.([]any)
	for _, p := range list {
		m, ok := p.(map[string]any)
		if !ok {
			continue
		}
		n, found, err := unstructured.NestedInt64(m, "port")
		if !found || err != nil || n < 1 || n > 65535 {
			continue
		}
		if proto, found, err := unstructured.NestedString(m, "protocol"); err != nil || found && proto != "TCP" {
			continue
		}
		name, _, err := unstructured.NestedString(m, "name")
		if err != nil {
			continue
		}
		if k.o.PortName != "" && name == k.o.PortName || k.o.PortName == "" && int(n) == k.o.PortNumber {
			return int(n), true
		}
	}
	return 0, false
}
