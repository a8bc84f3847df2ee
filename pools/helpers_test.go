package pools_test

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/switchyard/switchyard/pools"
	"github.com/switchyard/switchyard/vllmsim"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// waitFor bounds every poll; far above what a passing run needs, it only
// decides how long a broken run takes to fail.
const waitFor = 5 * time.Second

// sim is a vLLM simulator on a real loopback socket.
type sim struct {
	Sim *vllmsim.Server
	Srv *httptest.Server
	URL *url.URL
}

func startSim(t testing.TB, p vllmsim.Profile) *sim {
	t.Helper()
	s := vllmsim.New(p)
	return serve(t, s, s)
}

// serve runs h on loopback; s (may be nil) is the simulator behind it.
func serve(t testing.TB, s *vllmsim.Server, h http.Handler) *sim {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	return &sim{Sim: s, Srv: srv, URL: u}
}

// clock is an injected clock that moves only when told.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *clock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// seeded returns a deterministic, goroutine-safe Rand for pools.Options.
func seeded(seed uint64) func() uint64 {
	var mu sync.Mutex
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	return func() uint64 {
		mu.Lock()
		defer mu.Unlock()
		return r.Uint64()
	}
}

// specs names replicas name-0..name-(n-1) at unroutable addresses (for
// tests that never send a request).
func specs(n int) []pools.ReplicaSpec {
	out := make([]pools.ReplicaSpec, n)
	for i := range out {
		out[i] = pools.ReplicaSpec{Name: "r" + strconv.Itoa(i), URL: &url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(1+i)}}
	}
	return out
}

func simSpecs(sims ...*sim) []pools.ReplicaSpec {
	out := make([]pools.ReplicaSpec, len(sims))
	for i, s := range sims {
		out[i] = pools.ReplicaSpec{Name: "r" + strconv.Itoa(i), URL: s.URL}
	}
	return out
}

// newPool builds a pool on a registry of its own, filling in the config
// loader's defaults for whatever o leaves zero (pools applies none itself).
func newPool(t testing.TB, o pools.Options, ro ...pools.EndpointsOptions) *pools.Pool {
	t.Helper()
	var r pools.EndpointsOptions
	if len(ro) > 0 {
		r = ro[0]
	}
	p, err := pools.New(withDefaults(o), r)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// withDefaults fills what the config loader would.
func withDefaults(o pools.Options) pools.Options {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	defInt := func(n *int, v int) {
		if *n == 0 {
			*n = v
		}
	}
	if o.Name == "" {
		o.Name = "test"
	}
	if o.Model == "" {
		o.Model = "m"
	}
	def(&o.ConnectTimeout, 2*time.Second)
	def(&o.Staleness, 500*time.Millisecond)
	if o.LoadFactor == 0 {
		o.LoadFactor = 1.25
	}
	if o.Health.Path == "" {
		o.Health.Path = "/health"
	}
	def(&o.Health.Interval, 5*time.Second)
	def(&o.Health.Timeout, time.Second)
	defInt(&o.Health.UnhealthyAfter, 3)
	defInt(&o.Health.HealthyAfter, 2)
	if o.Scrape.Path == "" {
		o.Scrape.Path = "/metrics"
	}
	def(&o.Scrape.Interval, 50*time.Millisecond)
	def(&o.Scrape.Timeout, 200*time.Millisecond)
	defInt(&o.Outlier.Consecutive5xx, 5)
	defInt(&o.Outlier.ConsecutiveConnectFailures, 3)
	defInt(&o.Outlier.MaxEjectionPercent, 50)
	def(&o.Outlier.BaseEjection, 5*time.Second)
	def(&o.Outlier.MaxEjection, 2*time.Minute)
	return o
}

// complete sends one chat completion to r through the pool's client and
// reads the whole answer.
func complete(ctx context.Context, p *pools.Pool, r *pools.Replica, body string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.URL().String()+"/v1/chat/completions", bytes.NewReader([]byte(body)))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.Client().Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return &statusError{resp.StatusCode}
	}
	return nil
}

type statusError struct{ code int }

func (e *statusError) Error() string { return "status " + strconv.Itoa(e.code) }

// hold starts n requests straight at s (not through a pool) and returns a
// func that cancels them and waits for them to end.
func hold(t testing.TB, s *sim, n int, body string) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c := &http.Client{Transport: &http.Transport{}}
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.Srv.URL+"/v1/chat/completions", bytes.NewReader([]byte(body)))
			req.Header.Set("Content-Type", "application/json")
			if resp, err := c.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			wg.Wait()
			c.CloseIdleConnections()
		})
	}
	t.Cleanup(stop)
	return stop
}

func mustURL(t testing.TB, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// refusedURL is the address of a closed listener: connections are refused.
func refusedURL(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

// waitLoops waits for e's loops to end. The real-time bound only ends a
// test whose loops never stop (a broken one).
func waitLoops(t *testing.T, e *pools.Endpoint, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		e.WaitLoops()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s never ended", what)
	}
}
