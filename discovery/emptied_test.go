package discovery_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/switchyard/switchyard/discovery"
	"github.com/switchyard/switchyard/internal/kubetest"
)

// scriptedWatcher tells its updates in order, then waits for the end.
type scriptedWatcher []struct {
	addrs []string
	err   error
}

func (s scriptedWatcher) Watch(ctx context.Context, update func([]string, error)) {
	for _, u := range s {
		update(u.addrs, u.err)
	}
	<-ctx.Done()
}

// TestDiscoveryEmptiedBySource: a source that says the set is empty
// (ErrNoReadyEndpoints: the API server lists no endpoint) empties it; a
// lost source (any other error) or a name without records keeps the last
// good set.
func TestDiscoveryEmptiedBySource(t *testing.T) {
	none := fmt.Errorf("service %q: %w", "inference/vllm", discovery.ErrNoReadyEndpoints)
	if !errors.Is(none, discovery.ErrNoRecords) {
		t.Fatal("ErrNoReadyEndpoints is not an ErrNoRecords")
	}
	type step struct {
		addrs  []string
		err    error
		want   []string
		result string
	}
	steps := []step{
		{[]string{"10.0.0.1:8000", "10.0.0.2:8000"}, nil, []string{"10.0.0.1:8000", "10.0.0.2:8000"}, discovery.ResultOK},
		{nil, errors.New("watching the EndpointSlices: connection refused"), []string{"10.0.0.1:8000", "10.0.0.2:8000"}, discovery.ResultError},
		{nil, discovery.ErrNoRecords, []string{"10.0.0.1:8000", "10.0.0.2:8000"}, discovery.ResultEmpty},
		{nil, none, nil, discovery.ResultEmpty},
		{nil, errors.New("lost again"), nil, discovery.ResultError},
		{[]string{"10.0.0.3:8000"}, nil, []string{"10.0.0.3:8000"}, discovery.ResultOK},
	}
	var events []discovery.Event
	for i, st := range steps {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			var w scriptedWatcher
			for _, s := range steps[:i+1] {
				w = append(w, struct {
					addrs []string
					err   error
				}{s.addrs, s.err})
			}
			events = events[:0]
			d := discovery.New(discovery.Options{Pool: "small", Kind: "kubernetes", Name: "inference/vllm", Interval: time.Minute,
				Watcher: w, OnEvent: func(ev discovery.Event) { events = append(events, ev) }})
			// The script is told at once; an ended context then ends Run.
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			d.Run(ctx, func() {})
			s := d.Status()
			if diff := cmp.Diff(st.want, s.Addrs); diff != "" {
				t.Errorf("set (-want +got):\n%s", diff)
			}
			if s.Result != st.result {
				t.Errorf("result %s, want %s", s.Result, st.result)
			}
			if len(d.Replicas()) != len(st.want) {
				t.Errorf("%d replicas, want %d", len(d.Replicas()), len(st.want))
			}
		})
	}
	// The step that empties the set tells what it removed and why.
	if ev := events[3]; ev.Result != discovery.ResultEmpty || len(ev.Addrs) != 0 ||
		!cmp.Equal(ev.Removed, []string{"10.0.0.1:8000", "10.0.0.2:8000"}) || !errors.Is(ev.Err, discovery.ErrNoReadyEndpoints) {
		t.Errorf("the emptying event: %+v", ev)
	}
}

// TestKubernetesServiceEmptied follows a Service's EndpointSlices on the
// fake API server (kubetest.StartSlices, which needs no binary) through
// a Discovery: every slice deleted empties the set, with an error naming
// the Service; a lost watch and a failed list keep it.
func TestKubernetesServiceEmptied(t *testing.T) {
	fs := kubetest.StartSlices(t, "inference")
	fs.Put(slice("vllm-a", "vllm", discoveryv1.AddressTypeIPv4, httpPort(8000), endpoint("192.0.2.1", yes, yes, no)))
	k := discovery.NewKubernetes(discovery.KubernetesOptions{Service: "vllm", Namespace: "inference", PortName: "http", Kubeconfig: fs.Kubeconfig})
	events := make(chan discovery.Event, 64)
	d := discovery.New(discovery.Options{Pool: "small", Kind: "kubernetes", Name: k.Name(), Interval: time.Minute, Timeout: 10 * time.Second,
		Lookup: k, Watcher: k, OnEvent: func(ev discovery.Event) { events <- ev }})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	defer func() { cancel(); <-done }()
	if !d.Resolve(ctx) {
		t.Fatalf("the first list: %+v", d.Status())
	}
	<-events
	go func() { defer close(done); d.Run(ctx, func() {}) }()
	await := func(what string, ok func(discovery.Event) bool) discovery.Event {
		t.Helper()
		timeout := time.After(time.Minute) // only for a broken test: each step is told
		for {
			select {
			case ev := <-events:
				if ok(ev) {
					return ev
				}
			case <-timeout:
				t.Fatalf("%s: never told; status %+v", what, d.Status())
			}
		}
	}
	set := func(want ...string) func(discovery.Event) bool {
		return func(ev discovery.Event) bool { return ev.Result == discovery.ResultOK && cmp.Equal(ev.Addrs, want) }
	}

	fs.Put(slice("vllm-a", "vllm", discoveryv1.AddressTypeIPv4, httpPort(8000),
		endpoint("192.0.2.1", yes, yes, no), endpoint("192.0.2.2", yes, yes, no)))
	await("the second pod", set("192.0.2.1:8000", "192.0.2.2:8000"))

	// The API server goes away: the set is kept.
	fs.Break()
	ev := await("the lost watch", func(ev discovery.Event) bool { return ev.Result == discovery.ResultError })
	if !cmp.Equal(ev.Addrs, []string{"192.0.2.1:8000", "192.0.2.2:8000"}) {
		t.Errorf("a lost watch changed the set to %v", ev.Addrs)
	}
	if got := d.Replicas(); len(got) != 2 {
		t.Errorf("%d replicas while the API server is down, want 2 kept", len(got))
	}
	fs.Mend()
	await("the watch back", set("192.0.2.1:8000", "192.0.2.2:8000"))

	// Every slice deleted: the API server lists no endpoint, the set is empty.
	fs.Delete("vllm-a")
	ev = await("the Service emptied", func(ev discovery.Event) bool { return ev.Result == discovery.ResultEmpty })
	if len(ev.Addrs) != 0 || !cmp.Equal(ev.Removed, []string{"192.0.2.1:8000", "192.0.2.2:8000"}) {
		t.Errorf("emptied: set %v, removed %v", ev.Addrs, ev.Removed)
	}
	const why = `service "inference/vllm" (port "http"): no ready or serving endpoint on the port in its EndpointSlices`
	if ev.Err == nil || ev.Err.Error() != why || !errors.Is(ev.Err, discovery.ErrNoReadyEndpoints) {
		t.Errorf("emptied: error %v, want %q", ev.Err, why)
	}
	if st := d.Status(); len(st.Addrs) != 0 || st.Err != why || len(d.Replicas()) != 0 {
		t.Errorf("status after the Service emptied: %+v", st)
	}

	// A pod listed but not ready: still empty. Ready: back.
	fs.Put(slice("vllm-b", "vllm", discoveryv1.AddressTypeIPv4, httpPort(8000), endpoint("192.0.2.3", no, no, no)))
	fs.Put(slice("vllm-b", "vllm", discoveryv1.AddressTypeIPv4, httpPort(8000), endpoint("192.0.2.3", yes, yes, no)))
	await("a pod ready again", set("192.0.2.3:8000"))

	// A failed list keeps the set too: a new Lookup while the server is down.
	fs.Break()
	if d.Resolve(ctx) {
		t.Error("a failed list changed the set")
	}
	if st := d.Status(); st.Result != discovery.ResultError || !cmp.Equal(st.Addrs, []string{"192.0.2.3:8000"}) {
		t.Errorf("after a failed list: %+v", st)
	}
	if st := d.Status(); !strings.Contains(st.Err, "listing the EndpointSlices of inference/vllm") {
		t.Errorf("a failed list's error %q does not say what failed", st.Err)
	}
}
