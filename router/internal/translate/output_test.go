package translate

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/tidwall/gjson"

	"github.com/switchyard/switchyard/router/internal/wire"
)

// TestCustomOutput: an answer's function calls to custom tools become
// custom tool calls, their input the arguments' input (or the raw
// arguments when they are of another shape); other function calls, and
// every call when no custom tool was offered, are unchanged.
func TestCustomOutput(t *testing.T) {
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	fn := func(id, name, args string) string {
		return `{"arguments":` + q(args) + `,"call_id":"call_` + id + `","name":"` + name + `","type":"function_call","id":"fc_` + id + `","status":"completed"}`
	}
	custom := func(id, input string) string {
		return `{"type":"custom_tool_call","id":"fc_` + id + `","call_id":"call_` + id + `","name":"apply_patch","input":` + q(input) + `,"status":"completed"}`
	}
	calls := []string{fn("f", "f", `{"input":"x"}`), fn("p", "apply_patch", `{"input":"*** Begin Patch\n\u00e9"}`),
		fn("q", "apply_patch", `{"patch":1}`), fn("r", "apply_patch", `not json`)}
	answer := []byte(`{"id":"resp_1","object":"response","output":[` + calls[0] + `,` + calls[1] + `,` + calls[2] + `,` + calls[3] + `]}`)
	for _, tc := range []struct {
		name  string
		tools wire.CustomTools
		want  []string
	}{
		{"custom tool", wire.CustomTools{"apply_patch"}, []string{calls[0], custom("p", "*** Begin Patch\né"), custom("q", `{"patch":1}`), custom("r", "not json")}},
		{"no custom tool", nil, calls},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := string(answer)
			out := CustomOutput(answer, "output", tc.tools)
			var got []string
			gjson.GetBytes(out, "output").ForEach(func(_, it gjson.Result) bool { got = append(got, it.Raw); return true })
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("output (-want +got):\n%s", d)
			}
			if string(answer) != before {
				t.Error("the answer was modified in place")
			}
		})
	}
}
