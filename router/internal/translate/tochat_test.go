package translate

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/tidwall/gjson"
)

// stream is what every translated request ends with.
const stream = `"stream":true,"stream_options":{"include_usage":true}`

type toChatCase struct {
	name string
	in   string
	want string // JSON; empty when refused
	err  string // part of the refusal's text
}

func runToChat(t *testing.T, conv func([]byte) ([]byte, error), cases []toChatCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := conv([]byte(tc.in))
			if tc.err != "" {
				if !errors.Is(err, ErrNotTranslatable) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want errNotTranslatable with %q (got body %s)", err, tc.err, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("err = %v", err)
			}
			var g, w any
			if err := json.Unmarshal(got, &g); err != nil {
				t.Fatalf("output is not JSON: %v: %s", err, got)
			}
			if err := json.Unmarshal([]byte(tc.want), &w); err != nil {
				t.Fatalf("want is not JSON: %v", err)
			}
			if d := cmp.Diff(w, g); d != "" {
				t.Errorf("(-want +got)\n%s\ngot %s", d, got)
			}
		})
	}
}

func TestToChatMessages(t *testing.T) {
	runToChat(t, MessagesToChat, []toChatCase{
		{
			name: "string system and messages, sampling fields",
			in: `{"model":"m","max_tokens":100,"system":"be brief","stop_sequences":["END"],
				"temperature":0.5,"top_p":0.9,"top_k":40,"chat_template_kwargs":{"enable_thinking":false},
				"metadata":{"user_id":"u"},"stream":true,"thinking":{"type":"enabled","budget_tokens":1024},
				"kv_transfer_params":{"a":1},"service_tier":"auto",
				"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"},{"role":"user","content":""}]}`,
			want: `{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"},
				{"role":"assistant","content":"hello"},{"role":"user","content":""}],
				"max_tokens":100,"stop":["END"],"temperature":0.5,"top_p":0.9,"top_k":40,
				"chat_template_kwargs":{"enable_thinking":false},` + stream + `}`,
		},
		{
			name: "Claude Code: billing header dropped, tool_use and tool_result history, tools",
			in: `{"model":"claude-sonnet","max_tokens":32000,"stream":true,
				"system":[{"type":"text","text":"x-anthropic-billing-header: cc_version=2.1; cch=abc"},
					{"type":"text","text":"You are Claude Code.","cache_control":{"type":"ephemeral"}},
					{"type":"text","text":""},{"type":"text","text":" Be terse."}],
				"messages":[
					{"role":"user","content":[{"type":"text","text":"fix a.go"}]},
					{"role":"assistant","content":[{"type":"thinking","thinking":"look first","signature":"sig"},
						{"type":"text","text":"Reading it."},
						{"type":"tool_use","id":"toolu_1","name":"Read","input":{"file_path":"/a.go","limit":2.0,"note":"é\n😀"}},
						{"type":"tool_use","id":"toolu_2","name":"Bash","input":{}}]},
					{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"package a"},
						{"type":"tool_result","tool_use_id":"toolu_2","is_error":true,
							"content":[{"type":"text","text":"line 1"},{"type":"text","text":"line 2"},
								{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAA"}}]},
						{"type":"text","text":"go on","cache_control":{"type":"ephemeral"}}]}],
				"tools":[{"name":"Read","description":"Reads a file","input_schema":{"type":"object","properties":{"file_path":{"type":"string"}},"required":["file_path"]}},
					{"name":"Bash","input_schema":{"properties":{"command":{"type":"string"}}},"defer_loading":true}]}`,
			want: `{"model":"claude-sonnet","messages":[
					{"role":"system","content":"You are Claude Code. Be terse."},
					{"role":"user","content":"fix a.go"},
					{"role":"assistant","reasoning":"look first","content":"Reading it.","tool_calls":[
						{"id":"toolu_1","type":"function","function":{"name":"Read","arguments":"{\"file_path\": \"/a.go\", \"limit\": 2.0, \"note\": \"\\u00e9\\n\\ud83d\\ude00\"}"}},
						{"id":"toolu_2","type":"function","function":{"name":"Bash","arguments":"{}"}}]},
					{"role":"tool","tool_call_id":"toolu_1","content":"package a"},
					{"role":"tool","tool_call_id":"toolu_2","content":"line 1\nline 2"},
					{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,AAA"}}]},
					{"role":"user","content":"go on"}],
				"max_tokens":32000,"tool_choice":"auto","tools":[
					{"type":"function","function":{"name":"Read","description":"Reads a file","defer_loading":null,
						"parameters":{"type":"object","properties":{"file_path":{"type":"string"}},"required":["file_path"]}}},
					{"type":"function","function":{"name":"Bash","description":null,"defer_loading":true,
						"parameters":{"properties":{"command":{"type":"string"}},"type":"object"}}}],` + stream + `}`,
		},
		{
			name: "system messages in the list join the system text; ctx and msg roles are user",
			in: `{"model":"m","max_tokens":1,"system":"A",
				"messages":[{"role":"system","content":"B"},{"role":"ctx","content":"c"},
					{"role":"system","content":[{"type":"text","text":"x-anthropic-billing-header: h"},{"type":"text","text":"C"}]},
					{"role":"msg","content":"d"}]}`,
			want: `{"model":"m","messages":[{"role":"system","content":"ABC"},{"role":"user","content":"c"},{"role":"user","content":"d"}],
				"max_tokens":1,` + stream + `}`,
		},
		{
			name: "no system text, no system message",
			in: `{"model":"m","max_tokens":1,"system":[{"type":"text","text":"x-anthropic-billing-header: h"}],
				"messages":[{"role":"user","content":"q"}]}`,
			want: `{"model":"m","messages":[{"role":"user","content":"q"}],"max_tokens":1,` + stream + `}`,
		},
		{
			name: "a user message of tool results only is not sent; an empty assistant one is",
			in: `{"model":"m","max_tokens":1,"messages":[
				{"role":"assistant","content":[{"type":"redacted_thinking","data":"xx"}]},
				{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1"}]}]}`,
			want: `{"model":"m","messages":[{"role":"assistant"},{"role":"tool","tool_call_id":"t1","content":""}],
				"max_tokens":1,` + stream + `}`,
		},
		{
			name: "images and text make a part list; empty thinking is an empty reasoning",
			in: `{"model":"m","max_tokens":1,"messages":[
				{"role":"user","content":[{"type":"text","text":"what is this"},
					{"type":"image","source":{"type":"url","url":"https://x/y.png"}},
					{"type":"image","source":{"type":"base64","data":"QQ"}},
					{"type":"image","source":{}}]},
				{"role":"assistant","content":[{"type":"thinking","thinking":""},{"type":"text","text":"a cat"}]}]}`,
			want: `{"model":"m","messages":[
				{"role":"user","content":[{"type":"text","text":"what is this"},
					{"type":"image_url","image_url":{"url":"https://x/y.png"}},
					{"type":"image_url","image_url":{"url":"data:image/jpeg;base64,QQ"}}]},
				{"role":"assistant","reasoning":"","content":"a cat"}],"max_tokens":1,` + stream + `}`,
		},
		{
			name: "an assistant's tool_result is text",
			in: `{"model":"m","max_tokens":1,"messages":[{"role":"assistant","content":[
				{"type":"tool_result","tool_use_id":"t","content":"42"},{"type":"tool_result","tool_use_id":"t2"}]}]}`,
			want: `{"model":"m","messages":[{"role":"assistant","content":[{"type":"text","text":"Tool result: 42"},
				{"type":"text","text":"Tool result: "}]}],"max_tokens":1,` + stream + `}`,
		},
		{
			name: "tool references in a tool result are a second tool message",
			in: `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t",
				"content":[{"type":"text","text":"found"},{"type":"tool_reference","tool_name":"Grep"},{"type":"tool_reference","name":"Glob"},
					{"type":"image","source":{"type":"url","url":""}}]}]}]}`,
			want: `{"model":"m","messages":[{"role":"tool","tool_call_id":"t","content":"found"},
				{"role":"tool","tool_call_id":"t","content":[{"type":"tool_reference","name":"Grep"},{"type":"tool_reference","name":"Glob"}]}],
				"max_tokens":1,` + stream + `}`,
		},
		{
			name: "tool_choice any is required",
			in:   `{"model":"m","max_tokens":1,"messages":[],"tool_choice":{"type":"any"},"tools":[{"name":"f","input_schema":{"type":"object"}}]}`,
			want: `{"model":"m","messages":[],"max_tokens":1,"tool_choice":"required",
				"tools":[{"type":"function","function":{"name":"f","description":null,"parameters":{"type":"object"},"defer_loading":null}}],` + stream + `}`,
		},
		{
			name: "tool_choice tool is a named function; none is none; empty schema gets a type",
			in:   `{"model":"m","max_tokens":1,"messages":[],"tool_choice":{"type":"tool","name":"f"},"tools":[{"name":"f","input_schema":{}}]}`,
			want: `{"model":"m","messages":[],"max_tokens":1,"tool_choice":{"type":"function","function":{"name":"f"}},
				"tools":[{"type":"function","function":{"name":"f","description":null,"parameters":{"type":"object"},"defer_loading":null}}],` + stream + `}`,
		},
		{
			name: "tool_choice none, empty tools",
			in:   `{"model":"m","max_tokens":1,"messages":[],"tool_choice":{"type":"none"},"tools":[]}`,
			want: `{"model":"m","messages":[],"max_tokens":1,"tool_choice":"none","tools":[],` + stream + `}`,
		},
		{
			name: "tool_choice without tools is left out",
			in:   `{"model":"m","max_tokens":1,"messages":[],"tool_choice":{"type":"auto"}}`,
			want: `{"model":"m","messages":[],"max_tokens":1,` + stream + `}`,
		},
		{
			name: "output_config: schema and effort",
			in: `{"model":"m","max_tokens":1,"messages":[],
				"output_config":{"effort":"high","format":{"type":"json_schema","schema":{"type":"object","properties":{"a":{"type":"string"}}}}}}`,
			want: `{"model":"m","messages":[],"max_tokens":1,"reasoning_effort":"high",
				"response_format":{"type":"json_schema","json_schema":{"name":"json_schema","schema":{"type":"object","properties":{"a":{"type":"string"}}}}},` + stream + `}`,
		},
		{
			name: "output_config: an empty schema is no response_format",
			in:   `{"model":"m","max_tokens":1,"messages":[],"output_config":{"format":{"type":"json_schema","schema":{}}}}`,
			want: `{"model":"m","messages":[],"max_tokens":1,` + stream + `}`,
		},

		{name: "malformed JSON", in: `{"model":"m",`, err: "malformed JSON"},
		{name: "not an object", in: `[1]`, err: "not a JSON object"},
		{name: "no model", in: `{"max_tokens":1,"messages":[]}`, err: "model"},
		{name: "unknown block type", in: `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"document","source":{}}]}]}`, err: `"document"`},
		{name: "unknown role", in: `{"model":"m","max_tokens":1,"messages":[{"role":"tool","content":"x"}]}`, err: `role "tool"`},
		{name: "tool_use without id", in: `{"model":"m","max_tokens":1,"messages":[{"role":"assistant","content":[{"type":"tool_use","name":"f","input":{}}]}]}`, err: "without an id"},
		{name: "assistant tool_result with list content", in: `{"model":"m","max_tokens":1,"messages":[{"role":"assistant","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"x"}]}]}]}`, err: "Python repr"},
		{name: "tool without input_schema", in: `{"model":"m","max_tokens":1,"messages":[],"tools":[{"name":"f"}]}`, err: "input_schema"},
		{name: "text of the wrong type", in: `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"text","text":5}]}]}`, err: "not a string"},
		{name: "temperature of the wrong type", in: `{"model":"m","max_tokens":1,"messages":[],"temperature":"hot"}`, err: "temperature"},
		{name: "unknown effort", in: `{"model":"m","max_tokens":1,"messages":[],"output_config":{"effort":"huge"}}`, err: "effort"},
	})
}

func TestToChatResponses(t *testing.T) {
	const tool = `{"type":"function","function":{"name":"shell","description":"Runs a command","parameters":{"type":"object","properties":{"command":{"type":"array","items":{"type":"string"}}},"required":["command"]},"strict":false}}`
	runToChat(t, ResponsesToChat, []toChatCase{
		{
			name: "string input, instructions and sampling fields",
			in: `{"model":"m","instructions":"be brief","input":"hi","max_output_tokens":64,"temperature":0.2,"top_p":0.8,
				"top_k":5,"stop":"END","seed":7,"reasoning":{"effort":"low","summary":"auto"},"store":false,"stream":true,
				"truncation":"disabled","metadata":{"a":"b"},"user":"u","service_tier":"auto","include":["reasoning.encrypted_content"]}`,
			want: `{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}],
				"max_tokens":64,"temperature":0.2,"top_p":0.8,"top_k":5,"stop":"END","seed":7,"reasoning_effort":"low",` + stream + `}`,
		},
		{
			name: "Codex: instructions, input_text messages, function_call and output, function tools",
			in: `{"model":"gpt-5-codex","instructions":"You are Codex.","stream":true,"store":false,"parallel_tool_calls":false,
				"prompt_cache_key":"k","include":["reasoning.encrypted_content"],"reasoning":{"effort":"medium"},
				"input":[
					{"type":"message","role":"developer","content":[{"type":"input_text","text":"<permissions>...</permissions>"}]},
					{"type":"message","role":"user","content":[{"type":"input_text","text":"<environment_context>cwd</environment_context>"}]},
					{"type":"message","role":"user","content":[{"type":"input_text","text":"list files"},{"type":"input_image","image_url":"data:image/png;base64,AA","detail":"auto"}]},
					{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"I should run ls"}],"content":null},
					{"type":"function_call","id":"fc_1","call_id":"call_1","name":"shell","arguments":"{\"command\":[\"ls\"]}"},
					{"type":"function_call_output","call_id":"call_1","output":"a.go\nb.go"},
					{"type":"message","role":"assistant","id":"msg_1","status":"completed","content":[{"type":"output_text","text":"Two files.","annotations":[]}]},
					{"type":"message","role":"user","content":[{"type":"input_text","text":"thanks"}]}],
				"tools":[{"type":"function","name":"shell","description":"Runs a command","strict":false,
					"parameters":{"type":"object","properties":{"command":{"type":"array","items":{"type":"string"}}},"required":["command"]}}],
				"tool_choice":"auto"}`,
			want: `{"model":"gpt-5-codex","messages":[
					{"role":"system","content":"You are Codex."},
					{"role":"developer","content":[{"type":"text","text":"<permissions>...</permissions>"}]},
					{"role":"user","content":[{"type":"text","text":"<environment_context>cwd</environment_context>"}]},
					{"role":"user","content":[{"type":"text","text":"list files"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AA"}}]},
					{"role":"assistant","reasoning":"I should run ls","tool_calls":[{"id":"call_1","type":"function","function":{"name":"shell","arguments":"{\"command\":[\"ls\"]}"}}]},
					{"role":"tool","tool_call_id":"call_1","content":"a.go\nb.go"},
					{"role":"assistant","content":"Two files."},
					{"role":"user","content":[{"type":"text","text":"thanks"}]}],
				"reasoning_effort":"medium","tool_choice":"auto","tools":[` + tool + `],` + stream + `}`,
		},
		{
			name: "merging: reasoning, text and calls join one assistant message; a second text starts another",
			in: `{"input":[
				{"type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"think"},{"type":"reasoning_text","text":"more"}],"encrypted_content":null},
				{"role":"assistant","content":"first"},
				{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},
				{"type":"function_call","call_id":"c2","name":"g","arguments":"{}"},
				{"role":"assistant","content":[]},
				{"type":"reasoning","summary":[{"type":"summary_text","text":"s"}]},
				{"type":"reasoning","summary":[]},
				{"type":"function_call_output","call_id":"c1","output":[{"type":"input_text","text":"r1"}]},
				{"type":"function_call","call_id":"c3","name":"f","arguments":"{}"},
				{"role":"system","content":"late system"}]}`,
			want: `{"messages":[
				{"role":"assistant","reasoning":"think","content":"first","tool_calls":[
					{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}},
					{"id":"c2","type":"function","function":{"name":"g","arguments":"{}"}}]},
				{"role":"assistant","content":"","reasoning":"s"},
				{"role":"assistant","reasoning":""},
				{"role":"tool","tool_call_id":"c1","content":[{"type":"text","text":"r1"}]},
				{"role":"assistant","tool_calls":[{"id":"c3","type":"function","function":{"name":"f","arguments":"{}"}}]},
				{"role":"system","content":"late system"}],` + stream + `}`,
		},
		{
			name: "namespace tools and calls are namespace__name; extra tool members are kept",
			in: `{"input":[{"type":"function_call","call_id":"c","namespace":"git","name":"log","arguments":"{}"}],
				"tools":[{"type":"namespace","name":"git","description":"git tools","tools":[
					{"type":"function","name":"log","parameters":{"type":"object"},"defer_loading":true},{"type":"custom","name":"x"}]}],
				"tool_choice":{"type":"function","name":"git__log"}}`,
			want: `{"messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"git__log","arguments":"{}"}}]}],
				"tool_choice":{"type":"function","function":{"name":"git__log"}},
				"tools":[{"type":"function","function":{"name":"git__log","description":null,"parameters":{"type":"object"},"strict":null,"defer_loading":true}}],` + stream + `}`,
		},
		{
			name: "json_schema text format is the response format",
			in: `{"input":"q","text":{"format":{"type":"json_schema","name":"answer","strict":true,"schema":{"type":"object","properties":{"a":{"type":"number"}}}}},
				"tools":[],"tool_choice":"none"}`,
			want: `{"messages":[{"role":"user","content":"q"}],
				"response_format":{"type":"json_schema","json_schema":{"name":"answer","schema":{"type":"object","properties":{"a":{"type":"number"}}}}},` + stream + `}`,
		},
		{
			name: "json_object and text formats are ignored, as vLLM does",
			in:   `{"input":"q","text":{"format":{"type":"json_object"},"verbosity":"low"}}`,
			want: `{"messages":[{"role":"user","content":"q"}],` + stream + `}`,
		},
		{
			name: "tool_choice required with tools; an empty instructions adds nothing",
			in:   `{"instructions":"","input":[],"tools":[{"type":"function","name":"f"}],"tool_choice":"required"}`,
			want: `{"messages":[],"tool_choice":"required","tools":[{"type":"function","function":{"name":"f","description":null,"parameters":null,"strict":null}}],` + stream + `}`,
		},
		{
			name: "a completed final assistant message is not a continuation",
			in:   `{"input":[{"type":"message","role":"assistant","status":"completed","content":[{"type":"output_text","text":"done"}]}]}`,
			want: `{"messages":[{"role":"assistant","content":"done"}],` + stream + `}`,
		},

		{name: "malformed JSON", in: `{"input":`, err: "malformed JSON"},
		{name: "previous_response_id", in: `{"input":"q","previous_response_id":"resp_1"}`, err: "previous_response_id"},
		{name: "conversation", in: `{"input":"q","conversation":{"id":"conv_1"}}`, err: "conversation"},
		{name: "previous_input_messages", in: `{"input":"q","previous_input_messages":[]}`, err: "previous_input_messages"},
		{name: "prompt template", in: `{"input":"q","prompt":{"id":"p"}}`, err: "prompt"},
		{name: "no input", in: `{"model":"m"}`, err: "input"},
		{name: "hosted tool", in: `{"input":"q","tools":[{"type":"web_search_preview"}]}`, err: `"web_search_preview"`},
		{name: "mcp tool", in: `{"input":"q","tools":[{"type":"mcp","server_label":"x"}]}`, err: `"mcp"`},
		{name: "unknown item type", in: `{"input":[{"type":"item_reference","id":"x"}]}`, err: `"item_reference"`},
		{name: "local shell call item", in: `{"input":[{"type":"local_shell_call","call_id":"x"}]}`, err: `"local_shell_call"`},
		{name: "unknown role", in: `{"input":[{"type":"message","role":"tool","content":"x"}]}`, err: `role "tool"`},
		{name: "input_file part", in: `{"input":[{"role":"user","content":[{"type":"input_file","file_id":"f"}]}]}`, err: `"input_file"`},
		{name: "input_image by file_id", in: `{"input":[{"role":"user","content":[{"type":"input_image","file_id":"f"}]}]}`, err: "file_id"},
		{name: "partial final message", in: `{"input":[{"role":"user","content":"q"},{"type":"message","role":"assistant","status":"in_progress","content":[{"type":"output_text","text":"par"}]}]}`, err: "partial message"},
		{name: "partial final reasoning", in: `{"input":[{"type":"reasoning","status":"incomplete","summary":[]}]}`, err: "partial reasoning"},
		{name: "function_call without arguments", in: `{"input":[{"type":"function_call","call_id":"c","name":"f"}]}`, err: "arguments"},
		{name: "assistant refusal first", in: `{"input":[{"role":"assistant","content":[{"type":"refusal","refusal":"no"}]}]}`, err: "refusal"},
		{name: "allowed_tools choice", in: `{"input":"q","tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"allowed_tools","mode":"auto","tools":[]}}`, err: "tool_choice"},
		{name: "required without tools", in: `{"input":"q","tool_choice":"required"}`, err: "without tools"},
		{name: "structured_outputs and text.format", in: `{"input":"q","structured_outputs":{"json":{}},"text":{"format":{"type":"json_schema","name":"a","schema":{}}}}`, err: "structured_outputs"},
	})
}

func TestToChatPythonJSONDumps(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{}`, `{}`},
		{`{"a":1,"b":[1,2,{"c":null}],"d":true,"e":false}`, `{"a": 1, "b": [1, 2, {"c": null}], "d": true, "e": false}`},
		{`{"z":1,"a":2}`, `{"z": 1, "a": 2}`},
		{`{"a":1,"b":2,"a":3}`, `{"a": 3, "b": 2}`},
		{`{"s":"é😀\u0001\u007f\"\\/\t<>&"}`, `{"s": "\u00e9\ud83d\ude00\u0001\u007f\"\\/\t<>&"}`},
		{`{"f":[1.0,1.5,-0.0,0.0001,0.00001,1e16,1E15,123456789012345678.0,1e400,-1e400,2.5e-10]}`,
			`{"f": [1.0, 1.5, -0.0, 0.0001, 1e-05, 1e+16, 1000000000000000.0, 1.2345678901234568e+17, Infinity, -Infinity, 2.5e-10]}`},
		{`{"i":[-0,123456789012345678901234567890]}`, `{"i": [0, 123456789012345678901234567890]}`},
	} {
		t.Run(tc.in, func(t *testing.T) {
			if got := pyJSONDumps(gjson.Parse(tc.in)); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

// TestToChatHostileInput feeds truncations and type confusions of the
// test requests: never a panic, always JSON or ErrNotTranslatable.
func TestToChatHostileInput(t *testing.T) {
	seeds := []string{
		`{"model":"m","max_tokens":1,"system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"image","source":null},{"type":"text","text":null},{"type":"tool_reference","tool_name":3}]}]}],"tools":[{"name":"f","input_schema":{"properties":{}}}],"tool_choice":{"type":"tool"}}`,
		`{"input":[{"type":"reasoning","content":[1,"x"]},{"role":"assistant","content":[3]},{"type":"function_call_output","call_id":1,"output":{}},{"type":"function_call","call_id":"c","name":"n","arguments":"{}","namespace":5}],"tools":[{"type":"namespace","name":"x","tools":[{"type":"function","name":1}]}],"text":{"format":"x"}}`,
	}
	for _, s := range seeds {
		for i := 0; i <= len(s); i++ {
			for _, conv := range []func([]byte) ([]byte, error){MessagesToChat, ResponsesToChat} {
				out, err := conv([]byte(s[:i]))
				if err != nil {
					if !errors.Is(err, ErrNotTranslatable) {
						t.Fatalf("%q: err %v is not errNotTranslatable", s[:i], err)
					}
					continue
				}
				if !json.Valid(out) {
					t.Fatalf("%q: output is not JSON: %s", s[:i], out)
				}
			}
		}
	}
}

// FuzzToChat: whatever the body, a translation is JSON with a message list
// and streams, or a refusal; never a panic.
func FuzzToChat(f *testing.F) {
	f.Add([]byte(`{"model":"m","max_tokens":1,"system":"s","messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{"a":[1.5e300,"\u00e9"]}}]}],"tools":[{"name":"f","input_schema":{}}]}`))
	f.Add([]byte(`{"instructions":"i","input":[{"type":"reasoning","summary":[{"text":"s"}]},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"o"}],"tools":[{"type":"function","name":"f"}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, conv := range []func([]byte) ([]byte, error){MessagesToChat, ResponsesToChat} {
			out, err := conv(body)
			if err != nil {
				if !errors.Is(err, ErrNotTranslatable) {
					t.Fatalf("err %v is not errNotTranslatable", err)
				}
				continue
			}
			r := gjson.ParseBytes(out)
			if !json.Valid(out) || !r.Get("messages").IsArray() || !r.Get("stream").Bool() {
				t.Fatalf("bad translation %s", out)
			}
		}
	})
}
