package discovery_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/switchyard/switchyard/discovery"
	"github.com/switchyard/switchyard/discovery/dnstest"
)

// TestDNSLookup resolves every record shape a discovery meets against a
// real DNS server on loopback.
func TestDNSLookup(t *testing.T) {
	srv := dnstest.New(t)
	srv.Zone(
		"vllm.test. 30 IN A 127.0.0.3",
		"vllm.test. 20 IN A 127.0.0.2",
		"v6.test. 30 IN AAAA ::1",
		"both.test. 30 IN A 127.0.0.2",
		"both.test. 7 IN AAAA ::1",
		"alias.test. 4 IN CNAME vllm.test.",
		"txt.test. 30 IN TXT \"no address\"",
		"_http._tcp.vllm.test. 9 IN SRV 0 50 8001 a.vllm.test.",
		"_http._tcp.vllm.test. 9 IN SRV 0 50 8002 b.vllm.test.",
		"_http._tcp.vllm.test. 9 IN SRV 0 50 8003 gone.vllm.test.",
		"a.vllm.test. 60 IN A 127.0.0.2",
		"b.vllm.test. 3 IN A 127.0.0.3",
		"_http._tcp.empty.test. 9 IN SRV 0 50 8003 gone.vllm.test.",
	)
	l, err := discovery.NewDNSLookup(srv.Addr, "")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, kind, host string
		omitExtra        bool
		truncate         int
		want             []string
		ttl              time.Duration
		err              error // nil: success; ErrNoRecords; errAny for another error
	}{
		{name: "a records", kind: "dns", host: "vllm.test", want: []string{"127.0.0.3:8000", "127.0.0.2:8000"}, ttl: 20 * time.Second},
		{name: "aaaa record", kind: "dns", host: "v6.test.", want: []string{"[::1]:8000"}, ttl: 30 * time.Second},
		{name: "a and aaaa", kind: "dns", host: "both.test", want: []string{"127.0.0.2:8000", "[::1]:8000"}, ttl: 7 * time.Second},
		{name: "cname", kind: "dns", host: "alias.test", want: []string{"127.0.0.3:8000", "127.0.0.2:8000"}, ttl: 4 * time.Second},
		{name: "truncated over udp", kind: "dns", host: "vllm.test", truncate: 1, want: []string{"127.0.0.3:8000", "127.0.0.2:8000"}, ttl: 20 * time.Second},
		{name: "nxdomain", kind: "dns", host: "missing.test", err: discovery.ErrNoRecords},
		{name: "no address records", kind: "dns", host: "txt.test", err: discovery.ErrNoRecords},
		{name: "srv with additional", kind: "srv", host: "_http._tcp.vllm.test", want: []string{"127.0.0.2:8001", "127.0.0.3:8002"}, ttl: 3 * time.Second},
		{name: "srv targets resolved", kind: "srv", host: "_http._tcp.vllm.test", omitExtra: true, want: []string{"127.0.0.2:8001", "127.0.0.3:8002"}, ttl: 3 * time.Second},
		{name: "srv targets without addresses", kind: "srv", host: "_http._tcp.empty.test", err: discovery.ErrNoRecords},
		{name: "srv nxdomain", kind: "srv", host: "_http._tcp.missing.test", err: discovery.ErrNoRecords},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv.OmitAdditional(tc.omitExtra)
			srv.TruncateUDP(tc.truncate)
			defer srv.OmitAdditional(false)
			defer srv.TruncateUDP(0)
			got, ttl, err := l.Lookup(context.Background(), tc.kind, tc.host, 8000)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("Lookup = %v, %v; want %v", got, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("addresses (-want +got):\n%s", diff)
			}
			if ttl != tc.ttl {
				t.Errorf("ttl = %s, want %s", ttl, tc.ttl)
			}
		})
	}
}

// answerSlack is the lookup timeout of the tests whose server answers: a
// loopback answer takes well under a millisecond, and this is the
// scheduling delay a loaded machine may add before the answer is read
// (the silent steps wait it out in full).
const answerSlack = 2 * time.Second

// TestDNSLookupFailures: a server that answers SERVFAIL or not at all is
// an error, never "no records", so the pool keeps its set for the right
// reason; a second server is asked when the first fails.
func TestDNSLookupFailures(t *testing.T) {
	srv := dnstest.New(t)
	srv.Zone("vllm.test. 30 IN A 127.0.0.2")
	l, _ := discovery.NewDNSLookup(srv.Addr, "")
	for _, m := range []dnstest.Mode{dnstest.ServFail, dnstest.Silent} {
		srv.SetMode(m)
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		_, _, err := l.Lookup(ctx, "dns", "vllm.test", 8000)
		cancel()
		if err == nil || errors.Is(err, discovery.ErrNoRecords) {
			t.Errorf("mode %d: Lookup error = %v, want a failure that is not ErrNoRecords", m, err)
		}
	}
	srv.SetMode(dnstest.Answer)

	// resolv.conf: a relative name is expanded with the search list, and
	// a second name server answers when the first does not.
	down := dnstest.New(t)
	down.SetMode(dnstest.ServFail)
	conf := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(conf, []byte("nameserver 127.0.0.1\nsearch nothere.test test\noptions ndots:5\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sl, err := discovery.NewDNSLookupVia(conf, down.Addr, srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := sl.Lookup(context.Background(), "dns", "vllm", 8000)
	if err != nil || len(got) != 1 || got[0] != "127.0.0.2:8000" {
		t.Errorf("search list: Lookup = %v, %v; want [127.0.0.2:8000]", got, err)
	}
	if down.Queries() == 0 {
		t.Error("the first name server was not asked")
	}
	if _, err := discovery.NewDNSLookup("", filepath.Join(t.TempDir(), "absent")); err == nil {
		t.Error("NewDNSLookup with no resolv.conf: no error")
	}
	empty := filepath.Join(t.TempDir(), "resolv.conf")
	_ = os.WriteFile(empty, []byte("search test\n"), 0o600)
	if _, err := discovery.NewDNSLookup("", empty); err == nil || !strings.Contains(err.Error(), "no nameserver") {
		t.Errorf("NewDNSLookup with no nameserver: %v", err)
	}
}

// TestStdLookup: the standard library's resolver (used where there is no
// resolv.conf), dialling the test server, finds the same addresses, knows
// no TTL, and tells a missing name from a failure.
func TestStdLookup(t *testing.T) {
	srv := dnstest.New(t)
	srv.Zone(
		"vllm.test. 30 IN A 127.0.0.2",
		"_http._tcp.vllm.test. 9 IN SRV 0 50 8001 a.vllm.test.",
		"a.vllm.test. 60 IN A 127.0.0.3",
	)
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, srv.Addr)
	}}
	l := discovery.StdLookup{Resolver: r}
	ctx := context.Background()
	if got, ttl, err := l.Lookup(ctx, "dns", "vllm.test.", 8000); err != nil || len(got) != 1 || got[0] != "127.0.0.2:8000" || ttl >= 0 {
		t.Errorf("dns: %v %s %v", got, ttl, err)
	}
	if got, _, err := l.Lookup(ctx, "srv", "_http._tcp.vllm.test.", 0); err != nil || len(got) != 1 || got[0] != "127.0.0.3:8001" {
		t.Errorf("srv: %v %v", got, err)
	}
	if _, _, err := l.Lookup(ctx, "dns", "missing.test.", 8000); !errors.Is(err, discovery.ErrNoRecords) {
		t.Errorf("nxdomain: %v, want ErrNoRecords", err)
	}
	srv.SetMode(dnstest.ServFail)
	if _, _, err := l.Lookup(ctx, "dns", "vllm.test.", 8000); err == nil || errors.Is(err, discovery.ErrNoRecords) {
		t.Errorf("servfail: %v, want a failure", err)
	}
}

// fakeAfter is an injected timer: each wait Run asks for is sent on waits
// and ends when the test fires it.
type fakeAfter struct{ waits chan fakeWait }

type fakeWait struct {
	d    time.Duration
	fire chan time.Time
}

func newFakeAfter() *fakeAfter { return &fakeAfter{waits: make(chan fakeWait, 16)} }

func (f *fakeAfter) After(d time.Duration) <-chan time.Time {
	c := make(chan time.Time, 1)
	f.waits <- fakeWait{d, c}
	return c
}

// next returns the wait Run asked for (generous bound: liveness only).
func (f *fakeAfter) next(t *testing.T) fakeWait {
	t.Helper()
	select {
	case w := <-f.waits:
		return w
	case <-time.After(20 * time.Second):
		t.Fatal("the discovery loop asked for no timer")
		return fakeWait{}
	}
}

// TestDiscoveryKeepsLastGoodSet: an answer changes the set; a failure or
// an empty answer keeps it (never a pool of zero); each change of result is
// told once and counted.
func TestDiscoveryKeepsLastGoodSet(t *testing.T) {
	srv := dnstest.New(t)
	l, _ := discovery.NewDNSLookup(srv.Addr, "")
	reg := prometheus.NewRegistry()
	m := discovery.NewMetrics(reg)
	var mu sync.Mutex
	var events []string
	d := discovery.New(discovery.Options{Pool: "qwen", Kind: "dns", Name: "vllm.test", Port: 8000,
		Interval: time.Minute, Timeout: answerSlack, Lookup: l, Metrics: m,
		OnEvent: func(ev discovery.Event) {
			mu.Lock()
			events = append(events, ev.Result+" +"+strings.Join(ev.Added, ",")+" -"+strings.Join(ev.Removed, ",")+" ="+strings.Join(ev.Addrs, ","))
			mu.Unlock()
		}})
	ctx := context.Background()
	steps := []struct {
		name    string
		zone    []string
		mode    dnstest.Mode
		changed bool
		want    []string
		result  string
	}{
		{"first set", []string{"vllm.test. 5 IN A 127.0.0.2", "vllm.test. 5 IN A 127.0.0.3"}, dnstest.Answer, true, []string{"127.0.0.2:8000", "127.0.0.3:8000"}, discovery.ResultOK},
		{"same set", []string{"vllm.test. 5 IN A 127.0.0.3", "vllm.test. 5 IN A 127.0.0.2"}, dnstest.Answer, false, []string{"127.0.0.2:8000", "127.0.0.3:8000"}, discovery.ResultOK},
		{"resolver silent", nil, dnstest.Silent, false, []string{"127.0.0.2:8000", "127.0.0.3:8000"}, discovery.ResultError},
		{"resolver still silent", nil, dnstest.Silent, false, []string{"127.0.0.2:8000", "127.0.0.3:8000"}, discovery.ResultError},
		{"servfail", nil, dnstest.ServFail, false, []string{"127.0.0.2:8000", "127.0.0.3:8000"}, discovery.ResultError},
		{"name gone", []string{}, dnstest.Answer, false, []string{"127.0.0.2:8000", "127.0.0.3:8000"}, discovery.ResultEmpty},
		{"one changed", []string{"vllm.test. 5 IN A 127.0.0.2", "vllm.test. 5 IN A 127.0.0.4"}, dnstest.Answer, true, []string{"127.0.0.2:8000", "127.0.0.4:8000"}, discovery.ResultOK},
	}
	for _, st := range steps {
		if st.zone != nil {
			srv.Zone(st.zone...)
		}
		srv.SetMode(st.mode)
		if got := d.Resolve(ctx); got != st.changed {
			t.Errorf("%s: Resolve changed = %v, want %v", st.name, got, st.changed)
		}
		s := d.Status()
		if diff := cmp.Diff(st.want, s.Addrs); diff != "" {
			t.Errorf("%s: set (-want +got):\n%s", st.name, diff)
		}
		if s.Result != st.result {
			t.Errorf("%s: result %s, want %s (%s)", st.name, s.Result, st.result, s.Err)
		}
		var names []string
		for _, r := range d.Replicas() {
			names = append(names, r.Name+"="+r.URL.String())
		}
		if len(names) != len(st.want) || names[0] != st.want[0]+"=http://"+st.want[0] {
			t.Errorf("%s: replicas %v", st.name, names)
		}
	}
	// Failures after a failure (silent, then SERVFAIL) are not told again.
	want := []string{
		"ok +127.0.0.2:8000,127.0.0.3:8000 - =127.0.0.2:8000,127.0.0.3:8000",
		"error + - =127.0.0.2:8000,127.0.0.3:8000",
		"empty + - =127.0.0.2:8000,127.0.0.3:8000",
		"ok +127.0.0.4:8000 -127.0.0.3:8000 =127.0.0.2:8000,127.0.0.4:8000",
	}
	mu.Lock()
	if diff := cmp.Diff(want, events); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	mu.Unlock()
	for result, n := range map[string]float64{"ok": 3, "error": 3, "empty": 1} {
		if got := testutil.ToFloat64(mVec(t, reg, "switchyard_discovery_resolutions_total", "qwen", result)); got != n {
			t.Errorf("resolutions{result=%s} = %g, want %g", result, got, n)
		}
	}
	if got := testutil.ToFloat64(mVec(t, reg, "switchyard_discovery_replicas", "qwen", "")); got != 2 {
		t.Errorf("replicas gauge = %g, want 2", got)
	}
	m.Forget("qwen")
	if n, _ := testutil.GatherAndCount(reg); n != 0 {
		t.Errorf("after Forget: %d series left", n)
	}
}

// mVec finds one series in reg as a collector for testutil.
func mVec(t *testing.T, reg *prometheus.Registry, name, pool, result string) prometheus.Collector {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["pool"] == pool && (result == "" || labels["result"] == result) {
				v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
				g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "x"})
				g.Set(v)
				return g
			}
		}
	}
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: "x"})
}

// TestDiscoveryRunHonoursTTL: the loop waits the interval, or the TTL
// when it ends sooner (floored at MinRefresh); after failures it retries
// at MinRefresh doubling up to the interval; onChange follows each change.
// The clock is injected: the test reads each wait the loop asks for.
func TestDiscoveryRunHonoursTTL(t *testing.T) {
	srv := dnstest.New(t)
	l, _ := discovery.NewDNSLookup(srv.Addr, "")
	fa := newFakeAfter()
	d := discovery.New(discovery.Options{Pool: "qwen", Kind: "dns", Name: "vllm.test", Port: 8000,
		Interval: time.Minute, MinRefresh: time.Second, Timeout: answerSlack, Lookup: l, After: fa.After})
	srv.Zone("vllm.test. 3 IN A 127.0.0.2")
	if !d.Resolve(context.Background()) {
		t.Fatal("first Resolve: no change")
	}
	changes := make(chan []string, 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.Run(ctx, func() { changes <- d.Status().Addrs })
	}()
	defer func() { cancel(); <-done }()

	steps := []struct {
		name string
		zone []string
		mode dnstest.Mode
		// wait is what the loop asks for before the resolution the step
		// sets up.
		wait   time.Duration
		change []string
	}{
		{"ttl 3s under a 1m interval", []string{"vllm.test. 120 IN A 127.0.0.2", "vllm.test. 120 IN A 127.0.0.3"}, dnstest.Answer, 3 * time.Second, []string{"127.0.0.2:8000", "127.0.0.3:8000"}},
		{"ttl over the interval", []string{"vllm.test. 0 IN A 127.0.0.3"}, dnstest.Answer, time.Minute, []string{"127.0.0.3:8000"}},
		{"ttl 0 floored", nil, dnstest.ServFail, time.Second, nil},
		{"first retry", nil, dnstest.ServFail, time.Second, nil},
		{"second retry doubles", nil, dnstest.ServFail, 2 * time.Second, nil},
		{"third retry", []string{"vllm.test. 30 IN A 127.0.0.4"}, dnstest.Answer, 4 * time.Second, []string{"127.0.0.4:8000"}},
		{"after recovery: the ttl", nil, dnstest.Answer, 30 * time.Second, nil},
	}
	for _, st := range steps {
		w := fa.next(t)
		if w.d != st.wait {
			t.Fatalf("%s: loop waits %s, want %s", st.name, w.d, st.wait)
		}
		if st.zone != nil {
			srv.Zone(st.zone...)
		}
		srv.SetMode(st.mode)
		w.fire <- time.Now()
		if st.change != nil {
			select {
			case got := <-changes:
				if diff := cmp.Diff(st.change, got); diff != "" {
					t.Fatalf("%s: change (-want +got):\n%s", st.name, diff)
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("%s: no change reported", st.name)
			}
		}
	}
	select {
	case got := <-changes:
		t.Errorf("unexpected change %v", got)
	default:
	}
}

// manyAddrs answers every lookup with n addresses.
type manyAddrs int

func (n manyAddrs) Lookup(context.Context, string, string, int) ([]string, time.Duration, error) {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("10.1.%d.%d:8000", i/250, i%250+1)
	}
	return out, time.Minute, nil
}

// TestDiscoveryBoundsTheAnswer: an answer listing thousands of addresses
// (untrusted input) gives the pool at most MaxDiscovered replicas, and
// says so.
func TestDiscoveryBoundsTheAnswer(t *testing.T) {
	d := discovery.New(discovery.Options{Pool: "p", Kind: "dns", Name: "many.test", Port: 8000,
		Interval: time.Minute, Timeout: time.Second, Lookup: manyAddrs(5000)})
	d.Resolve(context.Background())
	st := d.Status()
	if len(st.Addrs) != discovery.MaxDiscovered || !strings.Contains(st.Err, "more than 256") {
		t.Errorf("%d addresses, err %q", len(st.Addrs), st.Err)
	}
}
