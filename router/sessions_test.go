package router_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/switchyard/switchyard/vllmsim"
)

// sessionsYAML routes long conversations to big, the rest by a 50/50
// split, with affinity inside each pool and a classifier that reads the
// request.
const sessionsYAML = `
version: 1
pools:
  big:
    model: Qwen/Qwen3.8-Flash-Next
    balance: affinity
    health: {disabled: true}
    replicas: [{name: big-a, url: "{{b1}}"}, {name: big-b, url: "{{b2}}"}, {name: big-c, url: "{{b3}}"}]
  small:
    model: openbmb/MiniCPM5-2B
    balance: affinity
    health: {disabled: true}
    replicas: [{name: small-a, url: "{{s1}}"}, {name: small-b, url: "{{s2}}"}]
classifier:
  kind: model
  pool: small
  labels: [simple, complex]
  timeout: 2s
session: {ttl: 10m}
routes:
  - name: hard
    when: {class: complex}
    to: big
  - name: default
    split: {big: 1, small: 1}
`

// turn is the body of turn n (from 1) of conversation c: the whole history,
// as agents send it, with a tool call and result each step.
func turn(c, n int) string {
	msgs := []map[string]any{
		{"role": "system", "content": fmt.Sprintf("You are agent %d. Use the tools.", c)},
		{"role": "user", "content": fmt.Sprintf("Task %d: what is the weather in city %d?", c, c)},
	}
	for i := 1; i < n; i++ {
		msgs = append(msgs,
			map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{"id": fmt.Sprint("call", i), "type": "function",
				"function": map[string]any{"name": "weather", "arguments": `{"city":"x"}`}}}},
			map[string]any{"role": "tool", "tool_call_id": fmt.Sprint("call", i), "content": "sunny, 21C"})
	}
	b, _ := json.Marshal(map[string]any{"model": "auto", "max_tokens": 4, "messages": msgs})
	return string(b)
}

// TestSessionsAgreeAcrossInstances: three gateways with the same config
// and no shared state. A conversation whose turns go to different
// instances keeps one pool and one replica while each turn, judged on its
// own evidence (a routine tool result), takes the same route: the
// implicit id (the canonical opening) and a split's pick by its hash are
// the same on every instance. Sessions spread over both pools of the
// split.
// Agents' own ids (Codex's session-id, Claude Code's
// x-claude-code-session-id, prompt_cache_key) identify a conversation too.
func TestSessionsAgreeAcrossInstances(t *testing.T) {
	urls := map[string]string{}
	for _, n := range []string{"b1", "b2", "b3"} {
		urls[n] = startReplica(t, fast("Qwen/Qwen3.8-Flash-Next")).Srv.URL
	}
	for _, n := range []string{"s1", "s2"} {
		urls[n] = startReplica(t, fast("openbmb/MiniCPM5-2B"), vllmsim.WithChooser(vllmsim.DefaultChooser)).Srv.URL
	}
	var gws []*gateway
	for range 3 {
		gws = append(gws, startGateway(t, loadConfig(t, sessionsYAML, urls, nil)))
	}
	send := func(gw *gateway, body string, h map[string]string) (pool, replica string) {
		t.Helper()
		resp, b := post(t, gw.API.URL+"/v1/chat/completions", body, h)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
		return resp.Header.Get("X-Switchyard-Pool"), resp.Header.Get("X-Switchyard-Replica")
	}
	pools := map[string]int{}
	for c := range 16 {
		pool, rep := send(gws[0], turn(c, 1), nil)
		pools[pool]++
		for n := 2; n <= 4; n++ {
			gw := gws[(n-1)%3]
			if p, r := send(gw, turn(c, n), nil); p != pool || r != rep {
				t.Errorf("conversation %d turn %d on instance %d: %s/%s, want %s/%s as its first turn", c, n, (n-1)%3, p, r, pool, rep)
			}
		}
	}
	if pools["big"] == 0 || pools["small"] == 0 {
		t.Errorf("16 conversations over the split: %v, want both pools", pools)
	}

	// An explicit id names the conversation even when its opening changes
	// (a client that rewrites its system prompt between turns).
	for _, h := range []string{"session-id", "x-claude-code-session-id"} {
		for c := range 4 {
			id := map[string]string{h: fmt.Sprint(h, c)}
			pool, rep := send(gws[0], turn(100+c, 1), id)
			if p, r := send(gws[1], turn(200+c, 3), id); p != pool || r != rep {
				t.Errorf("%s %d: %s/%s on another instance, want %s/%s", h, c, p, r, pool, rep)
			}
		}
	}
	withKey := func(body, key string) string {
		return strings.Replace(body, `"model":"auto"`, `"model":"auto","prompt_cache_key":"`+key+`"`, 1)
	}
	pool, rep := send(gws[2], withKey(turn(300, 1), "codex-1"), nil)
	if p, r := send(gws[0], withKey(turn(301, 2), "codex-1"), nil); p != pool || r != rep {
		t.Errorf("prompt_cache_key: %s/%s on another instance, want %s/%s", p, r, pool, rep)
	}
}
