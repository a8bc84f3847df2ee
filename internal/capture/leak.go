// Package capture holds what the captured agent sessions
// (testdata/agents/sessions) are checked against: they are kept as test
// data, so they must name no folder of the machine they were captured on.
// The agents' capture test and bench/capacity's replay test share it.
package capture

import (
	"regexp"
	"strings"
)

// machinePath finds an absolute path into the machine's folders: /tmp/,
// /root/, /home/ or /work/ at the start of a path (not inside one, as in
// Qwen Code's "~/.qwen/tmp/"; Codex names its root agent "/root", without
// a slash after it).
var machinePath = regexp.MustCompile(`(^|[^A-Za-z0-9._~/-])/(tmp|root|home|work)/`)

// agentExample is a path that an agent's own prompt holds as an example
// (Qwen Code's read_file: "e.g., '/home/user/project/file.txt'"), not one
// of the machine's.
const agentExample = "'/home/user/project/"

// MachineLeak is where body names one of the machine's folders, or a
// test's temporary folder in any spelling ("TestCaptureSessions…"), or -1.
func MachineLeak(body string) int {
	clean := strings.ReplaceAll(body, agentExample, strings.Repeat("_", len(agentExample)))
	if loc := machinePath.FindStringIndex(clean); loc != nil {
		return loc[0]
	}
	return strings.Index(body, "TestCaptureSessions")
}
