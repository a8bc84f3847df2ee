package router_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/switchyard/switchyard/vllmsim"
)

// sideYAML is the reference policy's shape: side requests (no tools and
// a short answer budget, or the client's own small model) to the small
// pool on their own; then the hard turns; then the small pool. {{rules}}
// are the hard rules: a tool count, or a class.
const sideYAML = `
version: 1
pools:
  big: {model: Qwen/Qwen3.8-Flash-Next, health: {disabled: true}, replicas: [{name: big-a, url: "{{big}}"}]}
  small: {model: openbmb/MiniCPM5-2B, health: {disabled: true}, replicas: [{name: small-a, url: "{{small}}"}]}
classifier: {kind: model, pool: small, labels: [simple, complex], timeout: 5s}
models:
  - {name: auto, route: policy}
  - {name: "*-haiku-*", route: policy, small: true}
session: {header: X-Session-Id, ttl: 10m}
routes:
{{side}}
{{rules}}
  - name: default
    to: small
    fallback: [big]
`

const sideRoute = `  - name: side
    when: {any: [{tools: 0, max_tokens: {lte: 4096}}, {small_model: true}]}
    to: small
    side: true`

// titleRequest is shaped like OpenCode's title request: no tools, a
// system prompt of about 2 kB, max_tokens 1024, the session's id.
func titleRequest(stream bool) string {
	system := "You are a title generator. You output ONLY a thread title, nothing else. " +
		strings.Repeat("Keep the title short, in the language of the conversation, without quotes or punctuation at the end. ", 20)
	b, _ := json.Marshal(map[string]any{"model": "auto", "max_tokens": 1024, "stream": stream, "messages": []any{
		map[string]any{"role": "system", "content": system},
		map[string]any{"role": "user", "content": "Generate a title for this conversation:\nrename the helper in parser.go"},
	}})
	return string(b)
}

// agentTurn is step n (from 1) of a coding agent's loop: ten tools, the
// task, and n-1 tool calls with their results.
func agentTurn(n int, stream bool) string {
	var tools []any
	for _, name := range []string{"bash", "read", "write", "edit", "glob", "grep", "list", "webfetch", "todowrite", "task"} {
		tools = append(tools, map[string]any{"type": "function", "function": map[string]any{"name": name, "description": "the " + name + " tool",
			"parameters": map[string]any{"type": "object", "properties": map[string]any{"path": map[string]any{"type": "string"}}}}})
	}
	msgs := []any{
		map[string]any{"role": "system", "content": "You are a coding agent working in the user's repository. Use the tools."},
		map[string]any{"role": "user", "content": "rename the helper in parser.go"},
	}
	for i := 1; i < n; i++ {
		msgs = append(msgs,
			map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{"id": fmt.Sprint("call", i), "type": "function",
				"function": map[string]any{"name": "read", "arguments": `{"path":"parser.go"}`}}}},
			map[string]any{"role": "tool", "tool_call_id": fmt.Sprint("call", i), "content": "package parser"})
	}
	b, _ := json.Marshal(map[string]any{"model": "auto", "max_tokens": 64, "stream": stream, "tools": tools, "messages": msgs})
	return string(b)
}

// TestTitleRequestDoesNotDecideSession: a session whose first request is
// a title request (OpenCode's) routes its later tool turns exactly as a
// fresh session does, stream and not, with the classifier and without,
// and with no side route too (the turns then move the session up). The
// title request, and a call for the client's small model, go to the small
// pool without changing the session's decision, and explain says why.
func TestTitleRequestDoesNotDecideSession(t *testing.T) {
	big := startReplica(t, fast("Qwen/Qwen3.8-Flash-Next"))
	small := startReplica(t, fast("openbmb/MiniCPM5-2B"), vllmsim.WithChooser(vllmsim.DefaultChooser))
	for _, c := range []struct {
		name, side, rules string
		// turnRoute is the route a fresh session's tool turns take.
		turnRoute string
	}{
		{"tool count", sideRoute, "  - {name: tool-heavy, when: {tools: {gte: 4}}, to: big}", "tool-heavy"},
		{"classifier", sideRoute, "  - {name: complex, when: {class: complex}, to: big}", "default"},
		{"classifier, hard task", sideRoute, "  - {name: complex, when: {class: complex}, to: big}\n  - {name: tools, when: {tools: {gte: 4}}, to: big}", "tools"},
		{"no side route", "", "  - {name: tool-heavy, when: {tools: {gte: 4}}, to: big}", "tool-heavy"},
	} {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%t", c.name, stream), func(t *testing.T) {
				gw := startGateway(t, loadConfig(t, sideYAML, map[string]string{"big": big.Srv.URL, "small": small.Srv.URL,
					"side": c.side, "rules": c.rules}, nil))
				send := func(body, session string) (route, pool string) {
					t.Helper()
					resp, b := post(t, gw.API.URL+"/v1/chat/completions", body, map[string]string{"X-Session-Id": session})
					if resp.StatusCode != http.StatusOK {
						t.Fatalf("status %d: %.300s", resp.StatusCode, b)
					}
					return resp.Header.Get("X-Switchyard-Route"), resp.Header.Get("X-Switchyard-Pool")
				}
				titled := "titled-" + c.name + fmt.Sprint(stream)
				route, pool := send(titleRequest(stream), titled)
				if c.side != "" && (route != "side" || pool != "small") {
					t.Errorf("title request: route %s pool %s, want side on small", route, pool)
				}
				for n := 1; n <= 3; n++ {
					fr, fp := send(agentTurn(n, stream), "fresh-"+c.name+fmt.Sprint(stream))
					tr, tp := send(agentTurn(n, stream), titled)
					if tr != fr || tp != fp || fr != c.turnRoute {
						t.Errorf("turn %d: after the title %s/%s, fresh %s/%s, want %s", n, tr, tp, fr, fp, c.turnRoute)
					}
					if c.side == "" {
						continue
					}
					// Side requests between the turns change nothing.
					if r, p := send(titleRequest(stream), titled); r != "side" || p != "small" {
						t.Errorf("title request after turn %d: %s/%s, want side/small", n, r, p)
					}
					haiku := strings.Replace(agentTurn(n, stream), `"model":"auto"`, `"model":"claude-haiku-4-5"`, 1)
					if r, p := send(haiku, titled); r != "side" || p != "small" {
						t.Errorf("small model after turn %d: %s/%s, want side/small", n, r, p)
					}
				}
				if strings.HasPrefix(c.name, "classifier") && !received(small, "Last message: a tool result, 2 assistant steps after the user's last message") {
					t.Errorf("the classifier was not told of the third turn")
				}
				if c.side == "" {
					return
				}
				resp, b := post(t, gw.Admin.URL+"/admin/explain", titleRequest(stream), map[string]string{"X-Session-Id": titled})
				e := gjson.ParseBytes(b)
				want := fmt.Sprintf(`route "side" is a side route: the request is routed on its own and the session keeps route %q`, c.turnRoute)
				if resp.StatusCode != 200 || !e.Get("side").Bool() || e.Get("session").Str != "side" || e.Get("session_reason").Str != want ||
					e.Get("why.#").Int() != 2 || e.Get("why.1").Str != "max_tokens 1024 <= 4096" {
					t.Errorf("explain: %d %s", resp.StatusCode, b)
				}
			})
		}
	}
}

// received reports whether a request body r received holds s
// (JSON-escaped as a string would be).
func received(r *replica, s string) bool {
	esc, _ := json.Marshal(s)
	for _, b := range r.Bodies() {
		if strings.Contains(string(b), string(esc[1:len(esc)-1])) {
			return true
		}
	}
	return false
}
