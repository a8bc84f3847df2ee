package pump

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/tidwall/gjson"

	"github.com/switchyard/switchyard/router/internal/wire"
)

// namedEvent is one event of a Responses stream: its name and its data.
type namedEvent struct{ Name, Data string }

func (e namedEvent) String() string { return "event: " + e.Name + "\ndata: " + e.Data + "\n\n" }

func joinNamed(evs []namedEvent) string {
	var b strings.Builder
	for _, e := range evs {
		b.WriteString(e.String())
	}
	return b.String()
}

func jsonQ(v any) string { b, _ := json.Marshal(v); return string(b) }

// readNamed parses a well-formed LF stream of named events, with each
// data compacted.
func readNamed(t *testing.T, b []byte) []namedEvent {
	t.Helper()
	var out []namedEvent
	for _, raw := range strings.Split(strings.TrimSuffix(string(b), "\n\n"), "\n\n") {
		var e namedEvent
		for _, line := range strings.Split(raw, "\n") {
			if v, ok := strings.CutPrefix(line, "event: "); ok {
				e.Name = v
			} else if v, ok := strings.CutPrefix(line, "data: "); ok {
				e.Data = gjson.Parse(v).Get("@ugly").Raw
			} else {
				t.Fatalf("unexpected line %q in %q", line, raw)
			}
		}
		out = append(out, e)
	}
	return out
}

// vllmCall is the upstream events of one function call as vLLM streams
// it, numbered from seq: the item added, a delta per piece, the arguments
// done (only after a delta, as vLLM does) and the item done.
func vllmCall(name, id string, index, seq int, pieces []string, args string) []namedEvent {
	n := func() string { seq++; return strconv.Itoa(seq - 1) }
	item := func(status, args string) string {
		return `{"arguments":` + jsonQ(args) + `,"call_id":"call_` + id + `","name":"` + name + `","type":"function_call","id":"fc_` + id + `","status":"` + status + `"}`
	}
	idx := strconv.Itoa(index)
	evs := []namedEvent{{"response.output_item.added", `{"item":` + item("in_progress", "") + `,"output_index":` + idx + `,"sequence_number":` + n() + `,"type":"response.output_item.added"}`}}
	for _, p := range pieces {
		evs = append(evs, namedEvent{"response.function_call_arguments.delta", `{"delta":` + jsonQ(p) + `,"item_id":"fc_` + id + `","output_index":` + idx + `,"sequence_number":` + n() + `,"type":"response.function_call_arguments.delta"}`})
	}
	if len(pieces) > 0 {
		evs = append(evs, namedEvent{"response.function_call_arguments.done", `{"arguments":` + jsonQ(args) + `,"item_id":"fc_` + id + `","name":"` + name + `","output_index":` + idx + `,"sequence_number":` + n() + `,"type":"response.function_call_arguments.done"}`})
	}
	return append(evs, namedEvent{"response.output_item.done", `{"item":` + item("completed", args) + `,"output_index":` + idx + `,"sequence_number":` + n() + `,"type":"response.output_item.done"}`})
}

// TestCustomCallEvents: a replica's streamed call to the function a
// custom tool was offered as reaches the client as a custom tool call:
// the item added with input "", a delta per piece of the arguments that
// brings characters of the input (split inside escapes, \u sequences and
// surrogate pairs), the input done, the item done and the response's
// output; events are numbered on without gaps. A call to a function
// passes through unchanged. Arguments of another shape still end in a
// custom tool call, with the raw arguments as its input; arguments cut
// inside the input's string, with what the deltas sent.
func TestCustomCallEvents(t *testing.T) {
	fCall := vllmCall("f", "f", 0, 1, []string{`{"input":"x"}`}, `{"input":"x"}`)
	delta := func(piece string, seq int) namedEvent {
		return namedEvent{"response.custom_tool_call_input.delta", `{"type":"response.custom_tool_call_input.delta","item_id":"fc_p","output_index":1,"delta":` + jsonQ(piece) + `,"sequence_number":` + jsonQ(seq) + `}`}
	}
	done := func(input string, seq int) namedEvent {
		return namedEvent{"response.custom_tool_call_input.done", `{"type":"response.custom_tool_call_input.done","item_id":"fc_p","output_index":1,"input":` + jsonQ(input) + `,"sequence_number":` + jsonQ(seq) + `}`}
	}
	item := func(typ, input, status string, seq int) namedEvent {
		return namedEvent{typ, `{"item":{"type":"custom_tool_call","id":"fc_p","call_id":"call_p","name":"apply_patch","input":` + jsonQ(input) + `,"status":"` + status + `"},"output_index":1,"sequence_number":` + jsonQ(seq) + `,"type":"` + typ + `"}`}
	}
	for _, tc := range []struct {
		name   string
		pieces []string
		args   string
		want   []namedEvent // the custom call's events, from sequence number 5
		input  string       // of the call in response.completed
	}{
		{"escapes split anywhere",
			[]string{`{"input": "`, `*** Begin\`, `n \"\u00`, `e9\ud83d`, `\ude`, `00\" end`, `"}`},
			`{"input": "*** Begin\n \"\u00e9\ud83d\ude00\" end"}`,
			[]namedEvent{item("response.output_item.added", "", "in_progress", 5), delta("*** Begin", 6), delta("\n \"", 7), delta("é", 8),
				delta("😀\" end", 9), done("*** Begin\n \"é😀\" end", 10), item("response.output_item.done", "*** Begin\n \"é😀\" end", "completed", 11)},
			"*** Begin\n \"é😀\" end"},
		{"one piece", []string{`{"input":"ls"}`}, `{"input":"ls"}`,
			[]namedEvent{item("response.output_item.added", "", "in_progress", 5), delta("ls", 6), done("ls", 7), item("response.output_item.done", "ls", "completed", 8)}, "ls"},
		{"another shape: the raw arguments", []string{`{"cmd"`, `:"ls"}`}, `{"cmd":"ls"}`,
			[]namedEvent{item("response.output_item.added", "", "in_progress", 5), delta(`{"cmd":"ls"}`, 6), done(`{"cmd":"ls"}`, 7), item("response.output_item.done", `{"cmd":"ls"}`, "completed", 8)}, `{"cmd":"ls"}`},
		{"plain text", []string{`*** Begin`, ` Patch`}, `*** Begin Patch`,
			[]namedEvent{item("response.output_item.added", "", "in_progress", 5), delta(`*** Begin Patch`, 6), done(`*** Begin Patch`, 7), item("response.output_item.done", `*** Begin Patch`, "completed", 8)}, `*** Begin Patch`},
		{"another member: the input", []string{`{"input":"a`, `b","x":1}`}, `{"input":"ab","x":1}`,
			[]namedEvent{item("response.output_item.added", "", "in_progress", 5), delta("a", 6), delta("b", 7), done("ab", 8), item("response.output_item.done", "ab", "completed", 9)}, "ab"},
		{"cut arguments: what the deltas sent", []string{`{"input":"a`, `b`}, `{"input":"ab`,
			[]namedEvent{item("response.output_item.added", "", "in_progress", 5), delta("a", 6), delta("b", 7), done("ab", 8), item("response.output_item.done", "ab", "completed", 9)}, "ab"},
		{"done says more than the deltas", []string{`{"input":"a`}, `{"input":"abc"}`,
			[]namedEvent{item("response.output_item.added", "", "in_progress", 5), delta("a", 6), delta("bc", 7), done("abc", 8), item("response.output_item.done", "abc", "completed", 9)}, "abc"},
		{"no deltas", nil, `{"input":"q"}`,
			[]namedEvent{item("response.output_item.added", "", "in_progress", 5), item("response.output_item.done", "q", "completed", 6)}, "q"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := []namedEvent{{"response.created", `{"response":{"id":"resp_1","object":"response","output":[],"status":"in_progress"},"sequence_number":0,"type":"response.created"}`}}
			up = append(up, fCall...)
			call := vllmCall("apply_patch", "p", 1, len(up), tc.pieces, tc.args)
			up = append(up, call...)
			fItem := gjson.Get(fCall[len(fCall)-1].Data, "item").Raw
			pItem := gjson.Get(call[len(call)-1].Data, "item").Raw
			up = append(up, namedEvent{"response.completed", `{"response":{"id":"resp_1","object":"response","output":[` + fItem + `,` + pItem +
				`],"status":"completed","usage":{"input_tokens":3,"output_tokens":9,"total_tokens":12}},"sequence_number":` + jsonQ(len(up)) + `,"type":"response.completed"}`})
			rec := httptest.NewRecorder()
			p := &Pump{W: rec, RC: http.NewResponseController(rec), API: wire.Responses, Custom: wire.CustomTools{"apply_patch"}}
			if err := p.Run(strings.NewReader(joinNamed(up))); err != nil {
				t.Fatalf("run: %v", err)
			}
			got := readNamed(t, rec.Body.Bytes())
			want := readNamed(t, []byte(joinNamed(append(up[:1+len(fCall):1+len(fCall)], tc.want...))))
			if len(got) != len(want)+1 {
				t.Fatalf("got %d events, want %d:\n%s", len(got), len(want)+1, rec.Body)
			}
			if d := cmp.Diff(want, got[:len(got)-1]); d != "" {
				t.Errorf("events (-want +got):\n%s", d)
			}
			last := got[len(got)-1]
			wantItem := `{"type":"custom_tool_call","id":"fc_p","call_id":"call_p","name":"apply_patch","input":` + jsonQ(tc.input) + `,"status":"completed"}`
			if last.Name != "response.completed" || gjson.Get(last.Data, "sequence_number").Int() != int64(len(want)) ||
				gjson.Get(last.Data, "response.output.0").Raw != gjson.Parse(fItem).Get("@ugly").Raw || gjson.Get(last.Data, "response.output.1").Raw != wantItem {
				t.Errorf("terminal event %s, want sequence_number %d, output [%s, %s]", last.Data, len(want), fItem, wantItem)
			}
		})
	}
}
