package router

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/tidwall/gjson"
	"go.opentelemetry.io/otel/trace"
)

// Stream buffers start small (an SSE chunk is a few hundred bytes) so that
// thousands of open streams stay cheap; an event that does not fit grows it.
var streamBufPool = sync.Pool{New: func() any { b := make([]byte, 2<<10); return &b }}

// maxEvent bounds one SSE event held while looking for its end; a longer
// event is passed through unparsed.
const maxEvent = 4 << 20

var (
	doneEvent  = []byte("data: [DONE]")
	usageField = []byte(`"usage":`)
)

// errStreamCut: the replica's stream ended without its final [DONE].
var errStreamCut = errors.New("replica closed the stream before [DONE]")

// pumpStream copies SSE events from the replica to the client as they come:
// each read's complete events are written and flushed at once; nothing waits
// for more data. It notes the first content or tool-call delta (TTFT), reads
// usage from the final chunk, and drops that chunk when Switchyard asked
// for it on the client's behalf (injected). A stream that ends without
// [DONE] gets an error event the OpenAI SDKs surface, and an error return.
func (g *Gateway) pumpStream(ctx context.Context, w io.Writer, rc *http.ResponseController, x *exchange, ps *poolState, body io.Reader, injected bool, span trace.Span) error {
	bp := streamBufPool.Get().(*[]byte)
	defer streamBufPool.Put(bp)
	buf := *bp
	start, end := 0, 0
	sawToken, sawDone := false, false
	// Usage is counted once, from the last usage object seen: with vLLM's
	// continuous_usage_stats every chunk carries the running totals.
	var prompt, completion int64
	var usageModel string
	sawUsage := false
	defer func() {
		if sawUsage {
			g.recordUsage(x, ps, prompt, completion, usageModel, span)
		}
	}()
	for {
		if end == len(buf) {
			if start > 0 {
				end = copy(buf, buf[start:end])
				start = 0
			} else if len(buf) < maxEvent {
				nb := make([]byte, 2*len(buf))
				end = copy(nb, buf[:end])
				buf = nb
			} else {
				// One event larger than maxEvent: pass it through as is.
				if _, err := w.Write(buf[:end]); err != nil {
					return ctxErrOr(ctx, err)
				}
				start, end = 0, 0
			}
		}
		n, rerr := body.Read(buf[end:])
		end += n
		wrote := false
		for {
			ev, next := nextEvent(buf[start:end])
			if ev == nil {
				break
			}
			start += next
			if !sawToken && hasToken(ev) {
				sawToken = true
				x.ttft = time.Since(x.start)
				g.metrics.ttft.WithLabelValues(ps.Name).Observe(x.ttft.Seconds())
			}
			if bytes.HasPrefix(ev, doneEvent) {
				sawDone = true
			} else if i := bytes.Index(ev, usageField); i >= 0 {
				// One scan finds both forms: the final usage object, and
				// the "usage":null that servers add to other chunks once
				// include_usage is set.
				switch v := bytes.TrimLeft(ev[i+len(usageField):], " "); {
				case bytes.HasPrefix(v, []byte("null")):
					if injected {
						ev = dropUsageNull(ev)
					}
				case len(v) > 0 && v[0] == '{':
					data := eventData(ev)
					if p, c, ok := readUsage(data); ok {
						prompt, completion, sawUsage = p, c, true
						if !sawToken || usageModel == "" {
							usageModel = gjson.GetBytes(data, "model").String()
						}
					}
					if injected && gjson.GetBytes(data, "choices.#").Int() == 0 {
						continue // the usage chunk the client did not ask for
					}
				}
			}
			if _, err := w.Write(ev); err != nil {
				return ctxErrOr(ctx, err)
			}
			wrote = true
		}
		if wrote {
			if err := rc.Flush(); err != nil {
				return ctxErrOr(ctx, err)
			}
		}
		if start == end {
			start, end = 0, 0
		}
		if rerr == nil {
			continue
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if end > start {
			// A trailing event without its blank line: pass it on.
			_, _ = w.Write(buf[start:end])
		}
		if errors.Is(rerr, io.EOF) && sawDone {
			return nil
		}
		cause := errStreamCut
		if !errors.Is(rerr, io.EOF) {
			cause = fmt.Errorf("%w: %v", errStreamCut, rerr)
		}
		ae := &apiError{Type: "upstream_error", Code: "stream_interrupted",
			Message: fmt.Sprintf("the replica's stream was interrupted before it finished (pool %q): %v", ps.Name, rerr)}
		_, _ = w.Write([]byte("data: "))
		_, _ = w.Write(ae.body())
		_, _ = w.Write([]byte("\n\n"))
		_ = rc.Flush()
		return cause
	}
}

// errClientGone: a write or flush to the client failed, so the client has
// gone even if the request context does not say so yet. It is never held
// against the replica.
var errClientGone = errors.New("client went away")

func ctxErrOr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("%w: %v", errClientGone, err)
}

var usageNull = []byte(`"usage":null`)

// dropUsageNull removes the `"usage":null` member that servers following
// OpenAI add to every chunk once include_usage is set, so a client that did
// not ask for usage sees the chunks it would have seen. It edits ev in place.
func dropUsageNull(ev []byte) []byte {
	i := bytes.Index(ev, usageNull)
	if i < 0 {
		return ev
	}
	start, end := i, i+len(usageNull)
	switch {
	case start > 0 && ev[start-1] == ',':
		start--
	case end < len(ev) && ev[end] == ',':
		end++
	}
	n := copy(ev[start:], ev[end:])
	return ev[:start+n]
}

// nextEvent returns the first complete SSE event in b (including its
// terminating blank line) and its length, or nil.
func nextEvent(b []byte) ([]byte, int) {
	for i := 0; i+1 < len(b); i++ {
		if b[i] != '\n' {
			continue
		}
		if b[i+1] == '\n' {
			return b[:i+2], i + 2
		}
		if b[i+1] == '\r' && i+2 < len(b) && b[i+2] == '\n' {
			return b[:i+3], i + 3
		}
	}
	return nil, 0
}

// eventData returns the payload of an event's data line(s).
func eventData(ev []byte) []byte {
	i := bytes.Index(ev, []byte("data:"))
	if i < 0 {
		return nil
	}
	d := ev[i+5:]
	if len(d) > 0 && d[0] == ' ' {
		d = d[1:]
	}
	return bytes.TrimRight(d, "\r\n")
}

// hasToken reports whether an event carries the first generated content: a
// non-empty content or text delta, or a tool-call delta.
func hasToken(ev []byte) bool {
	if !bytes.Contains(ev, []byte(`"content"`)) && !bytes.Contains(ev, []byte(`"tool_calls"`)) && !bytes.Contains(ev, []byte(`"text"`)) {
		return false
	}
	data := eventData(ev)
	c := gjson.GetBytes(data, "choices.0")
	if d := c.Get("delta"); d.Exists() {
		if s := d.Get("content"); s.Type == gjson.String && s.Str != "" {
			return true
		}
		return d.Get("tool_calls").IsArray()
	}
	t := c.Get("text")
	return t.Type == gjson.String && t.Str != ""
}
