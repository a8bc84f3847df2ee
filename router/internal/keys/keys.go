package keys

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"path"
	"reflect"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/switchyard/switchyard/policy"
)

// ErrUnauthorized: the request brought no key, or one that is not
// configured (401). ErrRateLimited: the key is over its rate or its
// max_inflight (429).
var (
	ErrUnauthorized = errors.New("missing or unknown API key")
	ErrRateLimited  = errors.New("rate limited")
)

// Key is one configured API key.
type Key struct {
	// Name names the key (logs, metrics, sessions, stored responses);
	// Weight is its share in fair admission.
	Name   string
	Weight int

	sum    [32]byte
	models policy.StringList
	// maxInflight is api_keys[].max_inflight (0: none); slots counts the
	// key's requests in flight, the same counter across reloads.
	maxInflight int
	slots       *slots
	limiter     *rate.Limiter
	rate        *policy.Rate
	// instances is server.instances when the limiter was made.
	instances int
}

// slots counts an API key's requests in flight across every pool, for
// api_keys[].max_inflight. One counter per key name, kept across reloads
// (Build hands it on), so a reload that lowers the cap sees the requests
// already open.
type slots struct{ n atomic.Int64 }

// Set is the keys of one config; empty when auth is off.
type Set []*Key

// Build makes the API keys of cfg; a key whose rate limit is unchanged
// keeps its limiter (and so its tokens) from prev, and every key kept
// keeps its count of requests in flight.
func Build(cfg *policy.Config, prev Set) Set {
	var keys Set
	n := cfg.Server.Instances
	for _, k := range cfg.Server.APIKeys {
		ak := &Key{Name: k.Name, sum: sha256.Sum256([]byte(k.Secret)), models: k.Models, Weight: k.Weight, rate: k.Rate, instances: n,
			maxInflight: k.MaxInflight, slots: &slots{}}
		if old := prev.get(k.Name); old != nil {
			ak.slots = old.slots
		}
		if k.Rate != nil {
			if old := prev.get(k.Name); old != nil && reflect.DeepEqual(old.rate, k.Rate) && old.instances == n {
				ak.limiter = old.limiter
			} else {
				// rps and burst are cluster-wide: each of n instances takes
				// its share (a burst of at least 1).
				ak.limiter = rate.NewLimiter(rate.Limit(k.Rate.RPS/float64(n)), max(1, k.Rate.Burst/n))
			}
		}
		keys = append(keys, ak)
	}
	return keys
}

func (s Set) get(name string) *Key {
	for _, k := range s {
		if k.Name == name {
			return k
		}
	}
	return nil
}

// Authenticate returns the API key presented in the Authorization header
// (nil when auth is off). Every configured key is compared, in constant time
// over fixed-length digests, so timing reveals neither which key matched nor
// how much of one did.
func (s Set) Authenticate(r *http.Request) (*Key, error) {
	if len(s) == 0 {
		return nil, nil
	}
	h := r.Header.Get("Authorization")
	// The scheme is case-insensitive (RFC 9110 §11.1).
	token, ok := "", len(h) > 7 && strings.EqualFold(h[:7], "Bearer ")
	if ok {
		token = strings.TrimSpace(h[7:])
	}
	if h == "" {
		// Anthropic's clients send the key as x-api-key.
		token = strings.TrimSpace(r.Header.Get("X-Api-Key"))
		ok = token != ""
	}
	if !ok || token == "" {
		return nil, fmt.Errorf("%w: send Authorization: Bearer <key> (or x-api-key: <key>)", ErrUnauthorized)
	}
	sum := sha256.Sum256([]byte(token))
	var found *Key
	for _, k := range s {
		if subtle.ConstantTimeCompare(sum[:], k.sum[:]) == 1 {
			found = k
		}
	}
	if found == nil {
		return nil, fmt.Errorf("%w: the API key is not valid", ErrUnauthorized)
	}
	return found, nil
}

// Throttle takes a token from the key's bucket; when there is none (and
// nothing is taken) it returns how long until there is one, and the error
// that says so. A nil key, or a key without a rate, is never throttled.
func (k *Key) Throttle(now time.Time) (time.Duration, error) {
	if k == nil || k.limiter == nil {
		return 0, nil
	}
	wait := time.Duration(0)
	if r := k.limiter.ReserveN(now, 1); !r.OK() {
		wait = time.Second
	} else if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		wait = d
	}
	if wait <= 0 {
		return 0, nil
	}
	return wait, fmt.Errorf("%w: API key %q is over its rate of %g requests/s", ErrRateLimited, k.Name, k.rate.RPS)
}

// Allows reports whether the key may use the client-visible model name:
// its models list names it or holds a pattern (such as "claude-*") that
// matches it. A nil key (auth off) may use every model.
func (k *Key) Allows(model string) bool {
	if k == nil || k.models.Has("*") || k.models.Has(model) {
		return true
	}
	for _, m := range k.models {
		if ok, _ := path.Match(m, model); ok {
			return true
		}
	}
	return false
}

// Hold counts a request against the key's max_inflight, or refuses it
// (ErrRateLimited) when the key has that many requests open already. It
// reports whether it took a slot, which Release gives back; a nil key, or
// one without max_inflight, takes none.
func (k *Key) Hold() (bool, error) {
	if k == nil || k.maxInflight <= 0 {
		return false, nil
	}
	if n := k.slots.n.Add(1); n > int64(k.maxInflight) {
		k.slots.n.Add(-1)
		return false, fmt.Errorf("%w: API key %q has %d requests in flight (its max_inflight)", ErrRateLimited, k.Name, k.maxInflight)
	}
	return true, nil
}

// Release gives back the slot Hold took.
func (k *Key) Release() { k.slots.n.Add(-1) }
