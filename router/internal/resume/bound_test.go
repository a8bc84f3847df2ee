package resume

import (
	"errors"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/switchyard/switchyard/router/internal/wire"
)

// TestContinuedTextIsBounded: the text a continuation adds to a resumed
// Responses stream counts against resume.max_buffer like the text sent
// before the cut. Past it the translation refuses to go on (the stream
// ends with the API's error event) instead of keeping the continued item's
// text without bound and writing it whole into its .done events and the
// terminal event (a 320 MiB continuation once took the gateway to 7.3 GB).
func TestContinuedTextIsBounded(t *testing.T) {
	const maxBuffer = 4 << 10
	rs := New(wire.Responses, []byte(`{"model":"m","input":"hi","stream":true}`), maxBuffer, func() uint64 { return 7 })
	tr := rs.Typed
	for _, ev := range []string{
		`{"type":"response.created","response":{"id":"resp_1","object":"response","status":"in_progress","output":[]},"sequence_number":0}`,
		`{"type":"response.output_item.added","item":{"id":"msg_1","type":"message","content":[]},"output_index":0,"sequence_number":1}`,
		`{"type":"response.content_part.added","item_id":"msg_1","output_index":0,"content_index":0,"sequence_number":2}`,
		`{"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"content_index":0,"delta":"Hello","sequence_number":3}`,
	} {
		tr.Observe(gjson.Get(ev, "type").Str, gjson.Parse(ev))
	}
	if rs.Broken != "" {
		t.Fatalf("not resumable before the cut: %s", rs.Broken)
	}
	rs.Begin()
	piece := strings.Repeat("x", 256)
	seq := int64(3)
	var err error
	sent := 0
	for i := 0; i < 1000 && err == nil; i++ {
		var out []byte
		out, err = tr.Translate(seq, ChatDelta{content: piece}, false)
		if err != nil {
			break
		}
		// The pump relays each translated event back through Observe,
		// as it does for a replica's own events.
		for _, line := range strings.Split(string(out), "\n") {
			if data, ok := strings.CutPrefix(line, "data: "); ok {
				root := gjson.Parse(data)
				seq = root.Get("sequence_number").Int()
				tr.Observe(root.Get("type").Str, root)
			}
		}
		sent += len(piece)
	}
	if err == nil || !errors.Is(err, ErrNotContinued) {
		t.Fatalf("after %d bytes of continued text the translation still goes on (err %v); want it refused past max_buffer %d", sent, err, maxBuffer)
	}
	if sent > maxBuffer+len(piece) {
		t.Errorf("%d bytes of continued text relayed before the refusal; want at most max_buffer (%d) and one piece", sent, maxBuffer)
	}
	if !strings.Contains(err.Error(), "max_buffer") {
		t.Errorf("refusal %q does not name resume.max_buffer", err)
	}
}
