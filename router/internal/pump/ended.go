package pump

import (
	"bytes"
	"slices"

	"github.com/tidwall/gjson"

	"github.com/switchyard/switchyard/router/internal/sse"
)

// After its end, nothing of an answer is relayed: content a replica sends
// for a chat choice after its finish reason, for a Responses output item
// after its response.output_item.done, for a Messages content block after
// its content_block_stop (or after the message_delta that gives the stop
// reason), and every event after a typed stream's terminal event, is
// dropped. Clients stop reading a choice or an item at its end; a replica
// that goes on is broken, and what it adds would reach some clients and
// not others.

// maxEnded bounds the choices, items or blocks whose end is remembered:
// a replica can name any number of indexes, and beyond this many the ends
// of further ones are not kept (their later content is relayed).
const maxEnded = 256

// maxItemID bounds a Responses item id remembered as done (vLLM's are
// under 40 bytes); a longer one is not remembered.
const maxItemID = 128

// endState is what of the answer has ended.
type endState struct {
	// ended are the indexes of the chat choices or Messages content
	// blocks that ended.
	ended []int64
	// items are the ids of the Responses output items that were done:
	// ids, not output indexes, so that a replica that numbers its items
	// wrongly loses none of them.
	items []string
	// stopped: the Messages stream gave its stop reason (no content
	// block follows); over: a typed stream sent its terminal event.
	stopped, over bool
}

func (s *endState) end(i int64) {
	if len(s.ended) < maxEnded && !slices.Contains(s.ended, i) {
		s.ended = append(s.ended, i)
	}
}

// restart forgets the end of block i: a replica that opens a block of an
// index it used before starts a new block, not content after the end.
func (s *endState) restart(i int64) {
	if k := slices.Index(s.ended, i); k >= 0 {
		s.ended = slices.Delete(s.ended, k, k+1)
	}
}

func (s *endState) hasEnded(i int64) bool { return slices.Contains(s.ended, i) }

// finishKey is searched for without its opening quote: bytes.Index
// looks for a needle's first byte first, and JSON is full of quotes.
var finishKey = []byte(`finish_reason"`)

// chatEnds drops what a chat or completions chunk brings to choices that
// had their finish reason, and notes the choices it finishes. A chunk left
// with no choice and no usage is dropped whole. The common chunk, before
// any finish reason, is looked at without parsing it.
type (
	chatEnds      endState
	responsesEnds endState
	messagesEnds  endState
)

func (x *chatEnds) filter(e *event) error {
	s := (*endState)(x)
	if !mayFinish(e.data) && (len(s.ended) == 0 || noChoice(e.data)) {
		return nil
	}
	if len(e.data) == 0 || e.data[0] != '{' || !gjson.ValidBytes(e.data) {
		return nil
	}
	// Ends noted before this chunk: content in the chunk that carries a
	// finish reason is the choice's last.
	ended := len(s.ended)
	nd, edited, left := e.data, false, 0
	// Every top-level "choices" member, as chatUsage reads "usage":
	// parsers disagree on which duplicate counts.
	members := topMembers(e.data, "choices")
	for i := len(members) - 1; i >= 0; i-- {
		m := members[i]
		if !m.val.IsArray() {
			continue
		}
		n, drop := 0, 0
		m.val.ForEach(func(_, c gjson.Result) bool {
			n++
			if slices.Contains(s.ended[:ended], c.Get("index").Int()) && carries(c) {
				drop++
			}
			if c.Get("finish_reason").Type == gjson.String {
				s.end(c.Get("index").Int())
			}
			return true
		})
		left += n - drop
		if drop > 0 {
			nd = append(append(bytes.Clone(nd[:m.val.Index]), keptChoices(m.val, s.ended[:ended])...), nd[m.val.Index+len(m.val.Raw):]...)
			edited = true
		}
	}
	if !edited {
		return nil
	}
	if left == 0 && !slices.ContainsFunc(topMembers(nd, "usage"), func(m member) bool { return m.val.IsObject() }) {
		e.ev = nil // nothing left for the client
		return nil
	}
	e.ev = sse.RebuildData(e.ev, nd)
	e.data, _ = sse.EventData(e.ev)
	return nil
}

var choicesKey = []byte(`choices"`)

// noChoice reports, without parsing it, that a chunk's one "choices"
// member is empty (the usage chunk after the finish reason): it brings no
// choice anything. Any doubt (an escape, a second "choices") says false.
func noChoice(data []byte) bool {
	if bytes.IndexByte(data, '\\') >= 0 {
		return false
	}
	k := bytes.Index(data, choicesKey)
	if k < 1 || data[k-1] != '"' || bytes.Contains(data[k+len(choicesKey):], choicesKey) {
		return false
	}
	rest := sse.SkipSpace(data[k+len(choicesKey):])
	if len(rest) == 0 || rest[0] != ':' {
		return false
	}
	if rest = sse.SkipSpace(rest[1:]); len(rest) == 0 || rest[0] != '[' {
		return false
	}
	rest = sse.SkipSpace(rest[1:])
	return len(rest) > 0 && rest[0] == ']'
}

// mayFinish reports whether a chunk may give a finish reason: it has a
// "finish_reason" that is not null, or an escape that could spell one.
func mayFinish(data []byte) bool {
	if bytes.IndexByte(data, '\\') >= 0 && bytes.Contains(data, []byte(`\u`)) {
		return true
	}
	for rest := data; ; {
		k := bytes.Index(rest, finishKey)
		if k < 0 {
			return false
		}
		key := k > 0 && rest[k-1] == '"'
		rest = rest[k+len(finishKey):]
		if !key {
			continue
		}
		rest = sse.SkipSpace(rest)
		if len(rest) > 0 && rest[0] == ':' {
			rest = sse.SkipSpace(rest[1:])
		}
		if !bytes.HasPrefix(rest, []byte("null")) {
			return true
		}
	}
}

// carries reports whether a choice of a chunk brings anything: a delta
// member, text, a finish reason or logprobs that are not null or empty.
func carries(c gjson.Result) bool {
	if c.Get("finish_reason").Type == gjson.String || nonEmpty(c.Get("text")) {
		return true
	}
	if l := c.Get("logprobs"); l.Exists() && l.Type != gjson.Null {
		return true
	}
	some := false
	c.Get("delta").ForEach(func(_, v gjson.Result) bool {
		some = v.Type != gjson.Null && !(v.Type == gjson.String && v.Str == "")
		return !some
	})
	return some
}

func nonEmpty(r gjson.Result) bool { return r.Type == gjson.String && r.Str != "" }

// keptChoices is the choices array without what it brings to the ended
// choices.
func keptChoices(choices gjson.Result, ended []int64) []byte {
	b := []byte{'['}
	choices.ForEach(func(_, c gjson.Result) bool {
		if slices.Contains(ended, c.Get("index").Int()) && carries(c) {
			return true
		}
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = append(b, c.Raw...)
		return true
	})
	return append(b, ']')
}

// responsesEnds drops the events of output items that were done (by their
// item id) and every event after the terminal event, and notes those ends.
func (x *responsesEnds) filter(e *event) error {
	s := (*endState)(x)
	if s.over {
		e.ev = nil
		return nil
	}
	id := e.root.Get("item_id").Str
	if e.typ == "response.output_item.added" || e.typ == "response.output_item.done" {
		id = e.root.Get("item.id").Str
	}
	if id != "" && slices.Contains(s.items, id) {
		e.ev = nil
		return nil
	}
	switch e.typ {
	case "response.output_item.done":
		if id != "" && len(id) <= maxItemID && len(s.items) < maxEnded {
			s.items = append(s.items, id)
		}
	case "response.completed", "response.incomplete", "response.failed":
		s.over = true
	}
	return nil
}

// messagesEnds drops the events of content blocks that stopped (until a
// block of that index starts again), content blocks after the stop reason,
// and every event after message_stop, and notes those ends.
func (x *messagesEnds) filter(e *event) error {
	s := (*endState)(x)
	if s.over {
		e.ev = nil
		return nil
	}
	switch e.typ {
	case "content_block_start", "content_block_delta", "content_block_stop":
		i := e.root.Get("index").Int()
		switch {
		case s.stopped:
			e.ev = nil
		case e.typ == "content_block_start":
			s.restart(i)
		case s.hasEnded(i):
			e.ev = nil
		case e.typ == "content_block_stop":
			s.end(i)
		}
	case "message_delta":
		if e.root.Get("delta.stop_reason").Type == gjson.String {
			s.stopped = true
		}
	case "message_stop":
		s.over = true
	}
	return nil
}
