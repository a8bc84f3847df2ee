package features

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/switchyard/switchyard/classifier"
	"github.com/switchyard/switchyard/router/internal/wire"
)

// agentRequest is a 200 kB agent request: a 20 kB system prompt, the
// task with a skills reminder, and tool calls whose results (3 kB of
// source each, escaped as JSON escapes it) fill the rest, the last a
// failing test run.
func agentRequest(lastOutput string) []byte {
	msgs := []any{
		map[string]any{"role": "system", "content": strings.Repeat("You are a coding agent. Follow the conventions.\n", 400)},
		map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "text", "text": "<system-reminder>\n" + strings.Repeat("skill: a \"skill\" description\n", 90) + "</system-reminder>"},
			map[string]any{"type": "text", "text": "debug why the CSV parser drops the last field"},
		}},
	}
	src := strings.Repeat("func parse(line string) []string {\n\treturn strings.Split(line, \",\")\n}\n", 40)
	for i := 0; len(mustJSON(msgs)) < 200<<10; i++ {
		msgs = append(msgs,
			map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{"id": "c", "type": "function", "function": map[string]any{"name": "read", "arguments": `{"path":"f` + strings.Repeat("x", i%7) + `.go"}`}}}},
			map[string]any{"role": "tool", "tool_call_id": "c", "content": src})
	}
	msgs = append(msgs,
		map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{"id": "t", "type": "function", "function": map[string]any{"name": "bash", "arguments": `{"cmd":"go test"}`}}}},
		map[string]any{"role": "tool", "tool_call_id": "t", "content": lastOutput})
	tools := []any{}
	for _, n := range []string{"bash", "read", "write", "edit", "glob", "grep", "list", "todowrite", "task", "webfetch"} {
		tools = append(tools, map[string]any{"type": "function", "function": map[string]any{"name": n, "parameters": map[string]any{"type": "object"}}})
	}
	return mustJSON(map[string]any{"model": "auto", "max_tokens": 32000, "messages": msgs, "tools": tools})
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// BenchmarkReadTurn is the cost of reading a 200 kB agent request's turn
// and building the classifier's summary from it (issue 39's bound: at
// most 100 µs, allocating at most twice the summary's size). The body is
// parsed once, outside the loop, as the router parses it once for every
// use. summary-bytes is the summary's size, to read B/op against.
func BenchmarkReadTurn(b *testing.B) {
	fail := "--- FAIL: TestParse (0.00s)\n    got 2 fields, want 3\nFAIL\nexit status 1"
	for _, bc := range []struct{ name, output string }{
		{"short-output", fail},
		// A 40 kB test log: the summary holds its head and tail.
		{"long-output", strings.Repeat("=== RUN   TestParse/case\n    parse_test.go:12: \"a,b\" ok\n", 800) + fail},
	} {
		b.Run(bc.name, func(b *testing.B) { benchmarkReadTurn(b, agentRequest(bc.output)) })
	}
}

func benchmarkReadTurn(b *testing.B, body []byte) {
	info, err := wire.Parse(body, wire.Chat, 64)
	if err != nil {
		b.Fatal(err)
	}
	sum := classifier.Summary(Read(info, 4000).Input, 4000)
	if !strings.Contains(sum, "FAIL") || !strings.Contains(sum, "debug why") {
		b.Fatalf("summary misses the turn:\n%s", sum)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		t := Read(info, 4000)
		_ = classifier.Summary(t.Input, 4000)
	}
	b.ReportMetric(float64(len(sum)), "summary-bytes")
}
