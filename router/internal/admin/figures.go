package admin

import "time"

// figureWindow is the window of the status page's rates: the last minute,
// or the gateway's uptime while it is younger.
const figureWindow = time.Minute

// Figures are the status page's numbers, each with one definition
// (docs/observability.md), the same as the metric and the dashboard panel
// of the same name. Every rate covers WindowSeconds.
type Figures struct {
	WindowSeconds float64                `json:"window_seconds"`
	Pools         map[string]PoolFigures `json:"pools"`
	// Classifier is nil without a classifier.
	Classifier *ClassifierFigures `json:"classifier,omitempty"`
	// Outcomes are the turn outcomes judged in the window, by the pool
	// that answered the turn (switchyard_turn_outcomes_total).
	Outcomes map[string]OutcomeFigures `json:"turn_outcomes"`
}

// OutcomeFigures are a pool's judged turns over the window, and the share
// of them whose next turn went badly (every outcome but ok; null when none
// was judged).
type OutcomeFigures struct {
	Judged   int      `json:"judged"`
	Bad      int      `json:"bad"`
	BadShare *float64 `json:"bad_share"`
}

// PoolFigures are a pool's requests over the window: how many
// (switchyard_requests_total's increase for the pool), per second, their
// share of all pools' requests, their 5xx answers, and the requests by API.
type PoolFigures struct {
	Requests  int            `json:"requests"`
	PerSecond float64        `json:"requests_per_second"`
	Share     float64        `json:"share"`
	Errors    int            `json:"errors"`
	APIs      map[string]int `json:"apis"`
}

// ClassifierFigures are the classifier's rates over the window:
// classifications per second (switchyard_classifier_requests_total), calls
// to its pool per second and their mean latency (the classifications that
// missed the cache: switchyard_classifier_duration_seconds' count and sum),
// and the cache hit rate (Options.CacheHitRate: cache hits over the
// classifications that asked the cache). A rate with nothing to divide by
// is null.
type ClassifierFigures struct {
	// WindowSeconds is the time the rates are over: from the oldest
	// counter sample in the window to now.
	WindowSeconds  float64  `json:"window_seconds"`
	PerSecond      float64  `json:"classifications_per_second"`
	CallsPerSecond float64  `json:"calls_per_second"`
	CacheHitRate   *float64 `json:"cache_hit_rate"`
	LatencyMeanMS  *float64 `json:"latency_mean_ms"`
}

// window is figureWindow, or the uptime when shorter (at least a second).
func window(now, started time.Time) time.Duration {
	return max(time.Second, min(figureWindow, now.Sub(started)))
}

// figures computes the page's numbers at now; cur is the counters now
// (nil: none gathered), classified says a classifier is configured.
func (h *handler) figures(now time.Time, cur *ClassifierCounters, classified bool) Figures {
	w := window(now, h.Started)
	f := Figures{WindowSeconds: w.Seconds(), Pools: map[string]PoolFigures{}}
	// The per-second slots of the window: from the one holding its start
	// to the current one.
	split := h.Ring.Series(now, int(now.Unix()-now.Add(-w).Unix())+1)
	all := 0
	for pool, apis := range split.Pools {
		pf := PoolFigures{APIs: map[string]int{}}
		for api, vals := range apis {
			for _, v := range vals {
				pf.Requests += v
				pf.APIs[api] += v
			}
		}
		for _, v := range split.Errors[pool] {
			pf.Errors += v
		}
		pf.PerSecond = float64(pf.Requests) / w.Seconds()
		all += pf.Requests
		f.Pools[pool] = pf
	}
	for pool, pf := range f.Pools {
		if all > 0 {
			pf.Share = float64(pf.Requests) / float64(all)
		}
		f.Pools[pool] = pf
	}
	if cur != nil && classified {
		f.Classifier = classifierFigures(h.Ring.classifierSince(now.Add(-w)), *cur, now, h.CacheHitRate)
	}
	if cur != nil {
		f.Outcomes = outcomeFigures(h.Ring.classifierSince(now.Add(-w)), *cur)
	}
	return f
}

// outcomeFigures are the turn outcomes between the counters old (nil:
// counted from zero) and cur, by pool.
func outcomeFigures(old *ClassifierCounters, cur ClassifierCounters) map[string]OutcomeFigures {
	out := map[string]OutcomeFigures{}
	for pool, byOutcome := range cur.Outcomes {
		var of OutcomeFigures
		for outcome, n := range byOutcome {
			if old != nil {
				n -= old.Outcomes[pool][outcome]
			}
			of.Judged += int(n)
			if outcome != "ok" {
				of.Bad += int(n)
			}
		}
		if of.Judged > 0 {
			share := float64(of.Bad) / float64(of.Judged)
			of.BadShare = &share
		}
		out[pool] = of
	}
	return out
}

// classifierFigures are the rates between the counters old (nil: none
// kept yet, counted from zero) and cur, taken at now; hitRate is
// Options.CacheHitRate.
func classifierFigures(old *ClassifierCounters, cur ClassifierCounters, now time.Time,
	hitRate func(map[string]float64) (float64, bool)) *ClassifierFigures {
	if old == nil {
		old = &ClassifierCounters{At: now}
	}
	secs := now.Sub(old.At).Seconds()
	delta := map[string]float64{}
	total := 0.0
	for r, n := range cur.Results {
		delta[r] = n - old.Results[r]
		total += delta[r]
	}
	calls := cur.Calls - old.Calls
	cf := &ClassifierFigures{WindowSeconds: secs}
	if secs > 0 {
		cf.PerSecond, cf.CallsPerSecond = total/secs, calls/secs
	}
	if rate, ok := hitRate(delta); ok {
		cf.CacheHitRate = &rate
	}
	if calls > 0 {
		ms := 1000 * (cur.DurationSum - old.DurationSum) / calls
		cf.LatencyMeanMS = &ms
	}
	return cf
}
