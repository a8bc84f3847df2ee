package pools_test

import (
	"context"
	"strings"
	"testing"

	"github.com/switchyard/switchyard/pools"
)

// TestExplainStages: Explain says for each replica whether the filter let
// it through (and why not), what the balancer weighed, and which one it
// picked: the one Pick returns, with the best score.
func TestExplainStages(t *testing.T) {
	p := newPool(t, pools.Options{Balance: "least_outstanding", MaxInflight: 1, Replicas: specs(3), Rand: seeded(1)})
	held, err := p.Acquire(context.Background(), &pools.Request{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release(held)
	picked, scores := p.Explain(&pools.Request{})
	if picked == nil || picked.Endpoint == held.Endpoint || len(scores) != 3 {
		t.Fatalf("picked %v (held %s), %d scores", picked, held.Name, len(scores))
	}
	n := 0
	for _, s := range scores {
		switch {
		case s.Replica == held.Name:
			if !strings.HasPrefix(s.Filtered, "full") || s.Score != nil || s.Picked {
				t.Errorf("the full replica: %+v; want filtered as full, no score", s)
			}
		case s.Filtered != "" || s.Score == nil || *s.Score != 0 || s.Why == "":
			t.Errorf("candidate %+v; want a score of 0 in flight and what it means", s)
		case s.Picked:
			n++
			if s.Replica != picked.Name {
				t.Errorf("%s marked picked, Explain returned %s", s.Replica, picked.Name)
			}
		}
	}
	if n != 1 {
		t.Errorf("%d replicas marked picked, want 1: %+v", n, scores)
	}

	a := newPool(t, pools.Options{Balance: "affinity", Replicas: specs(4), Rand: seeded(1)})
	req := &pools.Request{Key: "session-7"}
	picked, scores = a.Explain(req)
	if want := a.Pick(req); picked == nil || picked.Endpoint != want.Endpoint {
		t.Fatalf("Explain picked %v, Pick %v", picked, want)
	}
	ranks := map[float64]bool{}
	for _, s := range scores {
		ranks[*s.Score] = true
		if s.Picked != (*s.Score == 1) {
			t.Errorf("%+v: the key's first-ranked replica, and only it, should be picked", s)
		}
	}
	if len(ranks) != 4 {
		t.Errorf("ranks %v; want 1 to 4, one each", ranks)
	}
}
