package pump

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/switchyard/switchyard/router/internal/wire"

	"github.com/tidwall/gjson"
)

// customCallStream is a Responses stream with one call to the custom tool
// apply_patch as vLLM streams it: a delta per piece of the arguments, the
// arguments done (doneArgs) and the item done and response.completed
// (both with itemArgs).
func customCallStream(pieces []string, doneArgs, itemArgs string) string {
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	seq := 0
	n := func() string { seq++; return strconv.Itoa(seq - 1) }
	item := func(status, args string) string {
		return `{"arguments":` + q(args) + `,"call_id":"call_p","name":"apply_patch","type":"function_call","id":"fc_p","status":"` + status + `"}`
	}
	var b strings.Builder
	ev := func(typ, data string) { b.WriteString("event: " + typ + "\ndata: " + data + "\n\n") }
	ev("response.created", `{"type":"response.created","sequence_number":`+n()+`,"response":{"id":"resp_1","object":"response","output":[],"status":"in_progress"}}`)
	ev("response.output_item.added", `{"type":"response.output_item.added","item":`+item("in_progress", "")+`,"output_index":0,"sequence_number":`+n()+`}`)
	for _, p := range pieces {
		ev("response.function_call_arguments.delta", `{"type":"response.function_call_arguments.delta","delta":`+q(p)+`,"item_id":"fc_p","output_index":0,"sequence_number":`+n()+`}`)
	}
	ev("response.function_call_arguments.done", `{"type":"response.function_call_arguments.done","arguments":`+q(doneArgs)+`,"item_id":"fc_p","name":"apply_patch","output_index":0,"sequence_number":`+n()+`}`)
	ev("response.output_item.done", `{"type":"response.output_item.done","item":`+item("completed", itemArgs)+`,"output_index":0,"sequence_number":`+n()+`}`)
	ev("response.completed", `{"type":"response.completed","sequence_number":`+n()+`,"response":{"id":"resp_1","object":"response","output":[`+item("completed", itemArgs)+`],"status":"completed"}}`)
	return b.String()
}

// TestCustomCallDeltasMatchDone: however the model or the replica garbles
// a custom tool call's arguments, the client's deltas add up to the input
// of its .done event, and the item of response.output_item.done and of
// response.completed carry the same input (issue 31 item 7). Before the
// fix, arguments that began as {"input": "… and then went wrong (cut,
// a bad escape, a raw control character, text after the object) sent the
// decoded characters as deltas and the raw arguments as the input, and a
// replica whose done event disagreed with its deltas had the client's
// deltas contradict its input.
func TestCustomCallDeltasMatchDone(t *testing.T) {
	for _, c := range []struct {
		name               string
		pieces             []string
		doneArgs, itemArgs string
		want               string
	}{
		{"well formed", []string{`{"input":"a`, `b"}`}, `{"input":"ab"}`, `{"input":"ab"}`, "ab"},
		{"cut inside the string", []string{`{"input":"a`, `b`}, `{"input":"ab`, `{"input":"ab`, "ab"},
		{"bad escape", []string{`{"input":"a\q`, `b"}`}, `{"input":"a\qb"}`, `{"input":"a\qb"}`, `a\qb`},
		{"bad hex", []string{`{"input":"a\u00g`, `0"}`}, `{"input":"a\u00g0"}`, `{"input":"a\u00g0"}`, `a\u00g0`},
		{"control character", []string{"{\"input\":\"a\nb\"}"}, "{\"input\":\"a\nb\"}", "{\"input\":\"a\nb\"}", "a\nb"},
		{"text after the object", []string{`{"input":"a"}`, ` x`}, `{"input":"a"} x`, `{"input":"a"} x`, "a"},
		{"another shape", []string{`{"cmd"`, `:"ls"}`}, `{"cmd":"ls"}`, `{"cmd":"ls"}`, `{"cmd":"ls"}`},
		{"done disagrees with the deltas", []string{`{"input":"ab"}`}, `{"input":"xy"}`, `{"input":"xy"}`, "ab"},
		{"item disagrees with the done event", []string{`{"input":"ab"}`}, `{"input":"ab"}`, `{"input":"xy"}`, "ab"},
		{"done says more", []string{`{"input":"a`}, `{"input":"abc"}`, `{"input":"abc"}`, "abc"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			p := &Pump{W: rec, RC: http.NewResponseController(rec), API: wire.Responses, Custom: wire.CustomTools{"apply_patch"}}
			if err := p.Run(strings.NewReader(customCallStream(c.pieces, c.doneArgs, c.itemArgs))); err != nil {
				t.Fatalf("run: %v", err)
			}
			var deltas strings.Builder
			got := map[string]string{}
			for i, d := range sseEvents(rec.Body.Bytes()) {
				if n := gjson.Get(d, "sequence_number").Int(); n != int64(i) {
					t.Errorf("event %d numbered %d: %s", i, n, d)
				}
				switch typ := gjson.Get(d, "type").Str; typ {
				case "response.custom_tool_call_input.delta":
					deltas.WriteString(gjson.Get(d, "delta").Str)
				case "response.custom_tool_call_input.done":
					got[typ] = gjson.Get(d, "input").Str
				case "response.output_item.done":
					got[typ] = gjson.Get(d, "item.input").Str
				case "response.completed":
					got[typ] = gjson.Get(d, "response.output.0.input").Str
				}
			}
			if deltas.String() != c.want {
				t.Errorf("deltas add up to %q, want %q", deltas.String(), c.want)
			}
			for _, typ := range []string{"response.custom_tool_call_input.done", "response.output_item.done", "response.completed"} {
				if in, ok := got[typ]; !ok || in != c.want {
					t.Errorf("%s input %q (sent %t), want %q", typ, in, ok, c.want)
				}
			}
		})
	}
}
