package policy_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/switchyard/switchyard/policy"
	"github.com/switchyard/switchyard/policy/internal/policytest"
	"github.com/switchyard/switchyard/policy/routing"
)

// badFixtures maps every testdata/*.bad.yaml to the exact problems the
// loader reports, in file order.
var badFixtures = []struct {
	name string // testdata/<name>.bad.yaml
	want []string
}{
	{"api-key-env-unset", []string{
		`../testdata/api-key-env-unset.bad.yaml:5:27: api key "ci": environment variable SWITCHYARD_KEY_MISSING is not set or empty`,
	}},
	{"api-key-model-unroutable", []string{
		`../testdata/api-key-model-unroutable.bad.yaml:6:22: api key "agents": model "gpt-4" is not routable (give "*", a models[] name, a pool or a served model)`,
	}},
	{"bad-duration", []string{
		`../testdata/bad-duration.bad.yaml:3:19: server: shutdown_grace: invalid duration "30 seconds" (use Go durations such as 250ms, 30s, 5m)`,
	}},
	{"bad-size", []string{
		`../testdata/bad-size.bad.yaml:3:19: server: max_body_bytes: invalid size "8 megs" (use a positive integer with an optional B, KiB, MiB, GiB, TiB, KB, MB, GB or TB suffix)`,
	}},
	{"bad-url", []string{
		`../testdata/bad-url.bad.yaml:6:30: pool "small": replica "small-a": url "10.0.0.1:8000" must be an absolute http:// or https:// URL`,
		`../testdata/bad-url.bad.yaml:7:30: pool "small": replica "small-b": url "http://0.0.0.0:8000" names the unspecified address 0.0.0.0, which is no server's (name the replica's own address)`,
		`../testdata/bad-url.bad.yaml:8:30: pool "small": replica "small-c": url "http://[::]:8000" names the unspecified address ::, which is no server's (name the replica's own address)`,
	}},
	{"replica-default-name-taken", []string{
		`../testdata/replica-default-name-taken.bad.yaml:7:10: pool "small": replica 1 has no name and its default name "small-1" is taken; name it`,
	}},
	{"health-path", []string{
		`../testdata/health-path.bad.yaml:5:20: pool "small": health.path "health" must start with /`,
		`../testdata/health-path.bad.yaml:6:15: pool "small": outlier.base_ejection 5m0s is longer than max_ejection 1m0s`,
		`../testdata/health-path.bad.yaml:6:74: pool "small": outlier.max_ejection_percent must be within 0..100`,
		`../testdata/health-path.bad.yaml:6:96: pool "small": outlier.consecutive_5xx must not be negative (0 turns it off)`,
		`../testdata/health-path.bad.yaml:7:31: pool "small": replica "a": url "http://127.0.0.1:8001?x=1" must be a base URL without query, fragment or credentials (use api_key_env for a key)`,
		`../testdata/health-path.bad.yaml:9:38: server.readiness.require_pools: pool "large" is not defined (known: small)`,
	}},
	{"classifier-reserved-slots", []string{
		`../testdata/classifier-reserved-slots.bad.yaml:12:19: classifier: reserved_slots 2 must be below pool "small"'s max_inflight 2`,
	}},
	{"tenant-limits", []string{
		`../testdata/tenant-limits.bad.yaml:3:33: server: trusted_proxies[1]: "10.0.0.0/99" is not a CIDR prefix such as 10.0.0.0/8 or an address`,
		`../testdata/tenant-limits.bad.yaml:3:46: server: trusted_proxies[2]: "proxy.local" is not a CIDR prefix such as 10.0.0.0/8 or an address`,
		`../testdata/tenant-limits.bad.yaml:5:59: api key "a": max_inflight must not be negative (0: no cap)`,
	}},
	{"api-key-reserved", []string{
		`../testdata/api-key-reserved.bad.yaml:4:14: api_keys[0]: name "(classifier)" is reserved ("none" is the metrics' name for requests without a key; names starting with "(" or "addr " are the gateway's own tenants)`,
		`../testdata/api-key-reserved.bad.yaml:5:14: api_keys[1]: name "none" is reserved ("none" is the metrics' name for requests without a key; names starting with "(" or "addr " are the gateway's own tenants)`,
		`../testdata/api-key-reserved.bad.yaml:6:32: api key "ci-copy": its key (SWITCHYARD_KEY_CI) is the same as api key "(classifier)"'s (SWITCHYARD_KEY_CI); give each key its own value`,
	}},
	{"server-and-classifier-values", []string{
		`../testdata/server-and-classifier-values.bad.yaml:3:11: server: listen "8080" must be HOST:PORT (e.g. 0.0.0.0:8080 or :8080)`,
		`../testdata/server-and-classifier-values.bad.yaml:4:19: server: max_json_depth must be at least 1`,
		`../testdata/server-and-classifier-values.bad.yaml:12:16: classifier: concurrency must be at least 1`,
		`../testdata/server-and-classifier-values.bad.yaml:13:11: classifier: prompt is plain text, not a Go template: write {labels} where the list of labels goes`,
	}},
	{"topology-node-without-partition", []string{
		`../testdata/topology-node-without-partition.bad.yaml:10:63: pool "big": replica "b": node "n2" is in no partition; with partitions declared, a replica's nodes must sit in one`,
	}},
	{"several-types", []string{
		`../testdata/several-types.bad.yaml:3:19: server: max_body_bytes: invalid size "8 megs" (use a positive integer with an optional B, KiB, MiB, GiB, TiB, KB, MB, GB or TB suffix)`,
		`../testdata/several-types.bad.yaml:4:19: server: shutdown_grace: invalid duration "30" (use Go durations such as 250ms, 30s, 5m)`,
		`../testdata/several-types.bad.yaml:5:17: server: idle_timeout: invalid duration "1x" (use Go durations such as 250ms, 30s, 5m)`,
		`../testdata/several-types.bad.yaml:9:19: pool "small": max_inflight: expected an integer, got "ten"`,
		`../testdata/several-types.bad.yaml:10:14: pool "small": retries: expected an integer, got "x"`,
		`../testdata/several-types.bad.yaml:11:63: pool "small": replicas[0]: nodes: expected a list, got a string`,
	}},
	{"alias-undefined", []string{
		`../testdata/alias-undefined.bad.yaml:5:13: alias *missing: no anchor &missing is defined before it`,
	}},
	{"affinity-zero", []string{
		`../testdata/affinity-zero.bad.yaml:6:23: pool "big": affinity.depth must be at least 1 message`,
		`../testdata/affinity-zero.bad.yaml:6:39: pool "big": affinity.load_factor must be at least 1`,
	}},
	{"classifier-prompt", []string{
		`../testdata/classifier-prompt.bad.yaml:9:11: classifier: prompt is plain text, not a Go template: write {labels} where the list of labels goes`,
	}},
	{"class-label-unknown", []string{
		`../testdata/class-label-unknown.bad.yaml:17:24: routes[0] "complex": "hard" is not a classifier label (labels: simple, complex)`,
	}},
	{"class-without-classifier", []string{
		`../testdata/class-without-classifier.bad.yaml:13:19: routes[0] "complex": class conditions need a classifier section`,
	}},
	{"duplicate-key", []string{
		`../testdata/duplicate-key.bad.yaml:7:5: pool "small": duplicate key "model" (first at line 4)`,
	}},
	{"duplicate-pool", []string{
		`../testdata/duplicate-pool.bad.yaml:7:3: pools: duplicate key "small" (first at line 3)`,
	}},
	{"duplicate-replica", []string{
		`../testdata/duplicate-replica.bad.yaml:7:16: pool "small": duplicate replica name "small-a"`,
	}},
	{"duplicate-route", []string{
		`../testdata/duplicate-route.bad.yaml:11:11: routes[1] "default": duplicate route name`,
	}},
	{"empty-list-entry", []string{
		`../testdata/empty-list-entry.bad.yaml:7:8: pool "small": replicas[1]: expected a mapping, got nothing`,
	}},
	{"fallback-cycle", []string{
		`../testdata/fallback-cycle.bad.yaml:14:23: routes[0] "default": fallback cycle: "small" is the route's own target`,
	}},
	{"fallback-twice", []string{
		`../testdata/fallback-twice.bad.yaml:16:9: routes[0] "default": fallback cycle: "large" is listed twice`,
	}},
	{"indentation", []string{
		`../testdata/indentation.bad.yaml:5:14: mapping value is not allowed in this context (check the indentation of this line)`,
	}},
	{"indented-too-far", []string{
		`../testdata/indented-too-far.bad.yaml:7:9: the list item at column 9 is not in line with any list above it: indent it to column 7 to continue the list of line 6`,
	}},
	{"key-indented-too-far", []string{
		`../testdata/key-indented-too-far.bad.yaml:8:6: "balance" at column 6 is not in line with any key above it: indent it to column 5, beside "replicas" (line 5), or to column 9, beside "url" (line 7)`,
	}},
	{"key-under-indented", []string{
		`../testdata/key-under-indented.bad.yaml:5:4: "balance" at column 4 is not in line with any key above it: indent it to column 5, beside "model" (line 4), or to column 3, beside "small" (line 3)`,
	}},
	{"list-key-under-indented", []string{
		`../testdata/list-key-under-indented.bad.yaml:7:8: "url" at column 8 is not in line with any key above it: indent it to column 9, beside "name" (line 6), or to column 5, beside "replicas" (line 5)`,
	}},
	{"list-item-dedented", []string{
		`../testdata/list-item-dedented.bad.yaml:7:5: a list item at column 5, where a key is expected: indent it to column 7 to continue the list of line 6`,
	}},
	{"listen-addresses", []string{
		`../testdata/listen-addresses.bad.yaml:6:11: server: listen "127.0.0.1:99999" has port 99999, over 65535`,
		`../testdata/listen-addresses.bad.yaml:7:17: server: admin_listen "bad host:9090" has host "bad host", which is neither an IP address nor a host name`,
		`../testdata/listen-addresses.bad.yaml:9:43: pool "p": replica "a": url "http://10.0.0.1:99999" has port 99999, outside 1..65535`,
	}},
	{"listen-same-port", []string{
		`../testdata/listen-same-port.bad.yaml:5:17: server: admin_listen "127.0.0.1:8080" takes the port of listen ":8080": give the admin API a port of its own`,
	}},
	{"duration-overflow", []string{
		`../testdata/duration-overflow.bad.yaml:5:19: server: shutdown_grace: duration "9999999999999h" is out of range (at most 876000h, 100 years)`,
		`../testdata/duration-overflow.bad.yaml:9:29: pool "p": outlier: max_ejection: duration "2562047h" is over 876000h (100 years), the longest accepted (the gateway keeps deadlines as nanoseconds since 1970, which end in 2262)`,
	}},
	{"last-route-when", []string{
		`../testdata/last-route-when.bad.yaml:12:5: routes[1] "default": the last route must match every request (remove its when, or add a catch-all route after it)`,
	}},
	{"model-name-collides", []string{
		`../testdata/model-name-collides.bad.yaml:9:12: models[1]: "small" is already a pool or served model name`,
	}},
	{"no-routes", []string{
		`../testdata/no-routes.bad.yaml:7:9: at least one route is required`,
	}},
	{"replica-without-url", []string{
		`../testdata/replica-without-url.bad.yaml:8:9: pool "small": replica "small-b": url is required`,
	}},
	{"score-out-of-range", []string{
		`../testdata/score-out-of-range.bad.yaml:18:19: routes[0] "complex": score "complex": bounds are probabilities between 0 and 1, got >= 70`,
	}},
	{"score-without-comparison", []string{
		`../testdata/score-without-comparison.bad.yaml:18:9: routes[0] "complex": score "complex" needs a comparison such as {gte: 0.8}`,
	}},
	{"several", []string{
		`../testdata/several.bad.yaml:5:14: pool "small": unknown balancer "fastest" (known: round_robin, least_outstanding, p2c, kv_aware, affinity)`,
		`../testdata/several.bad.yaml:15:9: routes[0] "hard": pool "huge" is not defined (known: large, small)`,
		`../testdata/several.bad.yaml:19:23: routes[1] "long": fallback cycle: "large" is the route's own target`,
	}},
	{"split-weight-negative", []string{
		`../testdata/split-weight-negative.bad.yaml:15:14: routes[0] "default": split: weight of "large" must be positive, got -5`,
	}},
	{"split-weight-zero", []string{
		`../testdata/split-weight-zero.bad.yaml:13:32: routes[0] "default": split: weight of "large" must be positive, got 0`,
	}},
	{"syntax", []string{
		`../testdata/syntax.bad.yaml:7:1: ',' or '}' must be specified (is a { or [ on this or an earlier line left unclosed?)`,
	}},
	{"topology-node-shared", []string{
		`../testdata/topology-node-shared.bad.yaml:13:58: pool "large": replica "large-a": node "node-1" already serves replica small/small-a (set topology.shared_nodes: true to allow sharing)`,
	}},
	{"topology-ring-not-contiguous", []string{
		`../testdata/topology-ring-not-contiguous.bad.yaml:11:16: pool "large": replica "large-a": nodes [node-1 node-3] are not contiguous on the ring (ring order: node-1 → node-2 → node-3 → node-4)`,
	}},
	{"topology-ring-partitions", []string{
		`../testdata/topology-ring-partitions.bad.yaml:5:3: topology: a ring cannot be split into independent partitions; use fabric: switch`,
	}},
	{"topology-switch-spans-partitions", []string{
		`../testdata/topology-switch-spans-partitions.bad.yaml:14:16: pool "large": replica "large-a": nodes [node-2 node-3] span partitions ("a" and "b"); a replica's nodes must sit in one partition`,
	}},
	{"topology-undeclared-node", []string{
		`../testdata/topology-undeclared-node.bad.yaml:10:58: pool "small": replica "small-b": node "node-3" is not declared in topology.nodes`,
	}},
	{"undefined-pool-fallback", []string{
		`../testdata/undefined-pool-fallback.bad.yaml:14:23: routes[0] "default": pool "huge" is not defined (known: large, small)`,
	}},
	{"undefined-pool-split", []string{
		`../testdata/undefined-pool-split.bad.yaml:15:7: routes[0] "default": pool "larg" is not defined (known: large, small)`,
	}},
	{"undefined-pool-to", []string{
		`../testdata/undefined-pool-to.bad.yaml:14:9: routes[0] "hard": pool "huge" is not defined (known: large, small)`,
	}},
	{"unknown-balancer", []string{
		`../testdata/unknown-balancer.bad.yaml:5:14: pool "small": unknown balancer "fastest" (known: round_robin, least_outstanding, p2c, kv_aware, affinity)`,
	}},
	{"unknown-classifier-kind", []string{
		`../testdata/unknown-classifier-kind.bad.yaml:8:9: classifier: unknown kind "oracle" (known: model, heuristic)`,
	}},
	{"unknown-nested-keys", []string{
		`../testdata/unknown-nested-keys.bad.yaml:6:7: pool "small": health: unknown key "intervall" (known: path, interval, timeout, unhealthy_after, healthy_after, check_models, disabled)`,
		`../testdata/unknown-nested-keys.bad.yaml:8:7: pool "small": health: unknown key "timout" (known: path, interval, timeout, unhealthy_after, healthy_after, check_models, disabled)`,
	}},
	{"unknown-pool-key", []string{
		`../testdata/unknown-pool-key.bad.yaml:5:5: pool "small": unknown key "balancer" (known: model, balance, max_inflight, queue_timeout, share_reserve, connect_timeout, response_header_timeout, first_token_timeout, stream_idle_timeout, max_stream_duration, max_model_len, retries, api_key_env, memory, parameters, dtype, health, outlier, resume, scrape, affinity, replicas, discovery)`,
	}},
	{"unknown-route-key", []string{
		`../testdata/unknown-route-key.bad.yaml:10:5: routes[0] "default": unknown key "fallbacks" (known: name, when, to, split, fallback, spill, sticky, side)`,
	}},
	{"unknown-top-level-key", []string{
		`../testdata/unknown-top-level-key.bad.yaml:7:1: unknown key "routez" (known: version, server, topology, pools, classifier, models, session, control, capture, routes; x-* keys are ignored)`,
	}},
	{"unknown-when-key", []string{
		`../testdata/unknown-when-key.bad.yaml:14:7: routes[0] "tools": when: unknown key "tool_count" (known: class, score, model, tools, messages, prompt_tokens, stream, max_tokens, small_model, system_contains, tool_error, repeated_call, header, key, any, not)`,
	}},
	{"side-conditions", []string{
		`../testdata/side-conditions.bad.yaml:10:25: routes[0] "side": small_model needs a models entry with small: true`,
		`../testdata/side-conditions.bad.yaml:10:44: routes[0] "side": auto bounds are for score conditions only`,
		`../testdata/side-conditions.bad.yaml:14:50: routes[1] "titles": system_contains: an empty string matches every request`,
		`../testdata/side-conditions.bad.yaml:16:11: routes[1] "titles": side: expected true or false, got "maybe"`,
	}},
	{"version", []string{
		`../testdata/version.bad.yaml:1:10: version must be 1, got 2`,
	}},
	{"wrong-type-nested", []string{
		`../testdata/wrong-type-nested.bad.yaml:10:15: routes[0] "streaming": when: stream: expected true or false, got "yes"`,
	}},
	{"several-kinds", []string{
		`../testdata/several-kinds.bad.yaml:7:19: server: shutdown_grace: invalid duration "30 seconds" (use Go durations such as 250ms, 30s, 5m)`,
		`../testdata/several-kinds.bad.yaml:11:5: pool "small": unknown key "balanse" (known: model, balance, max_inflight, queue_timeout, share_reserve, connect_timeout, response_header_timeout, first_token_timeout, stream_idle_timeout, max_stream_duration, max_model_len, retries, api_key_env, memory, parameters, dtype, health, outlier, resume, scrape, affinity, replicas, discovery)`,
		`../testdata/several-kinds.bad.yaml:15:19: pool "large": max_inflight: expected an integer, got "lots"`,
		`../testdata/several-kinds.bad.yaml:23:19: routes[0] "hard": "compex" is not a classifier label (labels: simple, complex)`,
		`../testdata/several-kinds.bad.yaml:26:9: routes[1] "typo": pool "medium" is not defined (known: large, small)`,
	}},
	{"fit-too-small", []string{
		`../testdata/fit-too-small.bad.yaml:13:10: pool "glm": replica "glm-a": its model needs 470GB (memory) but its 4 node(s) give vLLM 460.8GB (128GB each at memory_utilization 0.9): give it at least 5 nodes`,
		`../testdata/fit-too-small.bad.yaml:23:12: pool "tiny": unknown dtype "fp9" (known: bf16, fp16, fp32, fp4, fp8, int4, int8, mxfp4, nvfp4)`,
	}},
	{"fit-shared-node", []string{
		`../testdata/fit-shared-node.bad.yaml:7:11: topology: node "spark-1" holds 200GB of model memory from the replicas sharing it, over the 115.2GB vLLM may use of it`,
	}},
	{"tabs", []string{
		`../testdata/tabs.bad.yaml:4:1: a tab character: YAML indents with spaces only (replace the tabs on this line)`,
	}},
	{"explicit-zero", []string{
		`../testdata/explicit-zero.bad.yaml:5:17: server: body_timeout must be positive (it bounds a request body that never arrives)`,
		`../testdata/explicit-zero.bad.yaml:6:24: server: read_header_timeout must be positive (it bounds a client that never sends its headers)`,
		`../testdata/explicit-zero.bad.yaml:7:17: server: idle_timeout must be positive (it closes idle keep-alive connections)`,
		`../testdata/explicit-zero.bad.yaml:11:22: pool "p": connect_timeout must be positive`,
		`../testdata/explicit-zero.bad.yaml:12:30: pool "p": response_header_timeout must be positive (give a long one, such as 1h, for long generations)`,
		`../testdata/explicit-zero.bad.yaml:13:24: pool "p": health.interval must be positive (disabled: true turns probes off)`,
		`../testdata/explicit-zero.bad.yaml:13:37: pool "p": health.timeout must be positive`,
		`../testdata/explicit-zero.bad.yaml:13:58: pool "p": health.unhealthy_after must be at least 1`,
		`../testdata/explicit-zero.bad.yaml:13:76: pool "p": health.healthy_after must be at least 1`,
		`../testdata/explicit-zero.bad.yaml:14:24: pool "p": scrape.interval must be positive`,
		`../testdata/explicit-zero.bad.yaml:14:37: pool "p": scrape.timeout must be positive`,
		`../testdata/explicit-zero.bad.yaml:14:52: pool "p": scrape.staleness must be positive`,
		`../testdata/explicit-zero.bad.yaml:15:30: pool "p": outlier.base_ejection must be positive (consecutive_5xx: 0 and consecutive_connect_failures: 0 turn ejections off)`,
		`../testdata/explicit-zero.bad.yaml:15:48: pool "p": outlier.max_ejection must be positive`,
		`../testdata/explicit-zero.bad.yaml:19:56: pool "d": discovery: interval must be at least 100ms`,
		`../testdata/explicit-zero.bad.yaml:20:61: topology: memory_utilization must be within (0, 1]`,
		`../testdata/explicit-zero.bad.yaml:24:12: classifier: timeout must be positive`,
		`../testdata/explicit-zero.bad.yaml:25:16: classifier: concurrency must be at least 1`,
		`../testdata/explicit-zero.bad.yaml:26:16: classifier: cache.ttl must be positive (size: 0 turns the cache off)`,
		`../testdata/explicit-zero.bad.yaml:27:23: classifier: breaker.cooldown must be positive (failures: 0 turns the breaker off)`,
		`../testdata/explicit-zero.bad.yaml:28:16: session: ttl must be positive`,
		`../testdata/explicit-zero.bad.yaml:28:26: session: size must be at least 1`,
		`../testdata/explicit-zero.bad.yaml:30:41: control.share: window must be at least 1s`,
		`../testdata/explicit-zero.bad.yaml:30:58: control.share: utilization must be within (0, 1]`,
	}},
	{"pool-several-mistakes", []string{
		`../testdata/pool-several-mistakes.bad.yaml:7:5: pool "small": unknown key "balancer" (known: model, balance, max_inflight, queue_timeout, share_reserve, connect_timeout, response_header_timeout, first_token_timeout, stream_idle_timeout, max_stream_duration, max_model_len, retries, api_key_env, memory, parameters, dtype, health, outlier, resume, scrape, affinity, replicas, discovery)`,
		`../testdata/pool-several-mistakes.bad.yaml:8:20: pool "small": health.path "health" must start with /`,
		`../testdata/pool-several-mistakes.bad.yaml:9:17: pool "small": replica "a": url is required`,
	}},
	{"refused-values", []string{
		`../testdata/refused-values.bad.yaml:6:61: api key "ci": models is empty (give "*" or names; without models the key may use every model)`,
		`../testdata/refused-values.bad.yaml:7:61: topology: memory_utilization must be within (0, 1]`,
		`../testdata/refused-values.bad.yaml:10:75: classifier: max_input_chars must be at least 64`,
	}},
	// A part with values that do not decode is checked without them: the
	// pool's semantic mistakes are reported with its wrong type and its
	// duplicate key (before, only the duplicate key), and nothing that
	// follows from a value left out (large's missing model, listed's
	// missing target, base_ejection over the default max_ejection).
	{"mixed-mistakes", []string{
		`../testdata/mixed-mistakes.bad.yaml:7:19: pool "small": max_inflight: expected an integer, got "ten"`,
		`../testdata/mixed-mistakes.bad.yaml:8:14: pool "small": unknown balancer "fastest" (known: round_robin, least_outstanding, p2c, kv_aware, affinity)`,
		`../testdata/mixed-mistakes.bad.yaml:9:20: pool "small": health.path "health" must start with /`,
		`../testdata/mixed-mistakes.bad.yaml:10:49: pool "small": outlier: max_ejection: invalid duration "soon" (use Go durations such as 250ms, 30s, 5m)`,
		`../testdata/mixed-mistakes.bad.yaml:12:5: pool "small": duplicate key "model" (first at line 6)`,
		`../testdata/mixed-mistakes.bad.yaml:14:12: pool "large": model: expected a string, got a list`,
		`../testdata/mixed-mistakes.bad.yaml:18:9: routes[0] "listed": to: expected a string, got a list`,
		`../testdata/mixed-mistakes.bad.yaml:21:16: routes[1] "default": pool "medium" is not defined (known: large, small)`,
	}},
	// Each repeated key once (the decoder, shown the part again to find
	// its wrong types, would report the replica's a second time), a
	// split's own repeated pool too.
	{"repeated-keys", []string{
		`../testdata/repeated-keys.bad.yaml:6:28: pool "small": health: duplicate key "interval" (first at line 6)`,
		`../testdata/repeated-keys.bad.yaml:6:51: pool "small": health: timeout: invalid duration "x" (use Go durations such as 250ms, 30s, 5m)`,
		`../testdata/repeated-keys.bad.yaml:8:46: pool "small": replicas[0]: duplicate key "name" (first at line 8)`,
		`../testdata/repeated-keys.bad.yaml:14:23: routes[0] "split": split: duplicate pool "small"`,
		`../testdata/repeated-keys.bad.yaml:16:5: routes[0] "split": duplicate key "to" (first at line 15)`,
	}},
	{"wrong-type", []string{
		`../testdata/wrong-type.bad.yaml:5:19: pool "small": max_inflight: expected an integer, got "lots"`,
	}},
}

// TestLoadBad loads every badFixtures entry.
func TestLoadBad(t *testing.T) {
	tests := badFixtures
	covered := map[string]bool{}
	for _, tc := range tests {
		covered[tc.name] = true
		t.Run(tc.name, func(t *testing.T) {
			path := "../testdata/" + tc.name + ".bad.yaml"
			cfg, err := policy.LoadFile(path, policytest.LoadOptions)
			if err == nil {
				t.Fatalf("LoadFile(%s) = %+v, want errors", path, cfg)
			}
			if diff := cmp.Diff(strings.Join(tc.want, "\n"), err.Error()); diff != "" {
				t.Errorf("LoadFile(%s) errors (-want +got):\n%s", path, diff)
			}
			var es policy.Errors
			if !errors.As(err, &es) || len(es) != len(tc.want) {
				t.Fatalf("LoadFile(%s) = %T with %d entries, want policy.Errors with %d", path, err, len(es), len(tc.want))
			}
			for _, e := range es {
				if e.File != path {
					t.Errorf("Error.File = %q, want %q", e.File, path)
				}
			}
		})
	}

	// Every fixture is in the table, so none is silently untested.
	files, err := filepath.Glob("../testdata/*.bad.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if name := strings.TrimSuffix(filepath.Base(f), ".bad.yaml"); !covered[name] {
			t.Errorf("%s has no entry in the table", f)
		}
	}
}

func TestLoadGood(t *testing.T) {
	files, err := filepath.Glob("../testdata/*.good.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 2 {
		t.Fatalf("found %d good fixtures, want at least minimal and full", len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			cfg, err := policy.LoadFile(f, policytest.LoadOptions)
			if err != nil {
				t.Fatalf("LoadFile(%s):\n%v", f, err)
			}
			if cfg.File != f {
				t.Errorf("Config.File = %q, want %q", cfg.File, f)
			}
			// A loaded config always compiles into a policy that decides.
			d := routing.New(cfg).Decide(&routing.Request{}, func() routing.Classification {
				return routing.Classification{Label: "simple"}
			}, false)
			if d.Route == "" || len(d.Pools) == 0 {
				t.Errorf("Decide on an empty request = %+v, want a route and a pool", d)
			}
		})
	}
}

func TestLoadDefaults(t *testing.T) {
	cfg := loadFile(t, "../testdata/minimal.good.yaml")

	type server struct {
		Listen, AdminListen                           string
		MaxBodyBytes                                  int64
		ShutdownGrace, ReadHeaderTimeout, IdleTimeout time.Duration
		APIKeys                                       int
	}
	s := cfg.Server
	if diff := cmp.Diff(server{
		Listen:            "0.0.0.0:8080",
		AdminListen:       "127.0.0.1:9090",
		MaxBodyBytes:      8388608, // 8MiB
		ShutdownGrace:     30 * time.Second,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
	}, server{
		s.Listen, s.AdminListen, int64(s.MaxBodyBytes),
		s.ShutdownGrace.Std(), s.ReadHeaderTimeout.Std(), s.IdleTimeout.Std(), len(s.APIKeys),
	}); diff != "" {
		t.Errorf("server defaults (-want +got):\n%s", diff)
	}

	type pool struct {
		Name, Balance, ReplicaName, ReplicaURL      string
		QueueTimeout, ConnectTimeout, HeaderTimeout time.Duration
		Retries                                     int
		HealthPath                                  string
		HealthInterval, HealthTimeout               time.Duration
		UnhealthyAfter, HealthyAfter, AffinityDepth int
		LoadFactor                                  float64
	}
	if len(cfg.Pools) != 1 || len(cfg.Pools[0].Replicas) != 1 {
		t.Fatalf("pools = %v, want one pool with one replica", cfg.Pools.Names())
	}
	p, r := cfg.Pools[0], cfg.Pools[0].Replicas[0]
	if diff := cmp.Diff(pool{
		Name: "small", Balance: "least_outstanding",
		ReplicaName: "small-0", ReplicaURL: "http://10.0.0.1:8000",
		QueueTimeout: 5 * time.Second, ConnectTimeout: 2 * time.Second, HeaderTimeout: 5 * time.Minute,
		Retries:    2,
		HealthPath: "/health", HealthInterval: 5 * time.Second, HealthTimeout: time.Second,
		UnhealthyAfter: 3, HealthyAfter: 2, AffinityDepth: 2, LoadFactor: 1.25,
	}, pool{
		p.Name, p.Balance, r.Name, r.Parsed.String(),
		p.QueueTimeout.Std(), p.ConnectTimeout.Std(), p.ResponseHeaderTimeout.Std(),
		p.Retries,
		p.Health.Path, p.Health.Interval.Std(), p.Health.Timeout.Std(),
		p.Health.UnhealthyAfter, p.Health.HealthyAfter, p.Affinity.Depth, p.Affinity.LoadFactor,
	}); diff != "" {
		t.Errorf("pool defaults (-want +got):\n%s", diff)
	}

	if diff := cmp.Diff([]policy.Model{{Name: "auto", Route: "policy"}}, cfg.Models); diff != "" {
		t.Errorf("models default (-want +got):\n%s", diff)
	}
	if cfg.Classifier != nil || cfg.Session != nil || cfg.Topology != nil {
		t.Errorf("optional sections = %+v, %+v, %+v, want nil", cfg.Classifier, cfg.Session, cfg.Topology)
	}
}

func TestLoadFull(t *testing.T) {
	cfg := loadFile(t, "../testdata/full.good.yaml")

	if got, want := int64(cfg.Server.MaxBodyBytes), int64(16<<20); got != want {
		t.Errorf("max_body_bytes = %d, want %d", got, want)
	}
	if got, want := cfg.Server.ShutdownGrace.Std(), 45*time.Second; got != want {
		t.Errorf("shutdown_grace = %v, want %v", got, want)
	}
	if got, want := cfg.Server.IdleTimeout.Std(), 2*time.Minute; got != want {
		t.Errorf("idle_timeout = %v, want %v", got, want)
	}

	type key struct {
		Name, Secret string
		Models       []string
		RPS          float64
		Burst        int
	}
	var keys []key
	for _, k := range cfg.Server.APIKeys {
		kk := key{Name: k.Name, Secret: string(k.Secret), Models: k.Models}
		if k.Rate != nil {
			kk.RPS, kk.Burst = k.Rate.RPS, k.Rate.Burst
		}
		keys = append(keys, kk)
	}
	if diff := cmp.Diff([]key{
		{Name: "agents", Secret: "sk-agents", Models: []string{"*"}, RPS: 50, Burst: 100},
		{Name: "ci", Secret: "sk-ci", Models: []string{"auto", "minicpm"}},
	}, keys); diff != "" {
		t.Errorf("api keys (-want +got):\n%s", diff)
	}
	if s := cfg.Server.APIKeys[0].Secret.String(); s != "<redacted>" {
		t.Errorf("Secret.String() = %q, want it redacted", s)
	}

	if diff := cmp.Diff([]string{"minicpm", "qwen"}, cfg.Pools.Names()); diff != "" {
		t.Errorf("pool order (-want +got):\n%s", diff)
	}
	mini, qwen := cfg.Pools.Get("minicpm"), cfg.Pools.Get("qwen")
	if mini.Retries != 0 {
		t.Errorf("minicpm retries = %d, want an explicit 0 kept", mini.Retries)
	}
	if got, want := mini.ConnectTimeout.Std(), 500*time.Millisecond; got != want {
		t.Errorf("minicpm connect_timeout = %v, want %v", got, want)
	}
	if got, want := mini.Scrape.Interval.Std(), 100*time.Millisecond; got != want {
		t.Errorf("minicpm scrape.interval = %v, want %v", got, want)
	}
	if got := string(mini.APIKey); got != "sk-vllm" {
		t.Errorf("minicpm api key = %q, want the value of VLLM_KEY", got)
	}
	if got, want := mini.Replicas[1].Parsed.String(), "http://spark-08:8000"; got != want {
		t.Errorf("replica url = %q, want %q (trailing slash trimmed)", got, want)
	}
	if got, want := qwen.Affinity.LoadFactor, 1.5; got != want {
		t.Errorf("qwen affinity.load_factor = %v, want %v", got, want)
	}
	if diff := cmp.Diff([]string{"spark-05", "spark-06"}, qwen.Replicas[2].Nodes); diff != "" {
		t.Errorf("qwen-c nodes (-want +got):\n%s", diff)
	}

	cl := cfg.Classifier
	if diff := cmp.Diff([]string{"simple", "complex"}, cl.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"complex": "hard multi-step"}, cl.Descriptions); diff != "" {
		t.Errorf("label descriptions (-want +got):\n%s", diff)
	}
	if got, want := cl.Timeout.Std(), 250*time.Millisecond; got != want {
		t.Errorf("classifier timeout = %v, want %v", got, want)
	}
	if got, want := cl.Cache.TTL.Std(), 5*time.Minute; got != want {
		t.Errorf("classifier cache.ttl = %v, want %v", got, want)
	}
	if cl.OnError != "complex" || !cl.GuidedChoice || cl.Concurrency != 8 {
		t.Errorf("classifier = %+v, want on_error complex, guided_choice, concurrency 8", cl)
	}
	if got, want := cfg.Session.TTL.Std(), 15*time.Minute; got != want || cfg.Session.Header != "X-Session-Id" {
		t.Errorf("session = %+v, want header X-Session-Id and ttl %v", cfg.Session, want)
	}

	var routes []string
	for _, r := range cfg.Routes {
		routes = append(routes, r.Name)
	}
	if diff := cmp.Diff([]string{"tool-heavy", "long", "ci", "confident-complex", "complex", "experiment", "default"}, routes); diff != "" {
		t.Errorf("route order (-want +got):\n%s", diff)
	}
	exp := cfg.Routes[5]
	if diff := cmp.Diff(policy.Split{{Pool: "qwen", Weight: 25}, {Pool: "minicpm", Weight: 75}}, exp.Split); diff != "" {
		t.Errorf("experiment split (-want +got):\n%s", diff)
	}
	if exp.Sticky {
		t.Error("experiment sticky = true, want false")
	}
	if !cfg.Routes[0].Sticky {
		t.Error("tool-heavy sticky = false, want the default, true")
	}
	if diff := cmp.Diff([]string{"b", "c"}, []string(exp.When.Header["X-Experiment"])); diff != "" {
		t.Errorf("experiment header values (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(&policy.Spill{To: "minicpm", WhenQueueOver: 8}, cfg.Routes[4].Spill); diff != "" {
		t.Errorf("complex spill (-want +got):\n%s", diff)
	}
	long := cfg.Routes[1].When
	if len(long.Any) != 2 || long.Not == nil || long.Not.Stream == nil || *long.Not.Stream {
		t.Errorf("long when = %+v, want any of two and not stream: false", long)
	}
}

func loadFile(t *testing.T, path string) *policy.Config {
	t.Helper()
	cfg, err := policy.LoadFile(path, policytest.LoadOptions)
	if err != nil {
		t.Fatalf("LoadFile(%s):\n%v", path, err)
	}
	return cfg
}

// TestLoadSkipEnv: with SkipEnv a config whose key_env and api_key_env
// variables are unset validates (no secrets needed, as in CI); without
// it, each unset variable is reported.
func TestLoadSkipEnv(t *testing.T) {
	src := []byte(`
version: 1
server:
  api_keys: [{name: ci, key_env: SWITCHYARD_TEST_UNSET_KEY}]
pools:
  p: {model: m, api_key_env: SWITCHYARD_TEST_UNSET_POOL, replicas: [{name: a, url: "http://127.0.0.1:1"}]}
routes:
  - name: default
    to: p
`)
	reg := policytest.LoadOptions
	reg.Getenv = func(string) string { return "" }
	_, err := policy.Load("env.yaml", src, reg)
	var es policy.Errors
	if !errors.As(err, &es) || len(es) != 2 {
		t.Fatalf("without SkipEnv: %v, want the two unset variables", err)
	}
	reg.SkipEnv = true
	cfg, err := policy.Load("env.yaml", src, reg)
	if err != nil {
		t.Fatalf("with SkipEnv: %v", err)
	}
	if cfg.Server.APIKeys[0].Secret != "" || cfg.Pools.Get("p").APIKey != "" {
		t.Errorf("with SkipEnv, secrets were read")
	}
}

// TestRenderRoundTrip: what /admin/config serves (Render) loads back to the
// same config, for every good fixture and every example policy.
func TestRenderRoundTrip(t *testing.T) {
	files, _ := filepath.Glob("../testdata/*.good.yaml")
	examples, _ := filepath.Glob("../examples/policies/*.yaml")
	files = append(files, examples...)
	reg := policytest.LoadOptions
	reg.Getenv = func(k string) string { return "secret-value-of-" + k } // one value per variable: keys must differ
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			cfg, err := policy.LoadFile(f, reg)
			if err != nil {
				t.Fatal(err)
			}
			out, err := policy.Render(cfg)
			if err != nil {
				t.Fatal(err)
			}
			again, err := policy.Load("rendered.yaml", out, reg)
			if err != nil {
				t.Fatalf("the rendered config does not load:\n%v\n%s", err, out)
			}
			if diff := cmp.Diff(cfg, again, cmpopts.IgnoreFields(policy.Config{}, "File"), cmpopts.IgnoreUnexported(policy.Config{})); diff != "" {
				t.Errorf("round trip changed the config (-file +rendered):\n%s", diff)
			}
			if strings.Contains(string(out), "secret") {
				t.Errorf("a secret leaked:\n%s", out)
			}
		})
	}
}

// TestPlaceholderSecretsRefused: serve does not start with the example
// manifests' placeholder admin token (or an API key left as a
// placeholder); before, it accepted REPLACE-ME-… as the token.
func TestPlaceholderSecretsRefused(t *testing.T) {
	src := `version: 1
server:
  admin_token_env: TOK
  api_keys: [{name: a, key_env: KEY}]
pools:
  p: {model: m, replicas: [{name: r, url: "http://127.0.0.1:1"}]}
routes:
  - {name: d, to: p}
`
	reg := policytest.LoadOptions
	reg.Getenv = func(k string) string {
		return map[string]string{"TOK": "REPLACE-ME-with-a-long-random-token", "KEY": "replace-me"}[k]
	}
	_, err := policy.Load("p.yaml", []byte(src), reg)
	if err == nil || !strings.Contains(err.Error(), "p.yaml:3:") || !strings.Contains(err.Error(), "placeholder") || !strings.Contains(err.Error(), `api key "a"`) {
		t.Fatalf("err = %v", err)
	}
}

// TestCredentialsRedacted: a password written in a replica URL is refused
// without being repeated (before, validate echoed it).
func TestCredentialsRedacted(t *testing.T) {
	for _, u := range []string{"http://admin:hunter2@10.0.0.5:8000", "http://admin:hunter2@[bad", "ftp://u:hunter2@h"} {
		src := "version: 1\npools:\n  p: {model: m, replicas: [{name: r, url: \"" + u + "\"}]}\nroutes:\n  - {name: d, to: p}\n"
		_, err := policy.Load("p.yaml", []byte(src), policytest.LoadOptions)
		if err == nil || strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), "p.yaml:3:") {
			t.Errorf("%s: %v", u, err)
		}
	}
}

// TestLoadExplicitZero: an explicit 0 that turns something off is kept as
// written; before, most of these came back as their defaults (write_timeout
// 60s, shutdown_grace 30s, queue_timeout 5s). The zeros refused are in
// testdata/explicit-zero.bad.yaml.
func TestLoadExplicitZero(t *testing.T) {
	cfg := loadFile(t, "../testdata/explicit-zero.good.yaml")
	s, p, cl := cfg.Server, cfg.Pools.Get("p"), cfg.Classifier
	got := map[string]int64{
		"server.write_timeout":                 int64(s.WriteTimeout),
		"server.shutdown_grace":                int64(s.ShutdownGrace),
		"server.drain_delay":                   int64(s.DrainDelay),
		"server.max_connections":               int64(s.MaxConnections),
		"queue_timeout":                        int64(p.QueueTimeout),
		"share_reserve":                        int64(p.ShareReserve),
		"first_token_timeout":                  int64(p.FirstTokenTimeout),
		"stream_idle_timeout":                  int64(p.StreamIdleTimeout),
		"max_stream_duration":                  int64(p.MaxStreamDuration),
		"max_inflight":                         int64(p.MaxInflight),
		"retries":                              int64(p.Retries),
		"outlier.consecutive_5xx":              int64(p.Outlier.Consecutive5xx),
		"outlier.consecutive_connect_failures": int64(p.Outlier.ConsecutiveConnectFailures),
		"outlier.max_ejection_percent":         int64(p.Outlier.MaxEjectionPercent),
		"classifier.cache.size":                int64(cl.Cache.Size),
		"classifier.breaker.failures":          int64(cl.Breaker.Failures),
	}
	for key, v := range got {
		if v != 0 {
			t.Errorf("%s = %d, want the explicit 0", key, v)
		}
	}
	// The keys not written keep their defaults.
	if s.BodyTimeout.Std() != policy.DefaultBodyTimeout || p.ConnectTimeout.Std() != policy.DefaultConnectTimeout || p.Health.Interval.Std() != policy.DefaultHealthInterval {
		t.Errorf("defaults lost: body_timeout %v, connect_timeout %v, health.interval %v", s.BodyTimeout.Std(), p.ConnectTimeout.Std(), p.Health.Interval.Std())
	}
}

// TestLoadDerivedDefaults: outlier.max_ejection, when not given, is at
// least base_ejection; given, it is what the file says (and checked).
func TestLoadDerivedDefaults(t *testing.T) {
	src := "version: 1\npools:\n  p: {model: m, outlier: {base_ejection: 5m}, replicas: [{url: \"http://127.0.0.1:1\"}]}\nroutes:\n  - {name: d, to: p}\n"
	cfg := policytest.Load(t, src)
	if got := cfg.Pools.Get("p").Outlier.MaxEjection.Std(); got != 5*time.Minute {
		t.Errorf("max_ejection = %v, want base_ejection's 5m", got)
	}
	src = strings.Replace(src, "base_ejection: 5m", "base_ejection: 5m, max_ejection: 2m", 1)
	if _, err := policy.Load("p.yaml", []byte(src), policytest.LoadOptions); err == nil || !strings.Contains(err.Error(), "p.yaml:3:27: pool \"p\": outlier.base_ejection 5m0s is longer than max_ejection 2m0s") {
		t.Errorf("explicit max_ejection under base_ejection: %v", err)
	}
}

// TestLoadModelsEmpty: models: [] is no extra names, not the default auto.
func TestLoadModelsEmpty(t *testing.T) {
	cfg := policytest.Load(t, "version: 1\nmodels: []\npools:\n  p: {model: m, replicas: [{url: \"http://127.0.0.1:1\"}]}\nroutes:\n  - {name: d, to: p}\n")
	if len(cfg.Models) != 0 {
		t.Errorf("models = %+v, want none", cfg.Models)
	}
}

// TestLoadSecrets: every failure of the secrets step, reported in the same
// run as a validation problem (a negative retries), each at its key.
func TestLoadSecrets(t *testing.T) {
	src := `version: 1
server:
  admin_token_env: TOK
  response_id_secret_env: SHORT
  api_keys:
    - {name: a, key_env: UNSET}
    - {name: b, key_env: PLACEHOLDER}
pools:
  p: {model: m, retries: -1, api_key_env: UNSET, replicas: [{url: "http://127.0.0.1:1"}]}
routes:
  - {name: d, to: p}
`
	env := map[string]string{"TOK": "REPLACE-ME", "SHORT": "0123456789", "PLACEHOLDER": "replace-me-now"}
	reg := policytest.LoadOptions
	reg.Getenv = func(k string) string { return env[k] }
	_, err := policy.Load("s.yaml", []byte(src), reg)
	want := []string{
		`s.yaml:3:20: server: admin_token_env: environment variable TOK holds the example manifests' placeholder "REPLACE-ME"; set a long random token (openssl rand -hex 32)`,
		`s.yaml:4:27: server: response_id_secret_env: environment variable SHORT must hold at least 16 characters`,
		`s.yaml:6:26: api key "a": environment variable UNSET is not set or empty`,
		`s.yaml:7:26: api key "b": environment variable PLACEHOLDER holds a placeholder ("replace-me-now"); set the real key`,
		`s.yaml:9:26: pool "p": retries must not be negative`,
		`s.yaml:9:43: pool "p": environment variable UNSET is not set or empty`,
	}
	if err == nil {
		t.Fatal("Load succeeded, want errors")
	}
	if diff := cmp.Diff(strings.Join(want, "\n"), err.Error()); diff != "" {
		t.Errorf("errors (-want +got):\n%s", diff)
	}
	reg.SkipEnv = true
	_, err = policy.Load("s.yaml", []byte(src), reg)
	if err == nil || strings.Contains(err.Error(), "environment variable") {
		t.Errorf("with SkipEnv: %v, want only the retries problem", err)
	}
}

// TestWithListen: the listener override returns a copy and leaves the
// loaded config as it was.
func TestWithListen(t *testing.T) {
	cfg := policytest.Load(t, "version: 1\npools:\n  p: {model: m, replicas: [{url: \"http://127.0.0.1:1\"}]}\nroutes:\n  - {name: d, to: p}\n")
	got := cfg.WithListen("127.0.0.1:1", "")
	if got.Server.Listen != "127.0.0.1:1" || got.Server.AdminListen != policy.DefaultAdminListen {
		t.Errorf("WithListen = %s, %s", got.Server.Listen, got.Server.AdminListen)
	}
	if cfg.Server.Listen != policy.DefaultListen {
		t.Errorf("WithListen changed the original: listen %s", cfg.Server.Listen)
	}
}

// TestYAMLForms: quoted comparison keys, YAML integer forms and an explicit
// zero cache size are read as written.
func TestYAMLForms(t *testing.T) {
	cfg, err := policy.Load("forms.yaml", []byte(`
version: 1
pools:
  a: {model: a, replicas: [{name: a1, url: "http://127.0.0.1:1"}]}
  b: {model: b, replicas: [{name: b1, url: "http://127.0.0.1:2"}]}
classifier: {kind: heuristic, labels: [simple, complex], cache: {size: 0}}
routes:
  - name: tools
    when: {tools: {"gte": 0x2}}
    to: b
  - name: split
    split: {a: 0x10, b: 1_000}
`), policytest.LoadOptions)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Classifier.Cache.Size; got != 0 {
		t.Errorf("cache size %d, want 0 (disabled)", got)
	}
	if gte := cfg.Routes[0].When.Tools.GTE; gte == nil || *gte != 2 {
		t.Errorf("tools gte %v, want 2", gte)
	}
	if w := cfg.Routes[1].Split; w[0].Weight != 16 || w[1].Weight != 1000 {
		t.Errorf("split weights %+v, want 16 and 1000", w)
	}
}

// TestAnchorsAcrossSections: aliases resolve anchors of other sections,
// and merge keys fill what a mapping does not set itself.
func TestAnchorsAcrossSections(t *testing.T) {
	cfg, err := policy.LoadFile("../testdata/anchors.good.yaml", policytest.LoadOptions)
	if err != nil {
		t.Fatal(err)
	}
	a, b := cfg.Pools.Get("a"), cfg.Pools.Get("b")
	if a.Health.Interval.Std() != 3*time.Second || b.Health.Interval.Std() != 9*time.Second || b.Health.Timeout.Std() != time.Second {
		t.Errorf("health a %+v b %+v", a.Health, b.Health)
	}
	if b.Model != "org/b" || b.Balance != "round_robin" || len(b.Replicas) != 1 || b.Replicas[0].URL != "http://127.0.0.1:8001" {
		t.Errorf("pool b %+v", *b)
	}
}
