package pools_test

import (
	"context"
	"strings"
	"testing"
	"time"

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

// TestExplainShowsWhatSelectWeighed: explain's scores are those the
// balancer's own choice weighed. p2c shows the pair it drew, the cheaper
// of which it picked, and no score for the candidates it did not draw;
// round robin weighs nothing and says so for every candidate.
func TestExplainShowsWhatSelectWeighed(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		p := newPool(t, pools.Options{Balance: "p2c", Replicas: specs(4), Rand: seeded(seed),
			Scrape: pools.ScrapeOptions{Enabled: true}, Staleness: time.Hour})
		now := time.Now()
		for i, r := range p.Replicas() {
			r.SetLoad(&pools.Load{At: now, HasQueue: true, Waiting: float64(3 - i)})
		}
		picked, scores := p.Explain(&pools.Request{})
		var pair []pools.ReplicaScore
		for _, s := range scores {
			switch {
			case s.Score != nil:
				pair = append(pair, s)
			case s.Picked || !strings.HasPrefix(s.Why, "not sampled"):
				t.Errorf("seed %d: %+v: a candidate without a score must be one p2c did not draw", seed, s)
			}
		}
		if len(pair) != 2 {
			t.Fatalf("seed %d: %d candidates scored, want the sampled pair: %+v", seed, len(pair), scores)
		}
		win, lose := pair[0], pair[1]
		if lose.Picked {
			win, lose = lose, win
		}
		if !win.Picked || lose.Picked || win.Replica != picked.Name || *win.Score > *lose.Score {
			t.Errorf("seed %d: pair %+v, picked %s: want the cheaper of the pair picked", seed, pair, picked.Name)
		}
	}

	rr := newPool(t, pools.Options{Balance: "round_robin", Replicas: specs(3), Rand: seeded(1)})
	picked, scores := rr.Explain(&pools.Request{})
	for _, s := range scores {
		if s.Score != nil || !strings.HasPrefix(s.Why, "round robin") || s.Picked != (s.Replica == picked.Name) {
			t.Errorf("round robin candidate %+v (picked %s)", s, picked.Name)
		}
	}
}
