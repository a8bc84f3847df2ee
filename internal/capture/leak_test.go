package capture

import "testing"

// TestMachineLeak: what the session files' check finds and what it lets
// pass.
func TestMachineLeak(t *testing.T) {
	for body, leaks := range map[string]bool{
		`{"cwd":"/tmp/TestCaptureSessionspi1/001"}`:           true,
		`"see /root/.config"`:                                 true,
		`"/home/alice/notes.txt"`:                             true,
		`"Current working directory: /work/wt-30"`:            true,
		`"-tmp-TestCaptureSessionsqwen-code1-001/memory"`:     true,
		`"$WORK/notes.txt", "$TMP/003/.codex"`:                false,
		`"durable under ~/.qwen/tmp/<project-hash>/"`:         false,
		`"(e.g., '/home/user/project/file.txt')"`:             false,
		`"agent_path": "/root"`:                               false,
		`"$AGENTS/capture/node_modules/pi-coding-agent/docs"`: false,
	} {
		if got := MachineLeak(body) >= 0; got != leaks {
			t.Errorf("MachineLeak(%s) found a leak: %t, want %t", body, got, leaks)
		}
	}
}
