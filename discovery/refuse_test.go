package discovery_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard/switchyard/discovery"
)

// TestDiscoveryRefusesAddresses: addresses Refuse refuses (the gateway's
// own listener) are dropped from an answer; an answer of nothing else is
// an empty one, which keeps the last good set.
func TestDiscoveryRefusesAddresses(t *testing.T) {
	self := "10.1.0.2:8000"
	var refused []string
	d := discovery.New(discovery.Options{Pool: "p", Kind: "dns", Name: "many.test", Port: 8000,
		Interval: time.Minute, Timeout: time.Second, Lookup: manyAddrs(3),
		Refuse: func(a string) bool {
			if a == self {
				refused = append(refused, a)
				return true
			}
			return false
		}})
	d.Resolve(context.Background())
	if diff := cmp.Diff([]string{"10.1.0.1:8000", "10.1.0.3:8000"}, d.Status().Addrs); diff != "" {
		t.Errorf("addresses used (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{self}, refused); diff != "" {
		t.Errorf("refused (-want +got):\n%s", diff)
	}

	only := discovery.New(discovery.Options{Pool: "p", Kind: "dns", Name: "many.test", Port: 8000,
		Interval: time.Minute, Timeout: time.Second, Lookup: manyAddrs(1),
		Refuse: func(string) bool { return true }})
	only.Resolve(context.Background())
	if st := only.Status(); st.Result != discovery.ResultEmpty || len(st.Addrs) != 0 {
		t.Errorf("an answer naming only the gateway: result %s, %d addresses; want empty", st.Result, len(st.Addrs))
	}
}
