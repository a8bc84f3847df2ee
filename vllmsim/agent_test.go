package vllmsim_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/tidwall/gjson"

	"github.com/switchyard/switchyard/vllmsim"
)

// The tools of the agent-loop tests, as a coding agent offers them.
var agentTools = map[string]string{
	"Read":  `{"type":"object","properties":{"file_path":{"type":"string"},"limit":{"type":"integer"}},"required":["file_path"]}`,
	"Write": `{"type":"object","properties":{"file_path":{"type":"string"},"content":{"type":"string"}},"required":["file_path","content"]}`,
	"Bash":  `{"type":"object","properties":{"command":{"type":"string"},"timeout":{"type":"integer","maximum":600000}},"required":["command"]}`,
	"Glob":  `{"type":"object","properties":{"pattern":{"type":"string"},"path":{"type":"string"}},"required":["pattern"]}`,
}

var agentToolNames = []string{"Read", "Write", "Bash", "Glob"}

// convMsg is one message of an agent conversation, written once and
// rendered for each API: a user text, an assistant text, an assistant turn
// calling tools, or the results of the calls before it.
type convMsg struct {
	user, text string
	calls      []string
	results    bool
}

// conversation is an agent request, rendered for each API by body.
type conversation struct {
	msgs       []convMsg
	tools      []string // names from agentTools
	toolChoice string   // "" (auto), "none", "required" or a tool's name
	serial     bool     // parallel tool calls disabled
}

func user(text string) convMsg   { return convMsg{user: text} }
func said(text string) convMsg   { return convMsg{text: text} }
func called(n ...string) convMsg { return convMsg{calls: n} }
func results() convMsg           { return convMsg{results: true} }
func rounds(n int) (out []convMsg) { // n tool rounds, each calling Read
	for range n {
		out = append(out, called("Read"), results())
	}
	return out
}

func msgs(parts ...any) []convMsg {
	var out []convMsg
	for _, p := range parts {
		switch p := p.(type) {
		case convMsg:
			out = append(out, p)
		case []convMsg:
			out = append(out, p...)
		}
	}
	return out
}

type agentAPI string

const (
	chatAPI      agentAPI = "/v1/chat/completions"
	responsesAPI agentAPI = "/v1/responses"
	messagesAPI  agentAPI = "/v1/messages"
)

var agentAPIs = []agentAPI{chatAPI, responsesAPI, messagesAPI}

func js(s string) string { b, _ := json.Marshal(s); return string(b) }

// body renders c as a request to api.
func (c conversation) body(api agentAPI, stream bool) string {
	var items, tools []string
	var pending []string // call ids awaiting results
	id := 0
	for _, m := range c.msgs {
		switch {
		case m.user != "":
			items = append(items, `{"role":"user","content":`+js(m.user)+`}`)
		case m.text != "":
			items = append(items, `{"role":"assistant","content":`+js(m.text)+`}`)
		case m.calls != nil:
			var calls []string
			pending = pending[:0]
			for _, name := range m.calls {
				id++
				cid := "call_" + strconv.Itoa(id)
				pending = append(pending, cid)
				switch api {
				case chatAPI:
					calls = append(calls, `{"id":"`+cid+`","type":"function","function":{"name":"`+name+`","arguments":"{}"}}`)
				case responsesAPI:
					items = append(items, `{"type":"function_call","call_id":"`+cid+`","name":"`+name+`","arguments":"{}"}`)
				case messagesAPI:
					calls = append(calls, `{"type":"tool_use","id":"`+cid+`","name":"`+name+`","input":{}}`)
				}
			}
			switch api {
			case chatAPI:
				items = append(items, `{"role":"assistant","content":null,"tool_calls":[`+strings.Join(calls, ",")+`]}`)
			case messagesAPI:
				items = append(items, `{"role":"assistant","content":[`+strings.Join(calls, ",")+`]}`)
			}
		case m.results:
			var blocks []string
			for _, cid := range pending {
				switch api {
				case chatAPI:
					items = append(items, `{"role":"tool","tool_call_id":"`+cid+`","content":"ok"}`)
				case responsesAPI:
					items = append(items, `{"type":"function_call_output","call_id":"`+cid+`","output":"ok"}`)
				case messagesAPI:
					blocks = append(blocks, `{"type":"tool_result","tool_use_id":"`+cid+`","content":"ok"}`)
				}
			}
			if api == messagesAPI {
				items = append(items, `{"role":"user","content":[`+strings.Join(blocks, ",")+`]}`)
			}
		}
	}
	for _, name := range c.tools {
		switch api {
		case chatAPI:
			tools = append(tools, `{"type":"function","function":{"name":"`+name+`","parameters":`+agentTools[name]+`}}`)
		case responsesAPI:
			tools = append(tools, `{"type":"function","name":"`+name+`","parameters":`+agentTools[name]+`}`)
		case messagesAPI:
			tools = append(tools, `{"name":"`+name+`","input_schema":`+agentTools[name]+`}`)
		}
	}
	fields := []string{`"stream":` + strconv.FormatBool(stream)}
	switch api {
	case chatAPI:
		fields = append(fields, `"messages":[`+strings.Join(items, ",")+`]`)
	case responsesAPI:
		fields = append(fields, `"input":[`+strings.Join(items, ",")+`]`)
	case messagesAPI:
		fields = append(fields, `"model":"`+testModel+`","max_tokens":1000`, `"messages":[`+strings.Join(items, ",")+`]`)
	}
	if len(tools) > 0 {
		fields = append(fields, `"tools":[`+strings.Join(tools, ",")+`]`)
	}
	choice := ""
	switch {
	case api == messagesAPI:
		typ := map[string]string{"": "auto", "none": "none", "required": "any"}[c.toolChoice]
		if typ == "" {
			choice = `{"type":"tool","name":"` + c.toolChoice + `"`
		} else {
			choice = `{"type":"` + typ + `"`
		}
		if c.serial {
			choice += `,"disable_parallel_tool_use":true`
		}
		choice += "}"
		if c.toolChoice == "" && !c.serial {
			choice = ""
		}
	case c.toolChoice == "none", c.toolChoice == "required":
		choice = js(c.toolChoice)
	case c.toolChoice != "" && api == chatAPI:
		choice = `{"type":"function","function":{"name":"` + c.toolChoice + `"}}`
	case c.toolChoice != "":
		choice = `{"type":"function","name":"` + c.toolChoice + `"}`
	}
	if choice != "" {
		fields = append(fields, `"tool_choice":`+choice)
	}
	if c.serial && api != messagesAPI {
		fields = append(fields, `"parallel_tool_calls":false`)
	}
	return "{" + strings.Join(fields, ",") + "}"
}

// gotCall is a tool call as a client reads it.
type gotCall struct{ Name, Args string }

// agentAnswer is an answer as a client reads it, in any API and form.
type agentAnswer struct {
	Calls []gotCall
	Text  string
}

// ask sends body to api and reads the answer, checking the wire shape of
// its calls: chat deltas indexed 0, 1, … in order, one Responses output
// item per call with its own output_index, one Messages tool_use block per
// call; distinct call ids; streamed arguments adding up to the final ones;
// one completion token per streamed call header and argument piece.
func ask(t *testing.T, ts *httptest.Server, api agentAPI, body string, stream bool) agentAnswer {
	t.Helper()
	var a agentAnswer
	ids := map[string]bool{}
	addID := func(id string) {
		if id == "" || ids[id] {
			t.Errorf("call id %q missing or repeated", id)
		}
		ids[id] = true
	}
	if !stream {
		resp, b := post(t, ts, string(api), body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
		doc := string(b)
		switch api {
		case chatAPI:
			msg := field(doc, "choices.0.message")
			for _, c := range msg.Get("tool_calls").Array() {
				addID(c.Get("id").Str)
				a.Calls = append(a.Calls, gotCall{c.Get("function.name").Str, c.Get("function.arguments").Str})
			}
			a.Text = msg.Get("content").Str
			if want := map[bool]string{true: "tool_calls", false: "stop"}[len(a.Calls) > 0]; field(doc, "choices.0.finish_reason").Str != want {
				t.Errorf("finish_reason %s, want %s", field(doc, "choices.0.finish_reason"), want)
			}
		case responsesAPI:
			for _, it := range field(doc, "output").Array() {
				switch it.Get("type").Str {
				case "function_call":
					addID(it.Get("call_id").Str)
					a.Calls = append(a.Calls, gotCall{it.Get("name").Str, it.Get("arguments").Str})
				case "message":
					a.Text += it.Get("content.0.text").Str
				}
			}
		case messagesAPI:
			for _, bl := range field(doc, "content").Array() {
				switch bl.Get("type").Str {
				case "tool_use":
					addID(bl.Get("id").Str)
					a.Calls = append(a.Calls, gotCall{bl.Get("name").Str, bl.Get("input").Raw})
				case "text":
					a.Text += bl.Get("text").Str
				}
			}
			if want := map[bool]string{true: "tool_use", false: "end_turn"}[len(a.Calls) > 0]; field(doc, "stop_reason").Str != want {
				t.Errorf("stop_reason %s, want %s", field(doc, "stop_reason"), want)
			}
		}
		return a
	}

	resp := send(t, context.Background(), ts, string(api), body)
	tokens, usage := 0, 0
	switch api {
	case chatAPI:
		s := collectChat(t, resp)
		for _, ev := range s.events {
			for _, ch := range ev.Choices {
				for _, d := range ch.Delta.ToolCalls {
					tokens++
					if d.Index == nil || *d.Index < len(a.Calls)-1 || *d.Index > len(a.Calls) {
						t.Fatalf("tool-call delta %+v out of order after %d calls", d, len(a.Calls))
					}
					if *d.Index == len(a.Calls) {
						addID(d.ID)
						a.Calls = append(a.Calls, gotCall{Name: *d.Function.Name})
						continue
					}
					a.Calls[*d.Index].Args += *d.Function.Arguments
				}
			}
		}
		a.Text = s.content[0]
	case responsesAPI:
		var done []gotCall
		var completed string
		for _, ev := range collectEvents(t, resp) {
			switch ev.name {
			case "response.output_item.added":
				if it := field(ev.data, "item"); it.Get("type").Str == "function_call" {
					tokens++
					if idx := field(ev.data, "output_index").Int(); idx != int64(len(a.Calls)) {
						t.Errorf("call %d at output_index %d", len(a.Calls), idx)
					}
					a.Calls = append(a.Calls, gotCall{Name: it.Get("name").Str})
				}
			case "response.function_call_arguments.delta":
				tokens++
				a.Calls[len(a.Calls)-1].Args += field(ev.data, "delta").Str
			case "response.output_item.done":
				if it := field(ev.data, "item"); it.Get("type").Str == "function_call" {
					addID(it.Get("call_id").Str)
					done = append(done, gotCall{it.Get("name").Str, it.Get("arguments").Str})
				}
			case "response.output_text.delta":
				tokens++
				a.Text += field(ev.data, "delta").Str
			case "response.completed":
				completed = ev.data
			}
		}
		if diff := cmp.Diff(a.Calls, done); diff != "" {
			t.Errorf("streamed calls and done items differ (-streamed +done):\n%s", diff)
		}
		usage = int(field(completed, "response.usage.output_tokens").Int())
		if n := len(field(completed, "response.output").Array()); len(a.Calls) > 0 && n != len(a.Calls) {
			t.Errorf("response.completed has %d output items, want %d calls", n, len(a.Calls))
		}
	case messagesAPI:
		blocks := map[int64]int{} // block index → call
		for _, ev := range collectEvents(t, resp) {
			idx := field(ev.data, "index").Int()
			switch ev.name {
			case "content_block_start":
				if bl := field(ev.data, "content_block"); bl.Get("type").Str == "tool_use" {
					tokens++
					addID(bl.Get("id").Str)
					blocks[idx] = len(a.Calls)
					a.Calls = append(a.Calls, gotCall{Name: bl.Get("name").Str})
				}
			case "content_block_delta":
				tokens++
				switch field(ev.data, "delta.type").Str {
				case "input_json_delta":
					a.Calls[blocks[idx]].Args += field(ev.data, "delta.partial_json").Str
				case "text_delta":
					a.Text += field(ev.data, "delta.text").Str
				}
			case "message_delta":
				usage = int(field(ev.data, "usage.output_tokens").Int())
			}
		}
	}
	if api != chatAPI && usage != tokens {
		t.Errorf("usage %d output tokens, want one per streamed piece (%d)", usage, tokens)
	}
	return a
}

// checkArgs checks that a call's arguments are valid for its tool's schema:
// a JSON object holding every required property with its type.
func checkArgs(t *testing.T, c gotCall) {
	t.Helper()
	schema, ok := agentTools[c.Name]
	if !ok {
		t.Errorf("call to %q, which was not offered", c.Name)
		return
	}
	if !gjson.Valid(c.Args) || !gjson.Parse(c.Args).IsObject() {
		t.Errorf("%s arguments %q: not a JSON object", c.Name, c.Args)
		return
	}
	args := gjson.Parse(c.Args)
	for _, req := range gjson.Get(schema, "required").Array() {
		v := args.Get(req.Str)
		want := gjson.Get(schema, "properties."+req.Str+".type").Str
		switch {
		case !v.Exists():
			t.Errorf("%s arguments %s lack %q", c.Name, c.Args, req.Str)
		case want == "string" && (v.Type != gjson.String || v.Str == ""),
			want == "integer" && v.Type != gjson.Number:
			t.Errorf("%s arguments %s: %q is not a %s", c.Name, c.Args, req.Str, want)
		}
	}
}

// TestAgentTurns: what an agent loop gets at each turn, in all three APIs,
// stream and non-stream alike.
func TestAgentTurns(t *testing.T) {
	five := 5
	tests := []struct {
		name string
		conv conversation
		// want is "calls", "text", "one call" or the calls' names
		// (comma-separated).
		want string
	}{
		{"a task calls tools", conversation{msgs: msgs(user("fix the bug")), tools: agentToolNames}, "calls"},
		{"one tool offered", conversation{msgs: msgs(user("fix the bug")), tools: []string{"Write"}}, "Write"},
		{"after a tool result: text", conversation{msgs: msgs(user("fix the bug"), rounds(1)), tools: agentToolNames}, "text"},
		{"after parallel results: text", conversation{msgs: msgs(user("fix the bug"), called("Read", "Bash"), results()), tools: agentToolNames}, "text"},
		{"a new task after two rounds calls", conversation{msgs: msgs(user("a"), rounds(2), said("done"), user("now b")), tools: agentToolNames}, "calls"},
		{"three rounds, then a user turn: text", conversation{msgs: msgs(user("a"), rounds(3), user("<task-notification>agent done</task-notification>")), tools: agentToolNames}, "text"},
		{"parallel rounds count once each", conversation{msgs: msgs(user("a"), called("Read", "Bash"), results(), called("Glob", "Write"), results(), user("next")), tools: agentToolNames}, "calls"},
		{"three rounds, required: calls", conversation{msgs: msgs(user("a"), rounds(3), user("b")), tools: agentToolNames, toolChoice: "required"}, "calls"},
		{"after a tool result, named: that call", conversation{msgs: msgs(user("a"), rounds(1)), tools: agentToolNames, toolChoice: "Bash"}, "Bash"},
		{"named: one call", conversation{msgs: msgs(user("a")), tools: agentToolNames, toolChoice: "Glob"}, "Glob"},
		{"none: text", conversation{msgs: msgs(user("a")), tools: agentToolNames, toolChoice: "none"}, "text"},
		{"no tools: text", conversation{msgs: msgs(user("a"))}, "text"},
		{"parallel calls disabled: one call", conversation{msgs: msgs(user("fix the bug")), tools: agentToolNames, serial: true}, "one call"},
		{"scenario allows more rounds", conversation{msgs: msgs(user("a"), rounds(3), user("b")), tools: agentToolNames}, "calls"},
	}
	opts := map[string][]vllmsim.Option{
		"scenario allows more rounds": {vllmsim.WithScenario(vllmsim.Scenario{MaxToolRounds: &five})},
	}
	for _, tc := range tests {
		_, ts := start(t, vllmsim.Profile{DefaultMaxTokens: 6}, opts[tc.name]...)
		for _, api := range agentAPIs {
			t.Run(tc.name+"/"+string(api)[4:], func(t *testing.T) {
				got := ask(t, ts, api, tc.conv.body(api, false), false)
				streamed := ask(t, ts, api, tc.conv.body(api, true), true)
				if diff := cmp.Diff(got, streamed); diff != "" {
					t.Errorf("stream and non-stream answers differ (-non-stream +stream):\n%s", diff)
				}
				var names []string
				for _, c := range got.Calls {
					names = append(names, c.Name)
					checkArgs(t, c)
				}
				if len(slices.Compact(slices.Sorted(slices.Values(names)))) != len(names) {
					t.Errorf("calls %v: a tool called twice", names)
				}
				switch tc.want {
				case "text":
					if len(got.Calls) != 0 || got.Text == "" {
						t.Errorf("answer %+v, want text", got)
					}
				case "calls":
					if len(got.Calls) == 0 || len(got.Calls) > 3 {
						t.Errorf("answer %+v, want one to three calls", got)
					}
				case "one call":
					if len(got.Calls) != 1 {
						t.Errorf("answer %+v, want one call", got)
					}
				default:
					if strings.Join(names, ",") != tc.want {
						t.Errorf("answer %+v, want calls %s", got, tc.want)
					}
				}
			})
		}
	}
}

// TestAgentParallelCalls: with parallel calls allowed, some tasks get
// several distinct calls in one turn and none more than three; the choice
// is the same for the same request.
func TestAgentParallelCalls(t *testing.T) {
	_, ts := start(t, vllmsim.Profile{})
	for _, api := range agentAPIs {
		t.Run(string(api)[4:], func(t *testing.T) {
			counts := map[int]int{}
			called := map[string]bool{}
			for i := range 12 {
				conv := conversation{msgs: msgs(user("task " + strings.Repeat("x", 4*i))), tools: agentToolNames}
				got := ask(t, ts, api, conv.body(api, i%2 == 0), i%2 == 0)
				again := ask(t, ts, api, conv.body(api, false), false)
				if diff := cmp.Diff(got, again); diff != "" {
					t.Errorf("task %d answered differently the second time:\n%s", i, diff)
				}
				counts[len(got.Calls)]++
				for _, c := range got.Calls {
					called[c.Name] = true
				}
			}
			if counts[0] > 0 || counts[1] == 0 || counts[2]+counts[3] == 0 || len(counts) > 3 {
				t.Errorf("calls per turn %v: want single and parallel turns, never none or more than three", counts)
			}
			if len(called) < 3 {
				t.Errorf("tools called %v: want most of the four", called)
			}
		})
	}
}

// TestResponsesAgentHistory: a custom tool's output ends the turn as a
// function call's output does, and previous_response_id carries the tool
// rounds on.
func TestResponsesAgentHistory(t *testing.T) {
	_, ts := start(t, vllmsim.Profile{DefaultMaxTokens: 4})
	tools := `"tools":[{"type":"function","name":"Read","parameters":` + agentTools["Read"] + `}]`
	after := `{"input":[{"role":"user","content":"a"},{"type":"custom_tool_call","call_id":"c1","name":"apply_patch","input":"x"},
		{"type":"custom_tool_call_output","call_id":"c1","output":"ok"}],` + tools + `}`
	if got := ask(t, ts, responsesAPI, after, false); len(got.Calls) != 0 || got.Text == "" {
		t.Errorf("after custom_tool_call_output: %+v, want text", got)
	}

	// Three rounds through previous_response_id, then a user turn: text.
	_, b := post(t, ts, "/v1/responses", `{"input":"go",`+tools+`}`)
	for round := 1; ; round++ {
		id, call := field(string(b), "id").Str, field(string(b), "output.0.call_id").Str
		if call == "" {
			t.Fatalf("round %d: %s, want a call", round, b)
		}
		_, b = post(t, ts, "/v1/responses", `{"previous_response_id":"`+id+`","input":[{"type":"function_call_output","call_id":"`+call+`","output":"ok"}],`+tools+`}`)
		if field(string(b), "output.0.type").Str != "message" {
			t.Fatalf("round %d: the tool result got %s, want text", round, b)
		}
		id = field(string(b), "id").Str
		_, b = post(t, ts, "/v1/responses", `{"previous_response_id":"`+id+`","input":"next",`+tools+`}`)
		if round == vllmsim.DefaultMaxToolRounds {
			if typ := field(string(b), "output.0.type").Str; typ != "message" {
				t.Errorf("after %d rounds a user turn got %s, want text", round, b)
			}
			break
		}
	}
}
