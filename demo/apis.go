package demo

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/tidwall/gjson"
)

// answer is what the load keeps of one answer, whatever its API.
type answer struct {
	text   string
	toolID string
	ttft   time.Duration
}

// requestFor builds the request of a conversation (kept in chat form) in
// the given API: chat completions, the Responses API (Codex, the Agents
// SDK) or the Messages API (Claude Code).
func requestFor(api, model string, maxTokens int, msgs []message, tools []any, stream bool) (path string, body []byte) {
	switch api {
	case "responses":
		req := map[string]any{"model": model, "max_output_tokens": maxTokens, "stream": stream, "store": false}
		var input []any
		for _, m := range msgs {
			switch m["role"] {
			case "system":
				req["instructions"] = m["content"]
			case "tool":
				input = append(input, map[string]any{"type": "function_call_output", "call_id": m["tool_call_id"], "output": m["content"]})
			case "assistant":
				if calls, ok := m["tool_calls"].([]any); ok {
					for _, c := range calls {
						c := c.(map[string]any)
						f := c["function"].(map[string]any)
						input = append(input, map[string]any{"type": "function_call", "call_id": c["id"], "name": f["name"], "arguments": f["arguments"]})
					}
					continue
				}
				input = append(input, map[string]any{"role": "assistant", "content": m["content"]})
			default:
				input = append(input, map[string]any{"role": m["role"], "content": m["content"]})
			}
		}
		req["input"] = input
		if len(tools) > 0 {
			var ts []any
			for _, t := range tools {
				f := t.(map[string]any)["function"].(map[string]any)
				ts = append(ts, map[string]any{"type": "function", "name": f["name"], "description": f["description"], "parameters": f["parameters"], "strict": false})
			}
			req["tools"] = ts
		}
		body, _ = json.Marshal(req)
		return "/v1/responses", body
	case "messages":
		req := map[string]any{"model": model, "max_tokens": maxTokens, "stream": stream}
		var out []any
		for _, m := range msgs {
			switch m["role"] {
			case "system":
				req["system"] = m["content"]
			case "tool":
				out = append(out, map[string]any{"role": "user", "content": []any{map[string]any{
					"type": "tool_result", "tool_use_id": m["tool_call_id"], "content": m["content"]}}})
			case "assistant":
				if calls, ok := m["tool_calls"].([]any); ok {
					var blocks []any
					for _, c := range calls {
						c := c.(map[string]any)
						f := c["function"].(map[string]any)
						var input any
						_ = json.Unmarshal([]byte(f["arguments"].(string)), &input)
						blocks = append(blocks, map[string]any{"type": "tool_use", "id": c["id"], "name": f["name"], "input": input})
					}
					out = append(out, map[string]any{"role": "assistant", "content": blocks})
					continue
				}
				out = append(out, map[string]any{"role": "assistant", "content": m["content"]})
			default:
				out = append(out, map[string]any{"role": m["role"], "content": m["content"]})
			}
		}
		req["messages"] = out
		if len(tools) > 0 {
			var ts []any
			for _, t := range tools {
				f := t.(map[string]any)["function"].(map[string]any)
				ts = append(ts, map[string]any{"name": f["name"], "description": f["description"], "input_schema": f["parameters"]})
			}
			req["tools"] = ts
		}
		body, _ = json.Marshal(req)
		return "/v1/messages", body
	}
	req := map[string]any{"model": model, "messages": msgs, "max_tokens": maxTokens, "stream": stream}
	if len(tools) > 0 {
		req["tools"] = tools
	}
	body, _ = json.Marshal(req)
	return "/v1/chat/completions", body
}

// readAnswer reads a non-stream answer of the given API.
func readAnswer(api string, b []byte) (answer, error) {
	root := gjson.ParseBytes(b)
	var a answer
	switch api {
	case "responses":
		if root.Get("object").Str != "response" {
			return a, fmt.Errorf("not a response: %.200s", b)
		}
		root.Get("output").ForEach(func(_, it gjson.Result) bool {
			switch it.Get("type").Str {
			case "function_call":
				if a.toolID == "" {
					a.toolID = it.Get("call_id").Str
				}
			case "message":
				it.Get("content").ForEach(func(_, c gjson.Result) bool { a.text += c.Get("text").Str; return true })
			}
			return true
		})
	case "messages":
		if root.Get("type").Str != "message" {
			return a, fmt.Errorf("not a message: %.200s", b)
		}
		root.Get("content").ForEach(func(_, c gjson.Result) bool {
			switch c.Get("type").Str {
			case "tool_use":
				if a.toolID == "" {
					a.toolID = c.Get("id").Str
				}
			case "text":
				a.text += c.Get("text").Str
			}
			return true
		})
	default:
		c := root.Get("choices.0.message")
		if !c.Exists() {
			return a, fmt.Errorf("no choices: %.200s", b)
		}
		a.text = c.Get("content").Str
		a.toolID = c.Get("tool_calls.0.id").Str
	}
	return a, nil
}

// readStream reads an SSE stream of the given API: the text, the first
// tool call id, and the time to the first content or tool-call delta. A
// stream must end as its API ends one ([DONE], response.completed,
// message_stop); an error event is an error.
func readStream(api string, body io.Reader, start time.Time) (answer, error) {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var a answer
	var sb strings.Builder
	done := false
	first := func() {
		if a.ttft == 0 {
			a.ttft = time.Since(start)
		}
	}
	for sc.Scan() && !done {
		data, ok := bytes.CutPrefix(sc.Bytes(), []byte("data: "))
		if !ok {
			continue
		}
		if string(data) == "[DONE]" {
			done = api == "chat"
			continue
		}
		ev := gjson.ParseBytes(data)
		if e := ev.Get("error"); e.Exists() && (api == "chat" || ev.Get("type").Str == "error") {
			msg := e.Get("message").Str
			if msg == "" {
				msg = ev.Get("message").Str
			}
			return a, fmt.Errorf("stream error: %s", msg)
		}
		switch api {
		case "responses":
			switch ev.Get("type").Str {
			case "error":
				return a, fmt.Errorf("stream error: %s", ev.Get("message").Str)
			case "response.output_text.delta":
				first()
				sb.WriteString(ev.Get("delta").Str)
			case "response.output_item.added":
				if it := ev.Get("item"); it.Get("type").Str == "function_call" && a.toolID == "" {
					first()
					a.toolID = it.Get("call_id").Str
				}
			case "response.completed":
				done = true
			}
		case "messages":
			switch ev.Get("type").Str {
			case "content_block_start":
				if b := ev.Get("content_block"); b.Get("type").Str == "tool_use" && a.toolID == "" {
					first()
					a.toolID = b.Get("id").Str
				}
			case "content_block_delta":
				first()
				sb.WriteString(ev.Get("delta.text").Str)
			case "message_stop":
				done = true
			}
		default:
			ev.Get("choices").ForEach(func(_, c gjson.Result) bool {
				d := c.Get("delta")
				if d.Get("content").Str != "" || d.Get("tool_calls").IsArray() {
					first()
				}
				sb.WriteString(d.Get("content").Str)
				if id := d.Get("tool_calls.0.id").Str; id != "" && a.toolID == "" {
					a.toolID = id
				}
				return true
			})
		}
	}
	if err := sc.Err(); err != nil {
		return a, err
	}
	if !done {
		return a, fmt.Errorf("the %s stream ended before its end event", api)
	}
	a.text = sb.String()
	return a, nil
}
