package router_test

import (
	"context"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"
	"github.com/tidwall/gjson"
)

// sseEvent is one event of a Responses stream: its name and its data.
type sseEvent struct{ name, data string }

// readEvents parses a well-formed LF stream of named events, with each
// data compacted.
func readEvents(t *testing.T, b []byte) []sseEvent {
	t.Helper()
	var out []sseEvent
	for _, raw := range strings.Split(strings.TrimSuffix(string(b), "\n\n"), "\n\n") {
		var e sseEvent
		for _, line := range strings.Split(raw, "\n") {
			if v, ok := strings.CutPrefix(line, "event: "); ok {
				e.name = v
			} else if v, ok := strings.CutPrefix(line, "data: "); ok {
				e.data = gjson.Parse(v).Get("@ugly").Raw
			} else {
				t.Fatalf("unexpected line %q in %q", line, raw)
			}
		}
		out = append(out, e)
	}
	return out
}

// TestCustomToolsSimulator: against the simulator, which answers tool calls
// with arguments valid for the tool's schema, a forced custom tool comes
// back as a custom tool call with a string input, after the replica was
// offered a function tool; the call and its output sent back reach the
// replica as a function call and its output, and the answer is text.
// (Streamed, the call's events are pump's TestCustomCallEvents, and end
// to end TestCustomToolsWithOpenAISDK's.)
func TestCustomToolsSimulator(t *testing.T) {
	up := startReplica(t, fast("m"))
	gw := oneReplicaGateway(t, up.Srv.URL, "", "")
	const tools = `"tools":[{"type":"custom","name":"apply_patch","description":"Edit files.","format":{"type":"grammar","syntax":"lark","definition":"start: begin_patch hunk+ end_patch"}},{"type":"function","name":"f","parameters":{"type":"object","properties":{"x":{"type":"string"}}}}],"tool_choice":{"type":"custom","name":"apply_patch"}`

	resp, body := post(t, gw.API.URL+"/v1/responses", `{"model":"m","input":"patch it",`+tools+`}`, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	call := gjson.GetBytes(body, "output.0")
	if gjson.GetBytes(body, "output.#").Int() != 1 || call.Get("type").Str != "custom_tool_call" || call.Get("name").Str != "apply_patch" ||
		call.Get("input").Type != gjson.String || call.Get("input").Str == "" || call.Get("call_id").Str == "" || call.Get("arguments").Exists() {
		t.Fatalf("output %s: want one custom tool call with a string input", gjson.GetBytes(body, "output").Raw)
	}
	sent := gjson.ParseBytes(up.LastBody())
	fn := sent.Get(`tools.#(name=="apply_patch")`)
	if fn.Get("type").Str != "function" || fn.Get("parameters.properties.input.type").Str != "string" || fn.Get("parameters.required").Raw != `["input"]` ||
		!strings.Contains(fn.Get("description").Str, "must follow this lark grammar") || !strings.Contains(fn.Get("description").Str, "start: begin_patch hunk+ end_patch") ||
		sent.Get("tool_choice").Raw != `{"type":"function","name":"apply_patch"}` {
		t.Errorf("the replica was sent tools %s, tool_choice %s", sent.Get("tools").Raw, sent.Get("tool_choice").Raw)
	}

	input := `*** Begin Patch\n*** Add File: a.txt\n+\"hi\"\n*** End Patch\n`
	resp, body = post(t, gw.API.URL+"/v1/responses", `{"model":"m",`+tools[:strings.Index(tools, `,"tool_choice"`)]+`,"input":[{"role":"user","content":"patch it"},`+
		`{"type":"custom_tool_call","call_id":"call_1","name":"apply_patch","input":"`+input+`"},{"type":"custom_tool_call_output","call_id":"call_1","output":"Done!"}]}`, nil)
	if resp.StatusCode != 200 || gjson.GetBytes(body, "output.0.type").Str != "message" {
		t.Fatalf("round trip: status %d: %s", resp.StatusCode, body)
	}
	items := gjson.GetBytes(up.LastBody(), "input")
	if c := items.Get("1"); c.Get("type").Str != "function_call" || c.Get("call_id").Str != "call_1" || c.Get("name").Str != "apply_patch" ||
		gjson.Get(c.Get("arguments").Str, "input").Str != "*** Begin Patch\n*** Add File: a.txt\n+\"hi\"\n*** End Patch\n" {
		t.Errorf("the replica got the call as %s", c.Raw)
	}
	if o := items.Get("2"); o.Raw != `{"type":"function_call_output","call_id":"call_1","output":"Done!"}` {
		t.Errorf("the replica got the output as %s", o.Raw)
	}
}

// TestCustomToolsWithOpenAISDK: the official OpenAI Go SDK offers a custom
// tool, reads its call from a stream (deltas, done, the item, the
// completed response) and sends the call and its output back.
func TestCustomToolsWithOpenAISDK(t *testing.T) {
	up := startReplica(t, fast("m"))
	gw := oneReplicaGateway(t, up.Srv.URL, "", "")
	c := sdk(gw)
	ctx := context.Background()
	tool := responses.ToolParamOfCustom("apply_patch")
	tool.OfCustom.Description = openai.String("Edit files.")
	tool.OfCustom.Format = shared.CustomToolInputFormatUnionParam{OfGrammar: &shared.CustomToolInputFormatGrammarParam{Syntax: "lark", Definition: "start: /.+/"}}
	params := responses.ResponseNewParams{Model: "m", Tools: []responses.ToolUnionParam{tool},
		ToolChoice: responses.ResponseNewParamsToolChoiceUnion{OfCustomTool: &responses.ToolChoiceCustomParam{Name: "apply_patch"}},
		Input:      responses.ResponseNewParamsInputUnion{OfString: openai.String("patch it")}}
	stream := c.Responses.NewStreaming(ctx, params)
	var deltas, done string
	var item, final responses.ResponseCustomToolCall
	for stream.Next() {
		switch ev := stream.Current(); ev.Type {
		case "response.custom_tool_call_input.delta":
			deltas += ev.AsResponseCustomToolCallInputDelta().Delta
		case "response.custom_tool_call_input.done":
			done = ev.AsResponseCustomToolCallInputDone().Input
		case "response.output_item.done":
			item = ev.AsResponseOutputItemDone().Item.AsCustomToolCall()
		case "response.completed":
			if out := ev.AsResponseCompleted().Response.Output; len(out) == 1 && out[0].Type == "custom_tool_call" {
				final = out[0].AsCustomToolCall()
			}
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if deltas == "" || done != deltas || item.Input != deltas || item.Name != "apply_patch" || item.CallID == "" || final.Input != deltas || final.Name != "apply_patch" {
		t.Fatalf("deltas %q, done %q, item %s, completed %s", deltas, done, item.RawJSON(), final.RawJSON())
	}
	params.ToolChoice = responses.ResponseNewParamsToolChoiceUnion{}
	params.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
		responses.ResponseInputItemParamOfMessage("patch it", responses.EasyInputMessageRoleUser),
		responses.ResponseInputItemParamOfCustomToolCall(final.CallID, final.Input, final.Name),
		responses.ResponseInputItemParamOfCustomToolCallOutput(final.CallID, "Done!"),
	}}
	answer, err := c.Responses.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if answer.OutputText() == "" {
		t.Errorf("answer %s: want text after the tool's output", answer.RawJSON())
	}
	if got := gjson.GetBytes(up.LastBody(), "input.1.arguments").Str; gjson.Get(got, "input").Str != final.Input {
		t.Errorf("the replica got arguments %s for input %q", got, final.Input)
	}
}

// TestCustomToolCallNotResumed: with resume on, a stream cut inside a
// custom tool call is not continued on another replica (a tool call never
// is): it ends with the error event after the custom tool call events the
// client was sent, and the other replica is not asked.
func TestCustomToolCallNotResumed(t *testing.T) {
	gw, a, b := resumeGateway(t, 5, "")
	const req = `{"model":"m","stream":true,"input":"patch it","tools":[{"type":"custom","name":"apply_patch"}],"tool_choice":{"type":"custom","name":"apply_patch"}}`
	resp, body := post(t, gw.API.URL+"/v1/responses", req, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	evs := readEvents(t, body)
	last := evs[len(evs)-1]
	if last.name != "error" || gjson.Get(last.data, "code").Str != "stream_interrupted" || gjson.Get(last.data, "sequence_number").Int() != int64(len(evs)-1) {
		t.Fatalf("last event %s %s of %d: want the error event numbered after the others\n%s", last.name, last.data, len(evs), body)
	}
	var added bool
	for _, e := range evs {
		switch {
		case e.name == "response.output_item.added":
			added = gjson.Get(e.data, "item.type").Str == "custom_tool_call"
		case strings.HasPrefix(e.name, "response.function_call"):
			t.Errorf("a function call event reached the client: %s", e.data)
		}
	}
	if !added || a.Count() != 1 || b.Count() != 0 {
		t.Errorf("custom call added %v; replicas asked: a %d, b %d (want 1, 0)\n%s", added, a.Count(), b.Count(), body)
	}
}
