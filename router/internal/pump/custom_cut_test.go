package pump

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/tidwall/gjson"

	"github.com/switchyard/switchyard/router/internal/wire"
)

// TestCustomCallCut: a stream its replica cuts inside a custom tool call
// ends with the error event, numbered after the last event the client was
// sent (not the replica's last); a delta for an item that was never added
// as a call to a custom tool passes through unchanged.
func TestCustomCallCut(t *testing.T) {
	stray := namedEvent{"response.function_call_arguments.delta", `{"delta":"{\"input\":\"","item_id":"fc_other","output_index":0,"sequence_number":1,"type":"response.function_call_arguments.delta"}`}
	up := []namedEvent{{"response.created", `{"response":{"id":"resp_1","object":"response","output":[],"status":"in_progress"},"sequence_number":0,"type":"response.created"}`}, stray}
	call := vllmCall("apply_patch", "p", 1, 2, []string{`{"input":"`, `ab`, `\`}, `{"input":"ab\`)
	up = append(up, call[:4]...) // added, three deltas: then the cut
	rec := httptest.NewRecorder()
	p := &Pump{W: rec, RC: http.NewResponseController(rec), API: wire.Responses, Custom: wire.CustomTools{"apply_patch"}}
	if err := p.Run(strings.NewReader(joinNamed(up))); !errors.Is(err, ErrStreamCut) {
		t.Fatalf("run = %v, want a cut stream", err)
	}
	p.Fail(&wire.APIError{Status: 502, Type: "server_error", Code: "stream_interrupted", Message: "cut"})
	got := readNamed(t, rec.Body.Bytes())
	if len(got) != 5 {
		t.Fatalf("got %d events, want 5:\n%s", len(got), rec.Body.Bytes())
	}
	want := readNamed(t, []byte(joinNamed([]namedEvent{stray,
		{"response.output_item.added", `{"item":{"type":"custom_tool_call","id":"fc_p","call_id":"call_p","name":"apply_patch","input":"","status":"in_progress"},"output_index":1,"sequence_number":2,"type":"response.output_item.added"}`},
		{"response.custom_tool_call_input.delta", `{"type":"response.custom_tool_call_input.delta","item_id":"fc_p","output_index":1,"delta":"ab","sequence_number":3}`}})))
	if d := cmp.Diff(want, got[1:4]); d != "" {
		t.Errorf("events (-want +got):\n%s", d)
	}
	if e := got[4]; e.Name != "error" || gjson.Get(e.Data, "code").Str != "stream_interrupted" || gjson.Get(e.Data, "sequence_number").Int() != 4 {
		t.Errorf("last event %s %s: want the error event numbered 4", e.Name, e.Data)
	}
}
