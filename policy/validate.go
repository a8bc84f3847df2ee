package policy

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"path"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard/switchyard/policy/internal/yamlnode"

	"github.com/goccy/go-yaml/ast"
)

// positions reports problems at the user's text; the validator and the
// secrets step share it.
type positions struct {
	c    *collector
	root ast.Node
	// broken names the parts that did not decode (see decoder.broken):
	// they are not checked, and references to them are not reported.
	broken map[string]bool
	// hidden are the nodes whose findings are consequences of a mistake
	// already reported (see decoder.salvage).
	hidden map[ast.Node]bool
}

func (at positions) errf(path []any, format string, args ...any) {
	n := lookup(at.root, path...)
	if at.hidden[n] {
		return
	}
	at.c.at(n, format, args...)
}

// written reports whether the file gives a value at path.
func (at positions) written(path []any) bool {
	n := lookup(at.root, path...)
	return n != nil && n != lookup(at.root, path[:len(path)-1]...) // else lookup stopped at the parent
}

// number returns the number written at path, and whether one is written.
func (at positions) number(path []any) (float64, bool) {
	if !at.written(path) {
		return 0, false
	}
	return yamlnode.ScalarNumber(lookup(at.root, path...))
}

// validator checks a decoded config. It is pure: it reads the config and
// the file's text and reports, and changes nothing (the environment is the
// secrets step's, the derived values compile's).
type validator struct {
	positions
	cfg *Config
	reg LoadOptions
	// autos are the paths of the auto score bounds (routes check them
	// before control does).
	autos [][]any
}

func p(path ...any) []any { return path }

func (v *validator) validate() {
	cfg := v.cfg
	if cfg.Version != 1 && !v.broken["version"] {
		v.errf(p("version"), "version must be 1, got %d", cfg.Version)
	}
	for _, check := range []struct {
		part string
		run  func()
	}{
		{"server", v.server}, {"server", v.apiKeys}, {"server", v.trustedProxies}, {"pools", v.pools}, {"server", v.readiness}, {"topology", v.topology},
		{"classifier", v.classifier}, {"models", v.models}, {"session", v.session}, {"routes", v.routes},
		{"control", v.control}, {"capture", v.capture},
	} {
		if !v.broken[check.part] {
			check.run()
		}
	}
}

// decodedPools lists the pools that decoded, the ones the checks can trust.
func (v *validator) decodedPools() []*Pool {
	var out []*Pool
	for _, pool := range v.cfg.Pools {
		if !v.broken["pool:"+pool.Name] {
			out = append(out, pool)
		}
	}
	return out
}

// positive reports a duration that must be more than zero; why, when not
// empty, is added in parentheses.
func (v *validator) positive(path []any, what string, d Duration, why string) {
	if d > 0 {
		return
	}
	if why != "" {
		why = " (" + why + ")"
	}
	v.errf(path, "%s must be positive%s", what, why)
}

// atLeast reports an integer below min.
func (v *validator) atLeast(path []any, what string, n, min int) {
	if n < min {
		v.errf(path, "%s must be at least %d", what, min)
	}
}

func (v *validator) server() {
	s := &v.cfg.Server
	listenOK := true
	for _, l := range []struct{ key, addr string }{{"listen", s.Listen}, {"admin_listen", s.AdminListen}} {
		if msg := listenAddrErr(l.addr); msg != "" {
			v.errf(p("server", l.key), "server: %s %q %s", l.key, l.addr, msg)
			listenOK = false
		}
	}
	if listenOK && sameListener(s.Listen, s.AdminListen) {
		v.errf(p("server", "admin_listen"), "server: admin_listen %q takes the port of listen %q: give the admin API a port of its own", s.AdminListen, s.Listen)
	}
	if s.MaxJSONDepth < 1 {
		v.errf(p("server", "max_json_depth"), "server: max_json_depth must be at least 1")
	} else if s.MaxJSONDepth > 10000 {
		v.errf(p("server", "max_json_depth"), "server: max_json_depth %d is over 10000 (deep nesting is a denial-of-service vector)", s.MaxJSONDepth)
	}
	if s.AdminTokenEnv == "" && s.AdminTokenMetrics {
		v.errf(p("server", "admin_token_metrics"), "server: admin_token_metrics needs admin_token_env")
	}
	v.atLeast(p("server", "instances"), "server: instances", s.Instances, 1)
	if s.MaxConnections < 0 {
		v.errf(p("server", "max_connections"), "server: max_connections must not be negative (0: derived from the file-descriptor limit)")
	}
	if s.MaxConnectionsPerClient < 0 {
		v.errf(p("server", "max_connections_per_client"), "server: max_connections_per_client must not be negative (0: a quarter of max_connections, at least 16)")
	}
	v.atLeast(p("server", "admin_max_connections"), "server: admin_max_connections", s.AdminMaxConnections, 1)
	// shutdown_grace, drain_delay and write_timeout may be 0s (no wait, no
	// delay, no write deadline); these may not: each bounds what a client
	// could otherwise hold for ever.
	v.positive(p("server", "read_header_timeout"), "server: read_header_timeout", s.ReadHeaderTimeout, "it bounds a client that never sends its headers")
	v.positive(p("server", "idle_timeout"), "server: idle_timeout", s.IdleTimeout, "it closes idle keep-alive connections")
	v.positive(p("server", "body_timeout"), "server: body_timeout", s.BodyTimeout, "it bounds a request body that never arrives")
}

// listenAddrErr says what is wrong with an address serve listens on
// (net.Listen "tcp"), or "" when nothing is: HOST:PORT, where HOST is empty
// (every interface), an IP address or a host name, and PORT a number from
// 0 (any free port) to 65535 or a service name of /etc/services.
func listenAddrErr(addr string) string {
	const form = "must be HOST:PORT (e.g. 0.0.0.0:8080 or :8080)"
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" {
		return form
	}
	if host != "" && net.ParseIP(host) == nil && !validDNSName(host) {
		return fmt.Sprintf("has host %q, which is neither an IP address nor a host name", host)
	}
	if n, err := strconv.ParseUint(port, 10, 64); err == nil {
		if n > 65535 {
			return fmt.Sprintf("has port %s, over 65535", port)
		}
	} else if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Sprintf("has port %q, which is neither a number (0 to 65535) nor a known service name", port)
	}
	return ""
}

// sameListener reports whether two valid listen addresses would ask for
// the same socket, so that the second listen fails: the same non-zero
// port, on the same host or where one of them is every interface ("" and
// "::" cover IPv4 and IPv6, "0.0.0.0" IPv4).
func sameListener(a, b string) bool {
	ha, pa, _ := net.SplitHostPort(a)
	hb, pb, _ := net.SplitHostPort(b)
	na, erra := net.LookupPort("tcp", pa)
	nb, errb := net.LookupPort("tcp", pb)
	if erra != nil || errb != nil || na == 0 || na != nb {
		return false
	}
	ipv4 := func(h string) bool { ip := net.ParseIP(h); return ip != nil && ip.To4() != nil }
	switch {
	case strings.EqualFold(ha, hb), ha == "" || hb == "", ha == "::" || hb == "::":
		return true
	case ha == "0.0.0.0":
		return ipv4(hb)
	case hb == "0.0.0.0":
		return ipv4(ha)
	}
	return false
}

// apiKeys checks server.api_keys (their secrets are the secrets step's).
func (v *validator) apiKeys() {
	names := map[string]bool{}
	for i, k := range v.cfg.Server.APIKeys {
		at := p("server", "api_keys", i)
		switch {
		case k.Name == "":
			v.errf(at, "api_keys[%d]: name is required", i)
		case names[k.Name]:
			v.errf(appendCopy(at, "name"), "api_keys[%d]: duplicate key name %q", i, k.Name)
		case reservedKeyName(k.Name):
			v.errf(appendCopy(at, "name"), "api_keys[%d]: name %q is reserved (%q is the metrics' name for requests without a key; names starting with \"(\" or \"addr \" are the gateway's own tenants)", i, k.Name, "none")
		}
		names[k.Name] = true
		if k.KeyEnv == "" {
			v.errf(at, "api key %q: key_env is required (keys are never written inline)", k.Name)
		}
		if len(k.Models) == 0 {
			v.errf(appendCopy(at, "models"), "api key %q: models is empty (give \"*\" or names; without models the key may use every model)", k.Name)
		}
		if k.MaxInflight < 0 {
			v.errf(appendCopy(at, "max_inflight"), "api key %q: max_inflight must not be negative (0: no cap)", k.Name)
		}
		if k.Weight < 1 {
			v.errf(appendCopy(at, "weight"), "api key %q: weight must be at least 1", k.Name)
		} else if k.Weight > 1000 {
			v.errf(appendCopy(at, "weight"), "api key %q: weight %d is over 1000", k.Name, k.Weight)
		}
		if r := k.Rate; r != nil {
			if r.RPS <= 0 {
				v.errf(appendCopy(at, "rate", "rps"), "api key %q: rate.rps must be positive", k.Name)
			}
			if r.Burst < 1 {
				v.errf(appendCopy(at, "rate"), "api key %q: rate.burst must be at least 1", k.Name)
			}
		}
	}
}

// reservedKeyName reports a key name the gateway uses itself: "none" (the
// key label of requests without a key), "(classifier)" and any other name
// in parentheses, and "addr …" (a keyless client's tenant).
func reservedKeyName(name string) bool {
	return name == "none" || strings.HasPrefix(name, "(") || strings.HasPrefix(name, "addr ")
}

// trustedProxies parses server.trusted_proxies: CIDR prefixes, or single
// addresses (a /32 or /128).
func (v *validator) trustedProxies() {
	s := &v.cfg.Server
	s.Trusted = nil
	for i, t := range s.TrustedProxies {
		pfx, err := ParseTrustedProxy(t)
		if err != nil {
			v.errf(p("server", "trusted_proxies", i), "server: trusted_proxies[%d]: %v", i, err)
			continue
		}
		s.Trusted = append(s.Trusted, pfx)
	}
}

// ParseTrustedProxy reads one server.trusted_proxies entry: a CIDR prefix
// (10.0.0.0/8, fd00::/8) or one address.
func ParseTrustedProxy(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		pfx, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%q is not a CIDR prefix such as 10.0.0.0/8 or an address", s)
		}
		if pfx.Addr().Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("%q: a prefix has no zone", s)
		}
		return pfx.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("%q is not a CIDR prefix such as 10.0.0.0/8 or an address", s)
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// readiness checks that the pools /readyz requires exist.
func (v *validator) readiness() {
	r := v.cfg.Server.Readiness
	if r == nil {
		return
	}
	for i, name := range r.RequirePools {
		v.checkPool(p("server", "readiness", "require_pools", i), "server.readiness.require_pools", name)
	}
}

func (v *validator) pools() {
	if len(v.cfg.Pools) == 0 {
		v.errf(p("pools"), "at least one pool is required")
	}
	for _, pool := range v.decodedPools() {
		at := p("pools", pool.Name)
		v.pool(at, pool)
		v.poolTimeouts(at, pool)
		v.poolHealth(at, pool)
		v.outlier(appendCopy(at, "outlier"), pool)
		if pool.Discovery != nil {
			v.discovery(at, pool)
		} else if len(pool.Replicas) == 0 {
			v.errf(at, "pool %q: at least one replica is required (or a discovery section)", pool.Name)
		}
		v.replicas(at, pool)
	}
}

// pool checks a pool's model, balancer, memory and limits.
func (v *validator) pool(at []any, pool *Pool) {
	if pool.Model == "" {
		v.errf(at, "pool %q: model is required (the name its backends serve)", pool.Name)
	}
	if !slices.Contains(v.reg.Balancers, pool.Balance) {
		v.errf(appendCopy(at, "balance"), "pool %q: unknown balancer %q (known: %s)", pool.Name, pool.Balance, strings.Join(v.reg.Balancers, ", "))
	}
	if _, ok := DTypes[pool.DType]; pool.DType != "" && !ok {
		known := make([]string, 0, len(DTypes))
		for k := range DTypes {
			known = append(known, k)
		}
		sort.Strings(known)
		v.errf(appendCopy(at, "dtype"), "pool %q: unknown dtype %q (known: %s)", pool.Name, pool.DType, strings.Join(known, ", "))
	}
	if (pool.Parameters > 0) != (pool.DType != "") {
		v.errf(at, "pool %q: give parameters and dtype together (or memory)", pool.Name)
	}
	if pool.MaxModelLen < 0 {
		v.errf(appendCopy(at, "max_model_len"), "pool %q: max_model_len must not be negative", pool.Name)
	}
	if pool.MaxInflight < 0 {
		v.errf(appendCopy(at, "max_inflight"), "pool %q: max_inflight must not be negative", pool.Name)
	}
	if pool.Retries < 0 {
		v.errf(appendCopy(at, "retries"), "pool %q: retries must not be negative", pool.Name)
	}
	v.atLeast(appendCopy(at, "resume", "max_attempts"), fmt.Sprintf("pool %q: resume.max_attempts", pool.Name), pool.Resume.MaxAttempts, 1)
	if pool.Affinity.LoadFactor < 1 {
		v.errf(appendCopy(at, "affinity", "load_factor"), "pool %q: affinity.load_factor must be at least 1", pool.Name)
	}
	if pool.Affinity.Depth < 1 {
		v.errf(appendCopy(at, "affinity", "depth"), "pool %q: affinity.depth must be at least 1 message", pool.Name)
	}
}

// poolTimeouts checks the upstream timeouts. queue_timeout 0s (no wait),
// first_token_timeout, stream_idle_timeout and max_stream_duration 0s (off)
// are valid; a dial and a wait for headers must end.
func (v *validator) poolTimeouts(at []any, pool *Pool) {
	what := fmt.Sprintf("pool %q: ", pool.Name)
	v.positive(appendCopy(at, "connect_timeout"), what+"connect_timeout", pool.ConnectTimeout, "")
	v.positive(appendCopy(at, "response_header_timeout"), what+"response_header_timeout", pool.ResponseHeaderTimeout, "give a long one, such as 1h, for long generations")
}

// poolHealth checks active probes and scraping.
func (v *validator) poolHealth(at []any, pool *Pool) {
	what := fmt.Sprintf("pool %q: ", pool.Name)
	h, hat := pool.Health, appendCopy(at, "health")
	if !strings.HasPrefix(h.Path, "/") {
		v.errf(appendCopy(hat, "path"), "%shealth.path %q must start with /", what, h.Path)
	}
	v.positive(appendCopy(hat, "interval"), what+"health.interval", h.Interval, "disabled: true turns probes off")
	v.positive(appendCopy(hat, "timeout"), what+"health.timeout", h.Timeout, "")
	v.atLeast(appendCopy(hat, "unhealthy_after"), what+"health.unhealthy_after", h.UnhealthyAfter, 1)
	v.atLeast(appendCopy(hat, "healthy_after"), what+"health.healthy_after", h.HealthyAfter, 1)
	sc, sat := pool.Scrape, appendCopy(at, "scrape")
	if !strings.HasPrefix(sc.Path, "/") {
		v.errf(appendCopy(sat, "path"), "%sscrape.path %q must start with /", what, sc.Path)
	}
	v.positive(appendCopy(sat, "interval"), what+"scrape.interval", sc.Interval, "")
	v.positive(appendCopy(sat, "timeout"), what+"scrape.timeout", sc.Timeout, "")
	v.positive(appendCopy(sat, "staleness"), what+"scrape.staleness", sc.Staleness, "")
}

// outlier checks passive health; its thresholds may be 0 (off).
func (v *validator) outlier(at []any, pool *Pool) {
	od, what := pool.Outlier, fmt.Sprintf("pool %q: outlier.", pool.Name)
	v.positive(appendCopy(at, "base_ejection"), what+"base_ejection", od.BaseEjection, "consecutive_5xx: 0 and consecutive_connect_failures: 0 turn ejections off")
	v.positive(appendCopy(at, "max_ejection"), what+"max_ejection", od.MaxEjection, "")
	if od.BaseEjection > od.MaxEjection {
		v.errf(at, "%sbase_ejection %s is longer than max_ejection %s", what, od.BaseEjection.Std(), od.MaxEjection.Std())
	}
	if od.MaxEjectionPercent < 0 || od.MaxEjectionPercent > 100 {
		v.errf(appendCopy(at, "max_ejection_percent"), "%smax_ejection_percent must be within 0..100", what)
	}
	if od.Consecutive5xx < 0 {
		v.errf(appendCopy(at, "consecutive_5xx"), "%sconsecutive_5xx must not be negative (0 turns it off)", what)
	}
	if od.ConsecutiveConnectFailures < 0 {
		v.errf(appendCopy(at, "consecutive_connect_failures"), "%sconsecutive_connect_failures must not be negative (0 turns it off)", what)
	}
}

// replicas checks a pool's listed replicas: unique names and base URLs.
func (v *validator) replicas(at []any, pool *Pool) {
	seen := map[string]bool{}
	for i, r := range pool.Replicas {
		rat := appendCopy(at, "replicas", i)
		switch {
		case !seen[r.Name]:
		case !v.written(appendCopy(rat, "name")) && r.Name == defaultReplicaName(pool.Name, i):
			v.errf(rat, "pool %q: replica %d has no name and its default name %q is taken; name it", pool.Name, i, r.Name)
		default:
			v.errf(appendCopy(rat, "name"), "pool %q: duplicate replica name %q", pool.Name, r.Name)
		}
		seen[r.Name] = true
		if r.URL == "" {
			v.errf(rat, "pool %q: replica %q: url is required", pool.Name, r.Name)
			continue
		}
		if _, err := replicaURL(r.URL); err != nil {
			v.errf(appendCopy(rat, "url"), "pool %q: replica %q: url %q %s", pool.Name, r.Name, RedactURL(r.URL), err)
		}
	}
}

// replicaURL parses a replica's base URL as the runtime uses it: no
// trailing slash, the host in lower case (one server, one endpoint key).
func replicaURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, errors.New("must be an absolute http:// or https:// URL")
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, errors.New("must be a base URL without query, fragment or credentials (use api_key_env for a key)")
	}
	if port := u.Port(); port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("has port %s, outside 1..65535", port)
		}
	}
	if a, err := netip.ParseAddr(strings.Trim(u.Hostname(), "[]")); err == nil && a.IsUnspecified() {
		// 0.0.0.0 and :: are a listener's "every address", not a
		// server's: a connection to them reaches this machine.
		return nil, fmt.Errorf("names the unspecified address %s, which is no server's (name the replica's own address)", u.Hostname())
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	u.Host = strings.ToLower(u.Host)
	return u, nil
}

// poolNames lists the known pools for error messages.
func (v *validator) poolNames() string {
	names := v.cfg.Pools.Names()
	sort.Strings(names)
	return strings.Join(names, ", ")
}

func (v *validator) checkPool(path []any, what, name string) bool {
	if v.broken["pools"] {
		return false // no pool decoded: nothing to check against
	}
	if v.cfg.Pools.Get(name) == nil {
		v.errf(path, "%s: pool %q is not defined (known: %s)", what, name, v.poolNames())
		return false
	}
	return true
}

func (v *validator) classifier() {
	cl := v.cfg.Classifier
	if cl == nil {
		return
	}
	at := p("classifier")
	if !slices.Contains(v.reg.Classifiers, cl.Kind) {
		v.errf(appendCopy(at, "kind"), "classifier: unknown kind %q (known: %s)", cl.Kind, strings.Join(v.reg.Classifiers, ", "))
	}
	if cl.Kind == "model" {
		if cl.Pool == "" {
			v.errf(at, "classifier: kind model needs a pool")
		} else {
			v.checkPool(appendCopy(at, "pool"), "classifier", cl.Pool)
		}
	}
	if len(cl.Labels) < 2 {
		v.errf(appendCopy(at, "labels"), "classifier: at least two labels are required")
	}
	seen := map[string]bool{}
	for i, l := range cl.Labels {
		if l == "" {
			v.errf(appendCopy(at, "labels", i), "classifier: empty label")
		} else if seen[l] {
			v.errf(appendCopy(at, "labels", i), "classifier: duplicate label %q", l)
		}
		seen[l] = true
	}
	if cl.OnError != "" && !seen[cl.OnError] {
		v.errf(appendCopy(at, "on_error"), "classifier: on_error %q is not a label (labels: %s)", cl.OnError, strings.Join(cl.Labels, ", "))
	}
	// The classifier runs no template (classifier.CheckPrompt says why);
	// a prompt written for one would reach the model as it stands.
	if i := strings.Index(cl.Prompt, "{{"); i >= 0 && strings.Contains(cl.Prompt[i:], "}}") {
		v.errf(appendCopy(at, "prompt"), "classifier: prompt is plain text, not a Go template: write {labels} where the list of labels goes")
	}
	v.atLeast(appendCopy(at, "concurrency"), "classifier: concurrency", cl.Concurrency, 1)
	v.atLeast(appendCopy(at, "max_input_chars"), "classifier: max_input_chars", cl.MaxInputChars, 64)
	v.positive(appendCopy(at, "timeout"), "classifier: timeout", cl.Timeout, "")
	if cl.Breaker.Failures < 0 {
		v.errf(appendCopy(at, "breaker", "failures"), "classifier: breaker.failures must not be negative (0 turns the breaker off)")
	}
	v.positive(appendCopy(at, "breaker", "cooldown"), "classifier: breaker.cooldown", cl.Breaker.Cooldown, "failures: 0 turns the breaker off")
	if cl.Cache.Size < 0 {
		v.errf(appendCopy(at, "cache", "size"), "classifier: cache.size must not be negative")
	}
	v.positive(appendCopy(at, "cache", "ttl"), "classifier: cache.ttl", cl.Cache.TTL, "size: 0 turns the cache off")
	v.reservedSlots(at, cl)
}

// reservedSlots checks classifier.reserved_slots against its pool: a
// reservation needs a max_inflight to reserve from, and must leave one
// slot for the pool's other requests.
func (v *validator) reservedSlots(at []any, cl *Classifier) {
	n := cl.ReservedSlots
	if n == 0 {
		return
	}
	at = appendCopy(at, "reserved_slots")
	if n < 0 {
		v.errf(at, "classifier: reserved_slots must not be negative")
		return
	}
	pool := v.cfg.Pools.Get(cl.Pool)
	switch {
	case cl.Kind != "model" || pool == nil:
		v.errf(at, "classifier: reserved_slots needs kind model and its pool")
	case pool.MaxInflight <= 0:
		v.errf(at, "classifier: reserved_slots %d needs pool %q to set max_inflight", n, pool.Name)
	case n >= pool.MaxInflight:
		v.errf(at, "classifier: reserved_slots %d must be below pool %q's max_inflight %d", n, pool.Name, pool.MaxInflight)
	}
}

func (v *validator) models() {
	seen := map[string]bool{}
	served := map[string]bool{}
	for _, pool := range v.cfg.Pools { // a broken pool's model may be unset: fine, fewer matches
		served[pool.Name], served[pool.Model] = true, true
	}
	var patterns []string
	for i, m := range v.cfg.Models {
		at := p("models", i)
		switch {
		case m.Name == "":
			v.errf(at, "models[%d]: name is required", i)
		case seen[m.Name]:
			v.errf(appendCopy(at, "name"), "models[%d]: duplicate model name %q", i, m.Name)
		case served[m.Name]:
			v.errf(appendCopy(at, "name"), "models[%d]: %q is already a pool or served model name", i, m.Name)
		case m.IsPattern():
			if _, err := path.Match(m.Name, ""); err != nil {
				v.errf(appendCopy(at, "name"), "models[%d]: %q is not a valid pattern (use *, ? and [a-z])", i, m.Name)
			}
			patterns = append(patterns, m.Name)
		}
		seen[m.Name] = true
		switch {
		case m.Route != "" && m.Pool != "":
			v.errf(at, "models[%d]: give either route: policy or pool, not both", i)
		case m.Pool != "":
			v.checkPool(appendCopy(at, "pool"), fmt.Sprintf("models[%d]", i), m.Pool)
		case m.Route != "policy":
			v.errf(appendCopy(at, keyOf("route")), "models[%d]: route must be \"policy\" (or give pool: NAME), got %q", i, m.Route)
		}
	}
	routable := func(name string) bool {
		if seen[name] || served[name] {
			return true
		}
		for _, pat := range patterns {
			if ok, _ := path.Match(pat, name); ok {
				return true
			}
		}
		return false
	}
	for i, k := range v.cfg.Server.APIKeys {
		if v.broken["server"] {
			break
		}
		for j, name := range k.Models {
			if name != "*" && !routable(name) {
				v.errf(p("server", "api_keys", i, "models", j), "api key %q: model %q is not routable (give \"*\", a models[] name, a pool or a served model)", k.Name, name)
			}
		}
	}
}

// control checks control.share against the pools and the routes' auto
// bounds: each needs the other.
func (v *validator) control() {
	var sc *ShareControl
	if c := v.cfg.Control; c != nil {
		sc = c.Share
	}
	if sc == nil {
		for _, at := range v.autos {
			v.errf(at, "an auto score bound needs a control.share section (the controller that sets it)")
		}
		return
	}
	at := p("control", "share")
	if v.checkPool(appendCopy(at, "pool"), "control.share", sc.Pool) && sc.Target.Capacity {
		if pool := v.cfg.Pools.Get(sc.Pool); pool.MaxInflight <= 0 && !v.broken["pool:"+sc.Pool] {
			v.errf(appendCopy(at, "target"), "control.share: target capacity needs pool %q to set max_inflight (its capacity)", sc.Pool)
		}
	}
	if !sc.Target.Capacity && (sc.Target.Value <= 0 || sc.Target.Value >= 1) {
		v.errf(appendCopy(at, "target"), "control.share: target must be a share between 0 and 1 (exclusive) or capacity")
	}
	if sc.Window.Std() < time.Second {
		v.errf(appendCopy(at, "window"), "control.share: window must be at least 1s")
	}
	if sc.Utilization <= 0 || sc.Utilization > 1 {
		v.errf(appendCopy(at, "utilization"), "control.share: utilization must be within (0, 1]")
	}
	if len(v.autos) == 0 && !v.broken["routes"] {
		v.errf(at, "control.share: no route has an auto score bound ({score: {LABEL: {gte: auto}}}) for it to move")
	}
}

func (v *validator) capture() {
	c := v.cfg.Capture
	if c == nil {
		return
	}
	if c.Dir == "" {
		v.errf(p("capture", "dir"), "capture: dir is required: the folder the files are written to")
	}
	if c.Sample < 0 || c.Sample > 1 {
		v.errf(p("capture", "sample"), "capture: sample is a share between 0 and 1, got %g", c.Sample)
	}
	if len(c.Keys) == 0 && c.Sample == 0 {
		v.errf(p("capture"), "capture: records nothing: name keys, or a sample above 0")
	}
	known := map[string]bool{}
	for _, k := range v.cfg.Server.APIKeys {
		known[k.Name] = true
	}
	for i, k := range c.Keys {
		if !known[k] {
			path := p("capture", "keys")
			if len(c.Keys) > 1 {
				path = appendCopy(path, i)
			}
			v.errf(path, "capture: keys: %q is not a server.api_keys name", k)
		}
	}
	v.atLeast(p("capture", "max_files"), "capture: max_files", c.MaxFiles, 1)
	if c.MaxFileSize < 4096 {
		v.errf(p("capture", "max_file_size"), "capture: max_file_size must be at least 4KiB, got %s", c.MaxFileSize)
	}
}

func (v *validator) session() {
	if s := v.cfg.Session; s != nil {
		v.positive(p("session", "ttl"), "session: ttl", s.TTL, "")
		v.atLeast(p("session", "size"), "session: size", s.Size, 1)
		if s.MoveDown != MoveDownNewInstruction && s.MoveDown != MoveDownNever {
			v.errf(p("session", "move_down"), "session: move_down: unknown value %q (known: %s, %s)", s.MoveDown, MoveDownNewInstruction, MoveDownNever)
		}
	}
}

func (v *validator) routes() {
	routes := v.cfg.Routes
	if len(routes) == 0 {
		v.errf(p("routes"), "at least one route is required")
		return
	}
	names := map[string]bool{}
	for i, r := range routes {
		if v.broken[fmt.Sprintf("route:%d", i)] {
			names[r.Name] = true
			continue
		}
		at := p("routes", i)
		what := fmt.Sprintf("routes[%d] %q", i, r.Name)
		switch {
		case r.Name == "":
			v.errf(at, "routes[%d]: name is required", i)
		case names[r.Name]:
			v.errf(appendCopy(at, "name"), "%s: duplicate route name", what)
		}
		names[r.Name] = true
		targets := map[string]bool{}
		switch {
		case r.To != "" && len(r.Split) > 0:
			v.errf(appendCopy(at, "split"), "%s: give either to or split, not both", what)
		case r.To == "" && len(r.Split) == 0:
			v.errf(at, "%s: needs to or split", what)
		case r.To != "":
			v.checkPool(appendCopy(at, "to"), what, r.To)
			targets[r.To] = true
		default:
			for _, e := range r.Split {
				v.checkPool(appendCopy(at, "split", keyOf(e.Pool)), what, e.Pool)
				targets[e.Pool] = true
			}
		}
		seen := map[string]bool{}
		for j, fb := range r.Fallback {
			fat := appendCopy(at, "fallback", j)
			if !v.checkPool(fat, what, fb) {
				continue
			}
			if targets[fb] && r.To != "" {
				v.errf(fat, "%s: fallback cycle: %q is the route's own target", what, fb)
			} else if seen[fb] {
				v.errf(fat, "%s: fallback cycle: %q is listed twice", what, fb)
			}
			seen[fb] = true
		}
		if s := r.Spill; s != nil {
			if v.checkPool(appendCopy(at, "spill", "to"), what, s.To) && targets[s.To] {
				v.errf(appendCopy(at, "spill", "to"), "%s: spill.to %q is the route's own target", what, s.To)
			}
			if s.WhenQueueOver < 0 {
				v.errf(appendCopy(at, "spill", "when_queue_over"), "%s: spill.when_queue_over must not be negative", what)
			}
		}
		if r.When != nil {
			v.when(appendCopy(at, "when"), what, r.When)
		}
	}
	if last := routes[len(routes)-1]; !last.When.Empty() && !v.broken[fmt.Sprintf("route:%d", len(routes)-1)] {
		v.errf(p("routes", len(routes)-1, keyOf("when")), "routes[%d] %q: the last route must match every request (remove its when, or add a catch-all route after it)", len(routes)-1, last.Name)
	}
}

// Empty reports whether w sets no condition (a nil When sets none): a
// route whose when is empty matches every request.
func (w *When) Empty() bool {
	return w == nil || (len(w.Class) == 0 && len(w.Score) == 0 && len(w.Model) == 0 && w.Tools == nil &&
		w.Messages == nil && w.PromptTokens == nil && w.Stream == nil && len(w.Header) == 0 &&
		w.MaxTokens == nil && w.SmallModel == nil && len(w.SystemContains) == 0 &&
		w.ToolError == nil && w.RepeatedCall == nil &&
		len(w.Key) == 0 && len(w.Any) == 0 && w.Not == nil)
}

func (v *validator) when(at []any, what string, w *When) {
	cl := v.cfg.Classifier
	labelOK := func(path []any, label string) {
		if v.broken["classifier"] {
			return // its labels are unknown
		}
		if cl == nil {
			v.errf(path, "%s: class conditions need a classifier section", what)
		} else if !slices.Contains(cl.Labels, label) {
			v.errf(path, "%s: %q is not a classifier label (labels: %s)", what, label, strings.Join(cl.Labels, ", "))
		}
	}
	for i, c := range w.Class {
		path := appendCopy(at, "class")
		if len(w.Class) > 1 {
			path = appendCopy(path, i)
		}
		labelOK(path, c)
	}
	for name, c := range map[string]*NumCmp{"tools": w.Tools, "messages": w.Messages, "prompt_tokens": w.PromptTokens, "max_tokens": w.MaxTokens} {
		if c != nil && c.Auto != "" {
			v.errf(appendCopy(at, name), "%s: auto bounds are for score conditions only", what)
		}
	}
	for label, cmp := range w.Score {
		if cmp != nil && cmp.Auto != "" {
			v.autos = append(v.autos, appendCopy(at, "score", label))
		}
		labelOK(appendCopy(at, "score", keyOf(label)), label)
		if cmp == nil { // `score: {label: }` decodes to a nil comparison
			v.errf(appendCopy(at, "score", keyOf(label)), "%s: score %q needs a comparison such as {gte: 0.8}", what, label)
			continue
		}
		for _, b := range []*float64{cmp.GT, cmp.GTE, cmp.LT, cmp.LTE, cmp.EQ} {
			if b != nil && (*b < 0 || *b > 1) {
				v.errf(appendCopy(at, "score", label), "%s: score %q: bounds are probabilities between 0 and 1, got %s", what, label, cmp)
				break
			}
		}
	}
	if w.SmallModel != nil && !v.broken["models"] && !slices.ContainsFunc(v.cfg.Models, func(m Model) bool { return m.Small }) {
		v.errf(appendCopy(at, "small_model"), "%s: small_model needs a models entry with small: true", what)
	}
	for i, s := range w.SystemContains {
		if s == "" {
			path := appendCopy(at, "system_contains")
			if len(w.SystemContains) > 1 {
				path = appendCopy(path, i)
			}
			v.errf(path, "%s: system_contains: an empty string matches every request", what)
		}
	}
	for name, values := range w.Header {
		switch {
		case name == "":
			v.errf(appendCopy(at, "header"), "%s: empty header name", what)
		case len(values) == 0: // `header: {X-A: }` would never match
			v.errf(appendCopy(at, "header", keyOf(name)), "%s: header %q needs a value or a list of values", what, name)
		}
	}
	for i, k := range w.Key {
		if v.broken["server"] {
			break
		}
		found := false
		for _, ak := range v.cfg.Server.APIKeys {
			found = found || ak.Name == k
		}
		if !found {
			v.errf(appendCopy(at, "key"), "%s: key condition %q (entry %d) names no server.api_keys entry", what, k, i)
		}
	}
	for i, sub := range w.Any {
		if sub.Empty() {
			v.errf(appendCopy(at, "any", i), "%s: empty condition in any", what)
			continue
		}
		v.when(appendCopy(at, "any", i), what, sub)
	}
	if w.Not != nil {
		if w.Not.Empty() {
			v.errf(appendCopy(at, "not"), "%s: empty condition in not", what)
		} else {
			v.when(appendCopy(at, "not"), what, w.Not)
		}
	}
}

// appendCopy extends a lookup path without sharing its backing array.
func appendCopy(a []any, more ...any) []any { return append(slices.Clip(a), more...) }

// placeholder reports a secret left as the example manifests ship it
// (deploy/kustomize's Secret says REPLACE-ME-…).
func placeholder(secret string) bool {
	return strings.HasPrefix(strings.ToUpper(strings.TrimSpace(secret)), "REPLACE-ME")
}

// userinfo matches the credentials of a URL-like string that may not
// parse.
var userinfo = regexp.MustCompile(`//[^/@\s]*@`)

// RedactURL returns raw with any password (or user info, when raw does
// not parse as a URL) replaced by "xxxxx", for messages and logs.
func RedactURL(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Redacted()
	}
	return userinfo.ReplaceAllString(raw, "//xxxxx@")
}
