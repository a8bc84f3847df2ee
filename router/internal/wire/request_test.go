package wire

import "testing"

// TestParseCountsAgentTools: Codex sends its tools in an additional_tools
// input item, grouped in namespaces; each function counts for the tools
// feature (before: 0 tools, so a tool-heavy rule never matched and the
// session landed on the small model), and a top-level namespace group
// counts its functions, as docs/agents.md says.
func TestParseCountsAgentTools(t *testing.T) {
	fns := `{"type":"function","name":"read"},{"type":"function","name":"write"},{"type":"function","name":"list"},{"type":"function","name":"exec"}`
	for _, body := range []string{
		`{"model":"auto","input":[{"type":"additional_tools","tools":[{"type":"namespace","name":"fs","tools":[` + fns + `]}]},{"role":"user","content":"hi"}]}`,
		`{"model":"auto","input":"hi","tools":[{"type":"namespace","name":"fs","tools":[` + fns + `]}]}`,
	} {
		info, err := Parse([]byte(body), Responses, 64)
		if err != nil || info.Tools != 4 {
			t.Errorf("%s: %v, tools %d, want 4", body, err, info.Tools)
		}
	}
}
