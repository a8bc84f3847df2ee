package classifier

import "testing"

func TestCacheHitRate(t *testing.T) {
	for _, c := range []struct {
		results map[string]float64
		want    float64
		ok      bool
	}{
		{map[string]float64{}, 0, false},
		{map[string]float64{"sticky": 40}, 0, false},
		// Sticky results never asked the cache; every other result did.
		{map[string]float64{"cache_hit": 90, "ok": 5, "sticky": 100, "timeout": 2, "error": 1, "circuit_open": 1, "refused": 1}, 0.9, true},
		{map[string]float64{"ok": 3}, 0, true},
	} {
		got, ok := CacheHitRate(c.results)
		if ok != c.ok || got != c.want {
			t.Errorf("CacheHitRate(%v) = %v, %t; want %v, %t", c.results, got, ok, c.want, c.ok)
		}
	}
}
