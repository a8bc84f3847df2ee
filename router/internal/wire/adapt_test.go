package wire

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/tidwall/gjson"
)

// TestAdapt: each documented adaptation (docs/agents.md), and bodies that
// need none pass through as the very same bytes.
func TestAdapt(t *testing.T) {
	for _, tc := range []struct {
		name string
		ep   Endpoint
		in   string
		want string // the adapted body, compacted; "" means unchanged
	}{
		{"responses untouched", Responses, `{"model":"m","input":"hi","tools":[{"type":"function","name":"f","parameters":{},"strict":false}],"reasoning":{"effort":"high"}}`, ""},
		{"effort xhigh", Responses, `{"model":"m","input":"hi","reasoning":{"effort":"xhigh","summary":"auto"}}`,
			`{"model":"m","input":"hi","reasoning":{"effort":"high","summary":"auto"}}`},
		{"effort minimal", Responses, `{"model":"m","input":"hi","reasoning":{"effort":"minimal"}}`,
			`{"model":"m","input":"hi","reasoning":{"effort":"low"}}`},
		{"namespace flattened, hosted tools dropped", Responses,
			`{"model":"m","input":"hi","tools":[{"type":"namespace","name":"fs","tools":[{"type":"function","name":"read"},{"type":"function","name":"write"}]},{"type":"web_search"},{"type":"function","name":"f"}]}`,
			`{"model":"m","input":"hi","tools":[{"type":"function","name":"read"},{"type":"function","name":"write"},{"type":"function","name":"f"}]}`},
		{"only hosted tools: no tools", Responses, `{"model":"m","input":"hi","tools":[{"type":"local_shell"}]}`, `{"model":"m","input":"hi"}`},
		{"encrypted reasoning and additional_tools", Responses,
			`{"model":"m","input":[{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"gAAA"},{"type":"additional_tools","tools":[{"type":"function","name":"g"}]},{"role":"user","content":"hi"}]}`,
			`{"model":"m","input":[{"type":"reasoning","id":"rs_1","summary":[]},{"role":"user","content":"hi"}],"tools":[{"type":"function","name":"g"}]}`},
		{"configuration_update dropped, its effort kept", Responses,
			`{"model":"m","input":[{"type":"configuration_update","reasoning":{"effort":"xhigh"}},{"role":"user","content":"hi"}]}`,
			`{"model":"m","input":[{"role":"user","content":"hi"}],"reasoning":{"effort":"high"}}`},
		{"configuration_update dropped, the request's effort wins", Responses,
			`{"model":"m","input":[{"type":"configuration_update","reasoning":{"effort":"low"}},{"role":"user","content":"hi"}],"reasoning":{"effort":"medium"}}`,
			`{"model":"m","input":[{"role":"user","content":"hi"}],"reasoning":{"effort":"medium"}}`},
		{"chat untouched", Chat, `{"model":"m","reasoning_effort":"high","messages":[{"role":"user","content":"hi"}]}`, ""},
		{"chat effort xhigh", Chat, `{"model":"m","reasoning_effort":"xhigh","messages":[{"role":"user","content":"hi"}]}`,
			`{"model":"m","reasoning_effort":"high","messages":[{"role":"user","content":"hi"}]}`},
		{"chat effort none", Chat, `{"model":"m","reasoning_effort":"none","messages":[{"role":"user","content":"hi"}]}`,
			`{"model":"m","reasoning_effort":"low","messages":[{"role":"user","content":"hi"}]}`},
		{"chat effort minimal", Chat, `{"model":"m","reasoning_effort":"minimal","messages":[{"role":"user","content":"hi"}]}`,
			`{"model":"m","reasoning_effort":"low","messages":[{"role":"user","content":"hi"}]}`},
		{"messages untouched", Messages, `{"model":"m","max_tokens":8,"system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":"hi"}]}`, ""},
		{"system message moved, billing header dropped", Messages,
			`{"model":"m","system":[{"type":"text","text":"x-anthropic-billing-header: cc_version=1; cch=abc"},{"type":"text","text":"You are Claude Code."}],"messages":[{"role":"system","content":"Extra rules."},{"role":"user","content":"hi"}]}`,
			`{"model":"m","system":[{"type":"text","text":"You are Claude Code."},{"type":"text","text":"Extra rules."}],"messages":[{"role":"user","content":"hi"}]}`},
		{"string system joined by a system message", Messages,
			`{"model":"m","system":"Base.","messages":[{"role":"system","content":[{"type":"text","text":"More."}]},{"role":"user","content":"hi"}]}`,
			`{"model":"m","system":[{"type":"text","text":"Base."},{"type":"text","text":"More."}],"messages":[{"role":"user","content":"hi"}]}`},
		{"redacted thinking dropped, tool_result id", Messages,
			`{"model":"m","messages":[{"role":"assistant","content":[{"type":"redacted_thinking","data":"x"},{"type":"tool_use","id":"t1","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"ok"}]}]}`,
			`{"model":"m","messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"ok","id":"t1"}]}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := []byte(tc.in)
			out, _ := Adapt(tc.ep, in)
			if tc.want == "" {
				if &out[0] != &in[0] || string(out) != tc.in {
					t.Errorf("changed a body that needs nothing:\n%s", out)
				}
				return
			}
			if d := cmp.Diff(tc.want, gjson.ParseBytes(out).Get("@ugly").Raw); d != "" {
				t.Errorf("adapted body (-want +got):\n%s", d)
			}
			if string(in) != tc.in {
				t.Errorf("the input body was modified")
			}
		})
	}
}

// TestResponseIDs: ids round-trip through the encoding whatever the
// replica's id looks like (one shaped like the gateway's own included:
// recognition is by the mac, never by a prefix), item ids are left alone,
// and an id checks only for the key it was made for.
func TestResponseIDs(t *testing.T) {
	a, b := ResponseIDs{Secret: []byte("s"), Key: "a"}, ResponseIDs{Secret: []byte("s"), Key: "b"}
	for _, orig := range []string{"resp_xyz", "resp_sy0123456789ab_resp_1", "chatcmpl-1", "x_y_z", "resp_sy" + strings.Repeat("0", 40)} {
		id := a.Encode("0123456789ab", orig)
		if tag, got, ok := a.Decode(id); !ok || tag != "0123456789ab" || got != orig {
			t.Errorf("decode(%s) = %q %q %v", id, tag, got, ok)
		}
		if _, _, ok := b.Decode(id); ok {
			t.Errorf("key b decoded key a's id %s", id)
		}
		if _, _, ok := (ResponseIDs{Secret: []byte("other"), Key: "a"}).Decode(id); ok {
			t.Errorf("another deployment's secret decoded %s", id)
		}
	}
	forged := a.Encode("0123456789ab", "..")
	for _, bad := range []string{"resp_xyz", "resp_sy", "resp_sy0123456789abresp", "msg_1", "resp_sy000000000000_resp_abc",
		"resp_sy0123456789ab0000000000000000_resp_1", forged, a.Encode("0123456789ab", "r") + "x"} {
		if _, _, ok := a.Decode(bad); ok {
			t.Errorf("decode(%q) accepted", bad)
		}
	}
	body := []byte(`{"id":"resp_1","object":"response","output":[{"id":"msg_1","type":"message"}]}`)
	got := string(EncodeResponseIDs(body, "0123456789ab", a))
	if want := `{"id":"` + a.Encode("0123456789ab", "resp_1") + `","object":"response","output":[{"id":"msg_1","type":"message"}]}`; got != want {
		t.Errorf("responseIDs = %s, want %s", got, want)
	}
}

// TestFitAnswer: an answer length that cannot fit beside the prompt in the
// pool's context is lowered to what fits; one that fits, or a pool whose
// context is unknown, is left alone.
func TestFitAnswer(t *testing.T) {
	body := []byte(`{"model":"m","max_tokens":64000,"messages":[{"role":"user","content":"hi"}]}`)
	if got := FitAnswer(body, len(body), 0); &got[0] != &body[0] {
		t.Errorf("unknown context: changed")
	}
	got := FitAnswer(body, len(body), 32768)
	want := int64(32768 - (len(body)+2)/3)
	if n := gjson.GetBytes(got, "max_tokens").Int(); n != want {
		t.Errorf("max_tokens %d, want %d", n, want)
	}
	small := []byte(`{"model":"m","max_output_tokens":100,"input":"hi"}`)
	if got := FitAnswer(small, len(small), 32768); string(got) != string(small) {
		t.Errorf("a length that fits was changed: %s", got)
	}
}

// customFn is the function tool a custom tool named name is offered as,
// with the description desc.
func customFn(name, desc string) string {
	return `{"type":"function","name":"` + name + `","description":` + Quote(desc) +
		`,"parameters":{"type":"object","properties":{"input":{"type":"string","description":"The tool's whole input."}},"required":["input"],"additionalProperties":false}}`
}

// TestAdaptCustomTools: Responses custom tools are offered as function
// tools with one string parameter, input, wherever the request puts them
// (tools, namespace groups, additional_tools items); a tool_choice naming
// one names the function; custom tool calls and outputs sent back become
// function calls and outputs. The names of the custom tools are returned.
func TestAdaptCustomTools(t *testing.T) {
	const free = "This tool takes free-form text, not JSON: put the whole text in the string parameter `input`."
	grammar := "Edit files.\n\n" + free + " The input must follow this lark grammar exactly; text outside the grammar is invalid:\nstart: \"*** Begin Patch\" LF"
	for _, tc := range []struct {
		name       string
		in         string
		want       string
		wantCustom CustomTools
	}{
		{"grammar tool", `{"model":"m","input":"hi","tools":[{"type":"custom","name":"apply_patch","description":"Edit files.","format":{"type":"grammar","syntax":"lark","definition":"start: \"*** Begin Patch\" LF"}}]}`,
			`{"model":"m","input":"hi","tools":[` + customFn("apply_patch", grammar) + `]}`, CustomTools{"apply_patch"}},
		{"text tool without a description", `{"model":"m","input":"hi","tools":[{"type":"custom","name":"exec","format":{"type":"text"}},{"type":"function","name":"f"}]}`,
			`{"model":"m","input":"hi","tools":[` + customFn("exec", free) + `,{"type":"function","name":"f"}]}`, CustomTools{"exec"}},
		{"no format", `{"model":"m","input":"hi","tools":[{"type":"custom","name":"exec","description":"Run."}]}`,
			`{"model":"m","input":"hi","tools":[` + customFn("exec", "Run.\n\n"+free) + `]}`, CustomTools{"exec"}},
		{"grammar without syntax", `{"model":"m","input":"hi","tools":[{"type":"custom","name":"g","format":{"type":"grammar","definition":"start: /x/"}}]}`,
			`{"model":"m","input":"hi","tools":[` + customFn("g", free+" The input must follow this lark grammar exactly; text outside the grammar is invalid:\nstart: /x/") + `]}`, CustomTools{"g"}},
		{"nameless custom tool dropped", `{"model":"m","input":"hi","tools":[{"type":"custom","format":{"type":"text"}},{"type":"custom","name":""}]}`,
			`{"model":"m","input":"hi"}`, nil},
		{"in a namespace and in additional_tools", `{"model":"m","input":[{"type":"additional_tools","tools":[{"type":"custom","name":"b"}]},{"role":"user","content":"hi"}],"tools":[{"type":"namespace","name":"ns","tools":[{"type":"custom","name":"a"},{"type":"function","name":"f"}]}]}`,
			`{"model":"m","input":[{"role":"user","content":"hi"}],"tools":[` + customFn("a", free) + `,{"type":"function","name":"f"},` + customFn("b", free) + `]}`, CustomTools{"a", "b"}},
		{"tool_choice custom", `{"model":"m","input":"hi","tools":[{"type":"custom","name":"a"}],"tool_choice":{"type":"custom","name":"a"}}`,
			`{"model":"m","input":"hi","tools":[` + customFn("a", free) + `],"tool_choice":{"type":"function","name":"a"}}`, CustomTools{"a"}},
		{"tool_choice allowed_tools", `{"model":"m","input":"hi","tools":[{"type":"custom","name":"a"}],"tool_choice":{"type":"allowed_tools","mode":"auto","tools":[{"type":"function","name":"f"},{"type":"custom","name":"a"}]}}`,
			`{"model":"m","input":"hi","tools":[` + customFn("a", free) + `],"tool_choice":{"type":"allowed_tools","mode":"auto","tools":[{"type":"function","name":"f"},{"type":"function","name":"a"}]}}`, CustomTools{"a"}},
		{"custom calls and outputs sent back", `{"model":"m","input":[{"role":"user","content":"hi"},{"type":"custom_tool_call","id":"ctc_1","call_id":"call_1","name":"apply_patch","input":"*** Begin Patch\n\"x\"\n","status":"completed"},{"type":"custom_tool_call_output","call_id":"call_1","output":"Done!"},{"type":"custom_tool_call","call_id":"call_2","name":"exec","input":""},{"type":"custom_tool_call_output","id":"o2","call_id":"call_2","output":[{"type":"input_text","text":"ok"}]}]}`,
			`{"model":"m","input":[{"role":"user","content":"hi"},{"type":"function_call","id":"ctc_1","call_id":"call_1","name":"apply_patch","status":"completed","arguments":` + Quote(`{"input":"*** Begin Patch\n\"x\"\n"}`) + `},{"type":"function_call_output","call_id":"call_1","output":"Done!"},{"type":"function_call","call_id":"call_2","name":"exec","arguments":"{\"input\":\"\"}"},{"type":"function_call_output","id":"o2","call_id":"call_2","output":[{"type":"input_text","text":"ok"}]}]}`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := []byte(tc.in)
			out, custom := Adapt(Responses, in)
			if d := cmp.Diff(tc.want, gjson.ParseBytes(out).Get("@ugly").Raw); d != "" {
				t.Errorf("adapted body (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.wantCustom, custom); d != "" {
				t.Errorf("custom tools (-want +got):\n%s", d)
			}
			if string(in) != tc.in {
				t.Errorf("the input body was modified")
			}
		})
	}
	if _, custom := Adapt(Responses, []byte(`{"model":"m","input":"hi","tools":[{"type":"function","name":"f"}]}`)); custom != nil {
		t.Errorf("custom tools %q for a request without any", custom)
	}
}
