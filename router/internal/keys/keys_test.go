package keys

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard/switchyard/policy"
)

func config(instances int, keys ...*policy.APIKey) *policy.Config {
	cfg := &policy.Config{}
	cfg.Server.Instances = instances
	cfg.Server.APIKeys = keys
	return cfg
}

func request(header, value string) *http.Request {
	r, _ := http.NewRequest(http.MethodPost, "http://gw/v1/chat/completions", nil)
	if header != "" {
		r.Header.Set(header, value)
	}
	return r
}

// TestAuthenticate: the key is read from Authorization (any case of its
// Bearer scheme) or, without one, from x-api-key; a missing or unknown key
// is ErrUnauthorized; without keys, auth is off.
func TestAuthenticate(t *testing.T) {
	s := Build(config(1, &policy.APIKey{Name: "a", Secret: "sk-a"}, &policy.APIKey{Name: "b", Secret: "sk-b"}), nil)
	for _, tc := range []struct {
		header, value, want string
	}{
		{"Authorization", "Bearer sk-a", "a"},
		{"Authorization", "bearer  sk-b ", "b"},
		{"X-Api-Key", "sk-b", "b"},
		{"Authorization", "Bearer sk-c", ""},
		{"Authorization", "Basic sk-a", ""},
		{"Authorization", "Bearer ", ""},
		{"", "", ""},
	} {
		k, err := s.Authenticate(request(tc.header, tc.value))
		switch {
		case tc.want == "" && !errors.Is(err, ErrUnauthorized):
			t.Errorf("%s: %q: key %v, error %v; want ErrUnauthorized", tc.header, tc.value, k, err)
		case tc.want != "" && (err != nil || k.Name != tc.want):
			t.Errorf("%s: %q: key %v, error %v; want %s", tc.header, tc.value, k, err, tc.want)
		}
	}
	if k, err := Build(config(1), nil).Authenticate(request("", "")); k != nil || err != nil {
		t.Errorf("without keys: key %v, error %v; want none", k, err)
	}
}

// TestAllows: a key's models list allows names and patterns; "*" and a
// nil key (auth off) allow every model.
func TestAllows(t *testing.T) {
	s := Build(config(1, &policy.APIKey{Name: "a", Models: policy.StringList{"gpt-4o", "claude-*"}},
		&policy.APIKey{Name: "all", Models: policy.StringList{"*"}}), nil)
	a, all := s.get("a"), s.get("all")
	for model, want := range map[string]bool{"gpt-4o": true, "claude-sonnet": true, "gpt-4o-mini": false, "auto": false} {
		if got := a.Allows(model); got != want {
			t.Errorf("a.Allows(%q) = %t, want %t", model, got, want)
		}
		if !all.Allows(model) || !(*Key)(nil).Allows(model) {
			t.Errorf("%q not allowed to every model", model)
		}
	}
}

// TestRateSharedAcrossInstances: rps and burst are cluster-wide, so each
// of server.instances takes its share: a burst of 4 over 2 instances lets
// 2 requests through here, and the third waits (ErrRateLimited).
func TestRateSharedAcrossInstances(t *testing.T) {
	k := Build(config(2, &policy.APIKey{Name: "k", Rate: &policy.Rate{RPS: 0.001, Burst: 4}}), nil)[0]
	now := time.Now()
	var got []bool
	for range 3 {
		_, err := k.Throttle(now)
		got = append(got, err == nil)
	}
	if d := cmp.Diff([]bool{true, true, false}, got); d != "" {
		t.Errorf("admitted (-want +got):\n%s", d)
	}
	wait, err := k.Throttle(now)
	if !errors.Is(err, ErrRateLimited) || wait < time.Minute {
		t.Errorf("throttled: wait %v, error %v", wait, err)
	}
	if wait, err := (*Key)(nil).Throttle(now); wait != 0 || err != nil {
		t.Errorf("a nil key was throttled: %v %v", wait, err)
	}
}

// TestReloadKeepsTokensAndSlots: a key whose rate is unchanged keeps its
// tokens across Build, one whose rate changed starts afresh, and every key
// kept keeps its count of requests in flight, so a reload that lowers
// max_inflight sees the requests already open.
func TestReloadKeepsTokensAndSlots(t *testing.T) {
	rate := &policy.Rate{RPS: 0.001, Burst: 1}
	prev := Build(config(1, &policy.APIKey{Name: "k", Rate: rate, MaxInflight: 2}), nil)
	now := time.Now()
	if _, err := prev[0].Throttle(now); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if held, err := prev[0].Hold(); !held || err != nil {
			t.Fatalf("hold: %t %v", held, err)
		}
	}
	next := Build(config(1, &policy.APIKey{Name: "k", Rate: &policy.Rate{RPS: 0.001, Burst: 1}, MaxInflight: 1}), prev)
	if _, err := next[0].Throttle(now); !errors.Is(err, ErrRateLimited) {
		t.Errorf("the kept rate's bucket was refilled: %v", err)
	}
	if held, err := next[0].Hold(); held || !errors.Is(err, ErrRateLimited) {
		t.Errorf("hold over the lowered cap: %t %v", held, err)
	}
	next[0].Release()
	next[0].Release()
	if held, err := next[0].Hold(); !held || err != nil {
		t.Errorf("hold after release: %t %v", held, err)
	}
	changed := Build(config(1, &policy.APIKey{Name: "k", Rate: &policy.Rate{RPS: 0.001, Burst: 2}}), next)
	if _, err := changed[0].Throttle(now); err != nil {
		t.Errorf("a changed rate kept the old bucket: %v", err)
	}
	if held, err := changed[0].Hold(); held || err != nil {
		t.Errorf("a key without max_inflight took a slot: %t %v", held, err)
	}
}
