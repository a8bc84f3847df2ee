package pools_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/polltest"
	"github.com/switchyard/switchyard/pools"
	"github.com/switchyard/switchyard/vllmsim"
)

// TestNewReplicaWaitsForAProbe: a replica added by a reload (or present
// at start) takes traffic only after its first passing probe. Before the
// fix an endpoint started healthy, so a vLLM still loading (/health 503)
// took 1/N of the traffic until unhealthy_after probes had failed.
func TestNewReplicaWaitsForAProbe(t *testing.T) {
	good := startSim(t, vllmsim.Profile{Model: "m"})
	loading := startSim(t, vllmsim.Profile{Model: "m"})
	loading.Sim.SetFaults(vllmsim.Faults{Unhealthy: true})
	reg := pools.NewEndpoints(pools.EndpointsOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	t.Cleanup(reg.Close)
	o := withDefaults(pools.Options{Name: "p", Balance: "round_robin",
		Health:   pools.HealthOptions{Interval: 10 * time.Millisecond, Timeout: time.Second, UnhealthyAfter: 3, HealthyAfter: 2},
		Replicas: []pools.ReplicaSpec{{Name: "good", URL: good.URL}}})
	if _, err := reg.Apply([]pools.Options{o}); err != nil {
		t.Fatal(err)
	}
	reg.Start(ctx) // returns once the first probes have answered
	o.Replicas = append(o.Replicas, pools.ReplicaSpec{Name: "loading", URL: loading.URL})
	ps, err := reg.Apply([]pools.Options{o})
	if err != nil {
		t.Fatal(err)
	}
	p := ps[0]
	var fresh *pools.Replica
	for _, r := range p.Replicas() {
		if r.Name == "loading" {
			fresh = r
		}
	}
	if !fresh.Probing() || fresh.Healthy() {
		t.Fatalf("a new replica: probing %t healthy %t, want probing and not in rotation", fresh.Probing(), fresh.Healthy())
	}
	for range 20 {
		r, err := p.Acquire(ctx, &pools.Request{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if r.Name != "good" {
			t.Fatalf("a replica that has not passed a probe took a request")
		}
		p.Release(r)
	}
	loading.Sim.SetFaults(vllmsim.Faults{})
	polltest.Eventually(t, waitFor, "the loaded replica to be admitted", func() bool { return !fresh.Probing() && fresh.Healthy() })

	// With probes off a replica takes traffic at once, as before.
	o.Health.Disabled = true
	o.Replicas = append(o.Replicas, pools.ReplicaSpec{Name: "unprobed", URL: &url.URL{Scheme: "http", Host: "127.0.0.1:9"}})
	ps, err = reg.Apply([]pools.Options{o})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range ps[0].Replicas() {
		if r.Name == "unprobed" && (!r.Healthy() || r.Probing()) {
			t.Errorf("with probes off: healthy %t probing %t", r.Healthy(), r.Probing())
		}
	}
}

// TestMisconfiguredBackoff: a replica found misconfigured on requests (401
// on inference while /v1/models answers) is held out with the ejections'
// growing backoff; before the fix one passing probe brought it back, and
// it flapped in and out every interval.
func TestMisconfiguredBackoff(t *testing.T) {
	s := startSim(t, vllmsim.Profile{Model: "m"})
	clk := newClock()
	p := newPool(t, pools.Options{Model: "m", Balance: "round_robin", Replicas: simSpecs(s, s),
		Health:  pools.HealthOptions{UnhealthyAfter: 1, HealthyAfter: 1},
		Outlier: pools.OutlierOptions{BaseEjection: 10 * time.Second, MaxEjection: time.Minute, MaxEjectionPercent: 100}},
		pools.EndpointsOptions{Now: clk.Now})
	r := p.Replicas()[0]
	for i, hold := range []time.Duration{10 * time.Second, 20 * time.Second} {
		p.Observe(r, pools.Misconfigured, "status 401")
		if !r.Misconfigured() {
			t.Fatalf("mark %d: not misconfigured", i)
		}
		p.ProbeOnce(context.Background())
		if !r.Misconfigured() {
			t.Fatalf("mark %d: a passing probe cleared the mark at once", i)
		}
		clk.Advance(hold - time.Second)
		p.ProbeOnce(context.Background())
		if !r.Misconfigured() {
			t.Fatalf("mark %d: cleared before its %s hold", i, hold)
		}
		clk.Advance(2 * time.Second)
		p.ProbeOnce(context.Background())
		if r.Misconfigured() {
			t.Fatalf("mark %d: still misconfigured after its %s hold", i, hold)
		}
	}
	got, err := p.Acquire(context.Background(), &pools.Request{}, nil)
	if errors.Is(err, pools.ErrNoReplica) {
		t.Fatal("no replica after the holds")
	}
	p.Release(got)
}

// TestMissingSignalsNamed: a server that exports running but not waiting
// has no known queue (before the fix it showed a queue of 0), and the
// missing signal is named.
func TestMissingSignalsNamed(t *testing.T) {
	l, err := pools.ParseLoad(strings.NewReader("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} 3\n"))
	if err != nil {
		t.Fatal(err)
	}
	if l.HasQueue || !l.HasRunning || l.Running != 3 {
		t.Errorf("load %+v", l)
	}
	if got := strings.Join(l.Missing(), ","); got != "vllm:num_requests_waiting,vllm:kv_cache_usage_perc" {
		t.Errorf("missing %q", got)
	}
}

// TestProbesTurnedOffAdmitAProbingReplica: a replica still waiting for its
// first passing probe takes traffic once a reload turns probes off (no
// probe would ever admit it; review finding).
func TestProbesTurnedOffAdmitAProbingReplica(t *testing.T) {
	loading := startSim(t, vllmsim.Profile{Model: "m"})
	loading.Sim.SetFaults(vllmsim.Faults{Unhealthy: true})
	reg := pools.NewEndpoints(pools.EndpointsOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	t.Cleanup(reg.Close)
	o := withDefaults(pools.Options{Name: "p", Balance: "round_robin",
		Health:   pools.HealthOptions{Interval: 10 * time.Millisecond, Timeout: time.Second},
		Replicas: []pools.ReplicaSpec{{Name: "r", URL: loading.URL}}})
	if _, err := reg.Apply([]pools.Options{o}); err != nil {
		t.Fatal(err)
	}
	reg.Start(ctx)
	o.Health.Disabled = true
	ps, err := reg.Apply([]pools.Options{o})
	if err != nil {
		t.Fatal(err)
	}
	if r := ps[0].Replicas()[0]; r.Probing() || !r.Healthy() {
		t.Errorf("after probes were turned off: probing %t healthy %t", r.Probing(), r.Healthy())
	}
}
