package kubetest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Slices stands in for the Kubernetes API server where a test needs only
// what discovery reads of it: one namespace's discovery.k8s.io/v1
// EndpointSlices, listed and watched (JSON, the watch-list's initial
// events and bookmark included), on 127.0.0.1. It needs no binary, so the
// tests on it never skip; the tests on a real API server (Start) check
// the rest (the real encodings, validation, a restart). Break makes it
// fail as an API server that went away does: every watch ends, every
// request gets 503, until Mend.
type Slices struct {
	// URL is the server's base URL; Kubeconfig a kubeconfig file naming
	// it (namespace default, no credentials).
	URL, Kubeconfig string

	namespace string
	t         testing.TB

	mu      sync.Mutex // guards the fields below
	rv      int
	items   map[string]*discoveryv1.EndpointSlice
	history []sliceEvent // every change, for a watch from a resourceVersion
	watches map[*sliceWatch]bool
	broken  bool
}

type sliceEvent struct {
	rv  int
	typ string // ADDED, MODIFIED, DELETED
	obj *discoveryv1.EndpointSlice
}

type sliceWatch struct {
	sel    labels.Selector
	events chan sliceEvent
	ended  chan struct{}
}

// StartSlices starts a fake API server for namespace's EndpointSlices.
func StartSlices(t testing.TB, namespace string) *Slices {
	s := &Slices{namespace: namespace, t: t, items: map[string]*discoveryv1.EndpointSlice{}, watches: map[*sliceWatch]bool{}}
	srv := httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(func() {
		s.Break() // ends the watches, which httptest.Server.Close waits for
		srv.Close()
	})
	s.URL = srv.URL
	s.Kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	config := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
  - name: fake
    cluster: {server: %q}
users:
  - name: fake
    user: {}
contexts:
  - name: fake
    context: {cluster: fake, user: fake, namespace: default}
current-context: fake
`, s.URL)
	if err := os.WriteFile(s.Kubeconfig, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	return s
}

// Put creates or replaces the EndpointSlice es (by name), telling every
// watch.
func (s *Slices) Put(es *discoveryv1.EndpointSlice) {
	es = es.DeepCopy()
	es.Namespace = s.namespace
	s.mu.Lock()
	defer s.mu.Unlock()
	typ := "ADDED"
	if s.items[es.Name] != nil {
		typ = "MODIFIED"
	}
	s.items[es.Name] = es
	s.change(typ, es)
}

// Delete removes the EndpointSlice name, telling every watch.
func (s *Slices) Delete(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	es := s.items[name]
	if es == nil {
		s.t.Fatalf("kubetest: no EndpointSlice %q to delete", name)
	}
	delete(s.items, name)
	s.change("DELETED", es.DeepCopy())
}

// change records one change under mu and sends it to the watches that
// select it.
func (s *Slices) change(typ string, es *discoveryv1.EndpointSlice) {
	s.rv++
	es.ResourceVersion = strconv.Itoa(s.rv)
	ev := sliceEvent{rv: s.rv, typ: typ, obj: es.DeepCopy()}
	s.history = append(s.history, ev)
	for w := range s.watches {
		if w.sel.Matches(labels.Set(es.Labels)) {
			select {
			case w.events <- ev:
			case <-w.ended:
			}
		}
	}
}

// Break makes the server fail as one that went away: every watch ends
// and every request gets 503 until Mend.
func (s *Slices) Break() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.broken = true
	for w := range s.watches {
		close(w.events)
		delete(s.watches, w)
	}
}

// Mend makes a broken server answer again.
func (s *Slices) Mend() {
	s.mu.Lock()
	s.broken = false
	s.mu.Unlock()
}

var sliceType = metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"}

func (s *Slices) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/apis/discovery.k8s.io/v1/namespaces/"+s.namespace+"/endpointslices" || r.Method != http.MethodGet {
		status(w, http.StatusNotFound, "NotFound", "the fake API server serves only the EndpointSlices of namespace "+s.namespace)
		return
	}
	q := r.URL.Query()
	sel, err := labels.Parse(q.Get("labelSelector"))
	if err != nil {
		status(w, http.StatusBadRequest, "BadRequest", err.Error())
		return
	}
	s.mu.Lock()
	if s.broken {
		s.mu.Unlock()
		status(w, http.StatusServiceUnavailable, "ServiceUnavailable", "the fake API server is down")
		return
	}
	var matching []*discoveryv1.EndpointSlice
	for _, es := range s.items {
		if sel.Matches(labels.Set(es.Labels)) {
			matching = append(matching, es.DeepCopy())
		}
	}
	slices.SortFunc(matching, func(a, b *discoveryv1.EndpointSlice) int {
		return strings.Compare(a.Name, b.Name)
	})
	rv := s.rv
	if q.Get("watch") != "true" {
		s.mu.Unlock()
		list := discoveryv1.EndpointSliceList{TypeMeta: metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSliceList"},
			ListMeta: metav1.ListMeta{ResourceVersion: strconv.Itoa(rv)}}
		for _, es := range matching {
			list.Items = append(list.Items, *es)
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(list)
		return
	}
	// A watch: the initial events and their bookmark when asked (the
	// watch-list), else the changes after the resourceVersion asked for.
	var first []sliceEvent
	initial := q.Get("sendInitialEvents") == "true"
	if initial {
		for _, es := range matching {
			first = append(first, sliceEvent{typ: "ADDED", obj: es})
		}
		bookmark := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{ResourceVersion: strconv.Itoa(rv),
			Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}
		first = append(first, sliceEvent{typ: "BOOKMARK", obj: bookmark})
	} else if from, err := strconv.Atoi(q.Get("resourceVersion")); err == nil && from > 0 {
		for _, ev := range s.history {
			if ev.rv > from && sel.Matches(labels.Set(ev.obj.Labels)) {
				first = append(first, ev)
			}
		}
	}
	sw := &sliceWatch{sel: sel, events: make(chan sliceEvent, 64), ended: make(chan struct{})}
	s.watches[sw] = true
	s.mu.Unlock()
	defer func() {
		close(sw.ended)
		s.mu.Lock()
		delete(s.watches, sw)
		s.mu.Unlock()
	}()

	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	flush := http.NewResponseController(w).Flush
	enc := json.NewEncoder(w)
	send := func(ev sliceEvent) bool {
		obj := ev.obj.DeepCopy()
		obj.TypeMeta = sliceType
		if enc.Encode(map[string]any{"type": ev.typ, "object": obj}) != nil {
			return false
		}
		return flush() == nil
	}
	for _, ev := range first {
		if !send(ev) {
			return
		}
	}
	_ = flush()
	for {
		select {
		case ev, ok := <-sw.events:
			if !ok || !send(ev) {
				return
			}
		case <-r.Context().Done():
			return
		}
	}
}

// status writes a Kubernetes Status error, as the API server does.
func status(w http.ResponseWriter, code int, reason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"},
		Status: metav1.StatusFailure, Message: msg, Reason: metav1.StatusReason(reason), Code: int32(code)})
}
