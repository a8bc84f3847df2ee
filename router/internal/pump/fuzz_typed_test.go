package pump

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"unicode/utf8"

	"github.com/switchyard/switchyard/router/internal/wire"

	"github.com/tidwall/gjson"
)

// FuzzTypedPump runs the pump over a Responses or Messages stream split at
// arbitrary offsets, with a custom tool offered on Responses: the verdict
// and what the client gets must not depend on the split, the client's
// bytes are valid UTF-8 with no lone surrogate escape, events that were
// JSON stay JSON, nothing follows the terminal event, and a custom tool
// call's deltas add up to its done event's input.
func FuzzTypedPump(f *testing.F) {
	f.Add([]byte(customCallStream([]string{`{"input":"a\q`, `b"}`}, `{"input":"a\qb"}`, `{"input":"a\qb"}`)), uint64(0x0123456789abcdef), false)
	f.Add([]byte(customCallStream([]string{`{"input":"ab`}, `{"input":"xy"}`, `{"input":"ab"}`)), uint64(77), false)
	f.Add([]byte("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\"}}\n\nevent: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"\xff\\ud800\"}}\n\n"+
		"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\nevent: ping\ndata: {\"type\":\"ping\"}\n\n"), uint64(5), true)
	// A call without ids: the done event the gateway writes is JSON all
	// the same (it was not: "item_id":,).
	f.Add([]byte("data: {\"type\":\"response.output_item.added\",\"item\":{\"type\":\"function_call\",\"name\":\"apply_patch\"}}\n\n"+
		"data: {\"type\":\"response.function_call_arguments.done\",\"arguments\":\"x\"}\n\n"), uint64(3), false)
	f.Fuzz(func(t *testing.T, stream []byte, seed uint64, messages bool) {
		ep := wire.Responses
		if messages {
			ep = wire.Messages
		}
		run := func(cuts []int) ([]byte, error) {
			rec := httptest.NewRecorder()
			p := &Pump{W: rec, RC: http.NewResponseController(rec), API: ep, Custom: wire.CustomTools{"apply_patch"}}
			err := p.Run(&chunkedReader{data: bytes.Clone(stream), cuts: cuts})
			return rec.Body.Bytes(), err
		}
		whole, werr := run(nil)
		var cuts []int
		for s := seed; s != 0 && len(cuts) < 64; s >>= 3 {
			cuts = append(cuts, int(s&7)+1)
		}
		split, serr := run(cuts)
		if (werr == nil) != (serr == nil) || !bytes.Equal(whole, split) {
			t.Fatalf("the split changed the answer: %v / %v\n%q\n%q", werr, serr, whole, split)
		}
		if werr != nil && !errors.Is(werr, ErrStreamCut) {
			t.Fatalf("error %v is not a cut stream", werr)
		}
		if !utf8.Valid(whole) || !bytes.Equal(wire.ValidEscapes(whole), whole) {
			t.Fatalf("the client got invalid UTF-8 or a lone surrogate escape: %q", whole)
		}
		events := sseEvents(whole)
		if i := slices.IndexFunc(events, func(d string) bool {
			typ := gjson.Parse(d).Get("type").Str // as the pump reads it
			if messages {
				return gjson.Valid(d) && typ == "message_stop"
			}
			return gjson.Valid(d) && (typ == "response.completed" || typ == "response.incomplete" || typ == "response.failed")
		}); i >= 0 && i != len(events)-1 {
			t.Fatalf("events after the terminal event: %q", events[i+1:])
		}
		if slices.ContainsFunc(sseEvents(stream), func(d string) bool { return !gjson.Valid(d) }) {
			return // what the gateway makes of events that are not JSON is not JSON either
		}
		for _, d := range events {
			if !gjson.Valid(d) {
				t.Fatalf("the replica's events were JSON, the client got %q", d)
			}
		}
		deltas := map[string]string{}
		for _, d := range events {
			id := gjson.Get(d, "item_id").Str
			switch gjson.Get(d, "type").Str {
			case "response.custom_tool_call_input.delta":
				deltas[id] += gjson.Get(d, "delta").Str
			case "response.custom_tool_call_input.done":
				if in := gjson.Get(d, "input").Str; in != deltas[id] {
					t.Fatalf("custom call %q: deltas %q, done %q", id, deltas[id], in)
				}
			}
		}
	})
}
