package replay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/switchyard/switchyard/policy"
	"github.com/switchyard/switchyard/replay"
	"github.com/switchyard/switchyard/router"
)

// session writes a capture of one agent session of n turns: a task, then
// a tool loop whose every turn resends the whole conversation.
func session(t testing.TB, n int) string {
	t.Helper()
	msgs := []any{map[string]any{"role": "system", "content": "You are a coding agent."}, map[string]any{"role": "user", "content": "create notes.txt, then edit it"}}
	var lines []string
	for i := range n {
		body, _ := json.Marshal(map[string]any{"model": "agent", "max_tokens": 256, "messages": msgs,
			"tools": []any{map[string]any{"type": "function", "function": map[string]any{"name": "bash"}}}})
		line, _ := json.Marshal(map[string]any{"path": "/v1/chat/completions", "headers": map[string]string{"X-Session-Id": "s1"}, "body": json.RawMessage(body)})
		lines = append(lines, string(line))
		id := fmt.Sprint("call", i)
		msgs = append(msgs,
			map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{"id": id, "type": "function", "function": map[string]any{"name": "bash", "arguments": fmt.Sprintf(`{"cmd":"step %d"}`, i)}}}},
			map[string]any{"role": "tool", "tool_call_id": id, "content": fmt.Sprintf("step %d done", i)})
	}
	path := filepath.Join(t.TempDir(), "agent.jsonl")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func load() (*policy.Config, error) { return router.LoadConfig("../testdata/agents/replay.yaml") }

// TestRunCountsEveryTurn: a 100-turn session replays whole, one session
// opened, every turn on the policy's routes.
func TestRunCountsEveryTurn(t *testing.T) {
	results, errs := replay.Run(context.Background(), load, []string{session(t, 100)})
	if len(errs) != 0 || len(results) != 1 {
		t.Fatalf("%v %v", results, errs)
	}
	r := results[0]
	if r.Requests != 100 || len(r.Failed) != 0 || r.Sessions["new"] != 1 || r.Capture != "agent" {
		t.Errorf("requests %d failed %v sessions %v capture %q", r.Requests, r.Failed, r.Sessions, r.Capture)
	}
	if r.ClassifierCalls == 0 || r.Gain.Factor <= 0 {
		t.Errorf("classifier calls %d, gain %+v", r.ClassifierCalls, r.Gain)
	}
}
