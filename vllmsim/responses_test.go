package vllmsim_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"

	"github.com/switchyard/switchyard/vllmsim"
)

// sseEvent is one event of a stream whose events are named ("event:" and
// "data:" lines), as the Responses and Messages APIs send them.
type sseEvent struct{ name, data string }

// readEvents reads named events up to the end of r; err is the read error
// that ended the stream early, if any.
func readEvents(r io.Reader) (events []sseEvent, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	var cur sseEvent
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur != (sseEvent{}) {
				events = append(events, cur)
				cur = sseEvent{}
			}
		case strings.HasPrefix(line, "event: "):
			cur.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			cur.data = strings.TrimPrefix(line, "data: ")
		default:
			return events, fmt.Errorf("line %q is neither an event name nor data", line)
		}
	}
	return events, sc.Err()
}

// collectEvents reads a whole successful stream of named events and checks
// that every event's name is its data's "type".
func collectEvents(t testing.TB, resp *http.Response) []sseEvent {
	t.Helper()
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q, want text/event-stream", ct)
	}
	events, err := readEvents(resp.Body)
	if err != nil {
		t.Fatalf("reading stream: %v", err)
	}
	for i, ev := range events {
		if !gjson.Valid(ev.data) {
			t.Fatalf("event %d data is not JSON: %s", i, ev.data)
		}
		if typ := gjson.Get(ev.data, "type").Str; typ != ev.name {
			t.Errorf("event %d named %q carries type %q", i, ev.name, typ)
		}
	}
	return events
}

// names lists the events' names.
func names(events []sseEvent) []string {
	var out []string
	for _, ev := range events {
		out = append(out, ev.name)
	}
	return out
}

// repeat is name n times.
func repeat(name string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = name
	}
	return out
}

func concat(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// field is a gjson path of a JSON document, for terse checks.
func field(doc, path string) gjson.Result { return gjson.Get(doc, path) }

const flatWeatherTool = `{"type":"function","name":"get_weather","description":"Weather now","parameters":{"type":"object",
	"properties":{"city":{"type":"string"},"unit":{"type":"string","enum":["celsius","fahrenheit"]}},"required":["city","unit"]},"strict":true}`

func TestResponsesPlain(t *testing.T) {
	sim, ts := start(t, vllmsim.Profile{DefaultMaxTokens: 12})
	tests := []struct {
		name        string
		body        string
		wantPrompt  int // 0: not checked
		wantTokens  int
		wantStatus  string
		wantMaxEcho int
	}{
		{"string input", `{"model":"sim/test-model","input":"Tell me about the harbor"}`, 6, 12, "completed", 12},
		{"model omitted", `{"input":"hi"}`, 1, 12, "completed", 12},
		{"max_output_tokens cuts", `{"input":"hi","max_output_tokens":5}`, 1, 5, "incomplete", 5},
		{"max_output_tokens above the answer", `{"input":"hi","max_output_tokens":500}`, 1, 12, "completed", 500},
		{"items and instructions", `{"instructions":"abcdabcd","input":[
			{"role":"developer","content":"abcd"},
			{"type":"message","role":"user","content":[{"type":"input_text","text":"abcdabcd"},{"type":"input_image","image_url":"https://example.com/x.png"}]},
			{"role":"assistant","content":[{"type":"output_text","text":"abcd"}]},
			{"role":"user","content":"abcdabcdabcd"}]}`, 9, 12, "completed", 12},
	}
	var sumPrompt, sumOutput int64
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := post(t, ts, "/v1/responses", tc.body)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			doc := string(b)
			if id := field(doc, "id").Str; !strings.HasPrefix(id, "resp_") || field(doc, "object").Str != "response" ||
				field(doc, "model").Str != testModel || field(doc, "created_at").Int() == 0 {
				t.Errorf("envelope: %s", b)
			}
			if got := field(doc, "status").Str; got != tc.wantStatus {
				t.Errorf("status %q, want %q", got, tc.wantStatus)
			}
			if tc.wantStatus == "incomplete" {
				if r := field(doc, "incomplete_details.reason").Str; r != "max_output_tokens" {
					t.Errorf("incomplete_details %s", field(doc, "incomplete_details").Raw)
				}
			} else if r := field(doc, "incomplete_details"); r.Type != gjson.Null {
				t.Errorf("incomplete_details %s, want null", r.Raw)
			}
			out := field(doc, "output").Array()
			if len(out) != 1 {
				t.Fatalf("output %s: want one message", field(doc, "output").Raw)
			}
			msg := out[0]
			if !strings.HasPrefix(msg.Get("id").Str, "msg_") || msg.Get("type").Str != "message" || msg.Get("role").Str != "assistant" ||
				msg.Get("status").Str != "completed" || msg.Get("content.#").Int() != 1 {
				t.Errorf("message item %s", msg.Raw)
			}
			part := msg.Get("content.0")
			if part.Get("type").Str != "output_text" || part.Get("annotations").Raw != "[]" {
				t.Errorf("content part %s", part.Raw)
			}
			if words := len(strings.Fields(part.Get("text").Str)); words != tc.wantTokens {
				t.Errorf("text %q has %d words, want %d", part.Get("text").Str, words, tc.wantTokens)
			}
			u := field(doc, "usage")
			in, outTok := u.Get("input_tokens").Int(), u.Get("output_tokens").Int()
			if tc.wantPrompt > 0 && in != int64(tc.wantPrompt) {
				t.Errorf("input_tokens %d, want %d", in, tc.wantPrompt)
			}
			if outTok != int64(tc.wantTokens) || u.Get("total_tokens").Int() != in+outTok ||
				u.Get("input_tokens_details.cached_tokens").Int() != 0 || u.Get("output_tokens_details.reasoning_tokens").Int() != 0 {
				t.Errorf("usage %s", u.Raw)
			}
			sumPrompt += in
			sumOutput += outTok
			if got := field(doc, "max_output_tokens").Int(); got != int64(tc.wantMaxEcho) {
				t.Errorf("max_output_tokens %d, want %d", got, tc.wantMaxEcho)
			}
			// The fields vLLM echoes with their defaults.
			for path, want := range map[string]string{
				"parallel_tool_calls": "true", "temperature": "1.0", "top_p": "1.0", "tool_choice": `"auto"`, "tools": "[]",
				"text": "null", "truncation": `"disabled"`, "previous_response_id": "null", "background": "false",
				"service_tier": `"auto"`, "reasoning": "null", "metadata": "null", "user": "null",
			} {
				if got := field(doc, path).Raw; got != want {
					t.Errorf("%s: %s, want %s", path, got, want)
				}
			}
		})
	}
	if st := sim.Stats(); st.PromptTokens != sumPrompt || st.CompletionTokens != sumOutput || st.Completed != int64(len(tests)) {
		t.Errorf("stats %+v, want %d prompt and %d completion tokens from the usage fields", st, sumPrompt, sumOutput)
	}
}

func TestResponsesEcho(t *testing.T) {
	_, ts := start(t, vllmsim.Profile{DefaultMaxTokens: 3})
	_, b := post(t, ts, "/v1/responses", `{"input":"hi","instructions":"Be brief.","temperature":0.2,"top_p":0.9,
		"metadata":{"k":"v"},"user":"u1","parallel_tool_calls":false,"tool_choice":"none","tools":[`+flatWeatherTool+`],
		"text":{"format":{"type":"text"}},"reasoning":{"effort":"low"},"store":false}`)
	doc := string(b)
	for path, want := range map[string]string{
		"instructions": `"Be brief."`, "temperature": "0.2", "top_p": "0.9", "metadata": `{"k":"v"}`, "user": `"u1"`,
		"parallel_tool_calls": "false", "tool_choice": `"none"`, "text": `{"format":{"type":"text"}}`, "reasoning": `{"effort":"low"}`,
		"tools.0.name": `"get_weather"`,
	} {
		if got := field(doc, path).Raw; got != want {
			t.Errorf("%s: %s, want %s", path, got, want)
		}
	}
	if typ := field(doc, "output.0.type").Str; typ != "message" {
		t.Errorf("tool_choice none: output %s, want a message", field(doc, "output").Raw)
	}
}

func TestResponsesStream(t *testing.T) {
	_, ts := start(t, vllmsim.Profile{DefaultMaxTokens: 5})
	const body = `"input":"Tell me about the harbor"`
	_, b := post(t, ts, "/v1/responses", `{`+body+`}`)
	want := field(string(b), "output.0.content.0.text").Str

	events := collectEvents(t, send(t, context.Background(), ts, "/v1/responses", `{"stream":true,`+body+`}`))
	wantNames := concat(
		[]string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"},
		repeat("response.output_text.delta", 5),
		[]string{"response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed"},
	)
	if diff := cmp.Diff(wantNames, names(events)); diff != "" {
		t.Fatalf("event sequence (-want +got):\n%s", diff)
	}
	for i, ev := range events {
		if n := field(ev.data, "sequence_number").Int(); n != int64(i) {
			t.Errorf("event %d has sequence_number %d", i, n)
		}
	}
	created := field(events[0].data, "response")
	if created.Get("status").Str != "in_progress" || created.Get("output").Raw != "[]" || created.Get("usage").Type != gjson.Null ||
		!strings.HasPrefix(created.Get("id").Str, "resp_") {
		t.Errorf("response.created: %s", events[0].data)
	}
	item := field(events[2].data, "item")
	itemID := item.Get("id").Str
	if item.Get("type").Str != "message" || item.Get("status").Str != "in_progress" || item.Get("content").Raw != "[]" || itemID == "" {
		t.Errorf("output_item.added: %s", events[2].data)
	}
	var text string
	for _, ev := range events[4:9] {
		text += field(ev.data, "delta").Str
		if field(ev.data, "item_id").Str != itemID || field(ev.data, "output_index").Int() != 0 || field(ev.data, "content_index").Int() != 0 {
			t.Errorf("delta %s: not of item %s", ev.data, itemID)
		}
	}
	if text != want {
		t.Errorf("streamed %q, want the non-stream text %q", text, want)
	}
	if got := field(events[9].data, "text").Str; got != want {
		t.Errorf("output_text.done text %q", got)
	}
	if got := field(events[10].data, "part.text").Str; got != want {
		t.Errorf("content_part.done text %q", got)
	}
	if done := field(events[11].data, "item"); done.Get("status").Str != "completed" || done.Get("content.0.text").Str != want || done.Get("id").Str != itemID {
		t.Errorf("output_item.done: %s", events[11].data)
	}
	final := field(events[12].data, "response")
	if final.Get("id").Str != created.Get("id").Str || final.Get("status").Str != "completed" ||
		final.Get("output.0.content.0.text").Str != want || final.Get("usage.output_tokens").Int() != 5 {
		t.Errorf("response.completed: %s", events[12].data)
	}
}

func TestResponsesFunctionCall(t *testing.T) {
	_, ts := start(t, vllmsim.Profile{DefaultMaxTokens: 6})
	const ask = `"input":"Weather in Paris?","tools":[` + flatWeatherTool + `]`
	wantArgs := `{"city":"Paris","unit":"celsius"}`

	t.Run("non-stream", func(t *testing.T) {
		_, b := post(t, ts, "/v1/responses", `{`+ask+`}`)
		doc := string(b)
		call := field(doc, "output.0")
		if field(doc, "output.#").Int() != 1 || call.Get("type").Str != "function_call" || call.Get("name").Str != "get_weather" ||
			call.Get("arguments").Str != wantArgs || call.Get("status").Str != "completed" ||
			!strings.HasPrefix(call.Get("id").Str, "fc_") || !strings.HasPrefix(call.Get("call_id").Str, "chatcmpl-tool-") {
			t.Errorf("output %s", field(doc, "output").Raw)
		}
		if field(doc, "status").Str != "completed" || field(doc, "usage.output_tokens").Int() < 2 {
			t.Errorf("status %s usage %s", field(doc, "status").Raw, field(doc, "usage").Raw)
		}
	})

	t.Run("stream", func(t *testing.T) {
		events := collectEvents(t, send(t, context.Background(), ts, "/v1/responses", `{"stream":true,`+ask+`}`))
		n := len(events)
		if n < 7 {
			t.Fatalf("%d events: %q", n, names(events))
		}
		wantNames := concat(
			[]string{"response.created", "response.in_progress", "response.output_item.added"},
			repeat("response.function_call_arguments.delta", n-6),
			[]string{"response.function_call_arguments.done", "response.output_item.done", "response.completed"},
		)
		if diff := cmp.Diff(wantNames, names(events)); diff != "" {
			t.Fatalf("event sequence (-want +got):\n%s", diff)
		}
		added := field(events[2].data, "item")
		if added.Get("type").Str != "function_call" || added.Get("name").Str != "get_weather" || added.Get("arguments").Str != "" ||
			!strings.HasPrefix(added.Get("call_id").Str, "call_") || added.Get("status").Str != "in_progress" {
			t.Errorf("output_item.added: %s", events[2].data)
		}
		var args string
		for _, ev := range events[3 : n-3] {
			args += field(ev.data, "delta").Str
		}
		if args != wantArgs || field(events[n-3].data, "arguments").Str != wantArgs || field(events[n-3].data, "name").Str != "get_weather" {
			t.Errorf("arguments: deltas %q, done %s", args, events[n-3].data)
		}
		if done := field(events[n-2].data, "item"); done.Get("arguments").Str != wantArgs || done.Get("call_id").Str != added.Get("call_id").Str ||
			done.Get("status").Str != "completed" {
			t.Errorf("output_item.done: %s", events[n-2].data)
		}
		if usage := field(events[n-1].data, "response.usage.output_tokens").Int(); usage != int64(n-6+1) {
			t.Errorf("output_tokens %d, want one per delta and one for the call's header (%d)", usage, n-5)
		}
	})

	tests := []struct {
		name     string
		body     string
		wantTool string // "" = a text answer
	}{
		{"tool output answers with text", `{"tools":[` + flatWeatherTool + `],"input":[
			{"role":"user","content":"Weather in Paris?"},
			{"type":"function_call","call_id":"call_1","name":"get_weather","arguments":"{\"city\":\"Paris\",\"unit\":\"celsius\"}"},
			{"type":"function_call_output","call_id":"call_1","output":"sunny, 21C"}]}`, ""},
		{"named tool", `{"input":"hi","tools":[{"type":"function","name":"ping"},` + flatWeatherTool + `],"tool_choice":{"type":"function","name":"get_weather"}}`, "get_weather"},
		{"first function tool", `{"input":"hi","tools":[{"type":"web_search_preview"},{"type":"function","name":"ping"}]}`, "ping"},
		{"none", `{"input":"hi","tools":[` + flatWeatherTool + `],"tool_choice":"none"}`, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := post(t, ts, "/v1/responses", tc.body)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			out := field(string(b), "output.0")
			if tc.wantTool == "" {
				if out.Get("type").Str != "message" || out.Get("content.0.text").Str == "" {
					t.Errorf("output %s: want text", out.Raw)
				}
				return
			}
			if out.Get("type").Str != "function_call" || out.Get("name").Str != tc.wantTool || !json.Valid([]byte(out.Get("arguments").Str)) {
				t.Errorf("output %s: want a call to %s", out.Raw, tc.wantTool)
			}
		})
	}
}

func TestResponsesReasoning(t *testing.T) {
	_, ts := start(t, vllmsim.Profile{DefaultMaxTokens: 8, ReasoningTokens: 3})
	_, b := post(t, ts, "/v1/responses", `{"input":"Describe the harbor."}`)
	doc := string(b)
	reasoning, msg := field(doc, "output.0"), field(doc, "output.1")
	if reasoning.Get("type").Str != "reasoning" || !strings.HasPrefix(reasoning.Get("id").Str, "rs_") ||
		reasoning.Get("content.0.type").Str != "reasoning_text" || len(strings.Fields(reasoning.Get("content.0.text").Str)) != 3 {
		t.Errorf("reasoning item %s", reasoning.Raw)
	}
	if msg.Get("type").Str != "message" || len(strings.Fields(msg.Get("content.0.text").Str)) != 5 {
		t.Errorf("message item %s", msg.Raw)
	}
	if u := field(doc, "usage"); u.Get("output_tokens").Int() != 8 || u.Get("output_tokens_details.reasoning_tokens").Int() != 3 {
		t.Errorf("usage %s: want 8 output tokens, 3 of them reasoning", u.Raw)
	}

	events := collectEvents(t, send(t, context.Background(), ts, "/v1/responses", `{"stream":true,"input":"Describe the harbor."}`))
	wantNames := concat(
		[]string{"response.created", "response.in_progress", "response.output_item.added", "response.reasoning_part.added"},
		repeat("response.reasoning_text.delta", 3),
		[]string{"response.reasoning_text.done", "response.reasoning_part.done", "response.output_item.done",
			"response.output_item.added", "response.content_part.added"},
		repeat("response.output_text.delta", 5),
		[]string{"response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed"},
	)
	if diff := cmp.Diff(wantNames, names(events)); diff != "" {
		t.Fatalf("event sequence (-want +got):\n%s", diff)
	}
	if got := field(events[7].data, "text").Str; got != reasoning.Get("content.0.text").Str {
		t.Errorf("reasoning_text.done %q, want %q", got, reasoning.Get("content.0.text").Str)
	}
	if idx := field(events[14].data, "output_index").Int(); idx != 1 {
		t.Errorf("the message's first delta has output_index %d, want 1", idx)
	}
}

func TestResponsesStore(t *testing.T) {
	sim, ts := start(t, vllmsim.Profile{DefaultMaxTokens: 6})
	first := `{"input":"` + strings.Repeat("abcd", 100) + `"}`
	_, b := post(t, ts, "/v1/responses", first)
	id := field(string(b), "id").Str
	text := field(string(b), "output.0.content.0.text").Str

	resp, got := get(t, ts, "/v1/responses/"+id)
	if resp.StatusCode != http.StatusOK || got != string(b) {
		t.Errorf("GET: status %d\n%s\nwant the stored response\n%s", resp.StatusCode, got, b)
	}

	// A follow-up's prompt holds the previous input and output text.
	_, b2 := post(t, ts, "/v1/responses", `{"input":"`+strings.Repeat("abcd", 10)+`","previous_response_id":"`+id+`"}`)
	wantPrompt := (400 + len(text) + 40) / 4
	if got := field(string(b2), "usage.input_tokens").Int(); got != int64(wantPrompt) {
		t.Errorf("follow-up input_tokens %d, want %d (previous input, previous output, new input)", got, wantPrompt)
	}
	if got := field(string(b2), "previous_response_id").Str; got != id {
		t.Errorf("previous_response_id %q, want %q", got, id)
	}
	// A chain: the third turn inherits both.
	id2 := field(string(b2), "id").Str
	text2 := field(string(b2), "output.0.content.0.text").Str
	_, b3 := post(t, ts, "/v1/responses", `{"input":"abcd","previous_response_id":"`+id2+`"}`)
	if got, want := field(string(b3), "usage.input_tokens").Int(), int64((400+len(text)+40+len(text2)+4)/4); got != want {
		t.Errorf("third turn input_tokens %d, want %d", got, want)
	}

	// A streamed response is stored as response.completed carries it.
	events := collectEvents(t, send(t, context.Background(), ts, "/v1/responses", `{"stream":true,"input":"hi"}`))
	final := field(events[len(events)-1].data, "response")
	if _, got := get(t, ts, "/v1/responses/"+final.Get("id").Str); got != final.Raw {
		t.Errorf("GET after a stream:\n%s\nwant\n%s", got, final.Raw)
	}

	_, b = post(t, ts, "/v1/responses", `{"input":"hi","store":false}`)
	if resp, _ := get(t, ts, "/v1/responses/"+field(string(b), "id").Str); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET of a store:false response: status %d, want 404", resp.StatusCode)
	}

	before := sim.Stats()
	notFound := func(t *testing.T, status int, b []byte, id string) {
		t.Helper()
		e := decode[errorBody](t, b)
		if status != http.StatusNotFound || e.Error.Message != "Response with id '"+id+"' not found." ||
			e.Error.Type != "invalid_request_error" || string(e.Error.Param) != `"response_id"` || e.Error.Code != 404 {
			t.Errorf("status %d body %s: want vLLM's 404", status, b)
		}
	}
	resp, b = post(t, ts, "/v1/responses", `{"input":"hi","previous_response_id":"resp_nope"}`)
	notFound(t, resp.StatusCode, b, "resp_nope")
	if st := sim.Stats(); st.Failed != before.Failed+1 {
		t.Errorf("an unknown previous_response_id is not counted failed: %+v", st)
	}
	resp, body := get(t, ts, "/v1/responses/resp_nope")
	notFound(t, resp.StatusCode, []byte(body), "resp_nope")

	resp, b = post(t, ts, "/v1/responses/resp_nope/cancel", "")
	notFound(t, resp.StatusCode, b, "resp_nope")
	resp, b = post(t, ts, "/v1/responses/"+id+"/cancel", "")
	if e := decode[errorBody](t, b); resp.StatusCode != http.StatusBadRequest || e.Error.Message != "Cannot cancel a synchronous response." {
		t.Errorf("cancel: status %d body %s", resp.StatusCode, b)
	}

	// vLLM has no DELETE route; FastAPI answers 405.
	req, _ := http.NewRequest(http.MethodDelete, ts.URL+"/v1/responses/"+id, nil)
	dresp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	db, _ := io.ReadAll(dresp.Body)
	dresp.Body.Close()
	if dresp.StatusCode != http.StatusMethodNotAllowed || string(db) != `{"detail":"Method Not Allowed"}` || dresp.Header.Get("Allow") != "GET" {
		t.Errorf("DELETE: status %d Allow %q body %s", dresp.StatusCode, dresp.Header.Get("Allow"), db)
	}
	if resp, _ := get(t, ts, "/v1/responses/"+id); resp.StatusCode != http.StatusOK {
		t.Errorf("the response is gone after DELETE: %d", resp.StatusCode)
	}
}

func TestResponsesErrors(t *testing.T) {
	_, ts := start(t, vllmsim.Profile{MaxModelLen: 100})
	tests := []struct {
		name       string
		body       string
		wantStatus int
		wantType   string
		wantMsg    string
	}{
		{"unknown model", `{"model":"gpt-4o","input":"hi"}`, 404, "NotFoundError", "The model `gpt-4o` does not exist."},
		{"no input", `{"model":"sim/test-model"}`, 400, "BadRequestError", ""},
		{"prompt too long", `{"input":"` + strings.Repeat("abcd", 100) + `"}`, 400, "invalid_request_error",
			"The engine prompt length 100 exceeds the max_model_len 100. Please reduce prompt."},
		{"encrypted reasoning", `{"input":[{"type":"reasoning","summary":[],"encrypted_content":"gAAAA"},{"role":"user","content":"hi"}]}`,
			400, "BadRequestError", "Encrypted content is not supported."},
		{"background", `{"input":"hi","background":true}`, 400, "invalid_request_error", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := post(t, ts, "/v1/responses", tc.body)
			e := decode[errorBody](t, b)
			if resp.StatusCode != tc.wantStatus || e.Error.Type != tc.wantType || e.Error.Code != tc.wantStatus ||
				(tc.wantMsg != "" && e.Error.Message != tc.wantMsg) {
				t.Errorf("status %d body %s", resp.StatusCode, b)
			}
		})
	}
	// The room the context leaves caps the answer.
	_, b := post(t, ts, "/v1/responses", `{"input":"`+strings.Repeat("abcd", 95)+`"}`)
	if doc := string(b); field(doc, "status").Str != "incomplete" || field(doc, "usage.output_tokens").Int() != 5 || field(doc, "max_output_tokens").Int() != 5 {
		t.Errorf("a prompt of 95 tokens in a context of 100: %s", b)
	}
}

func TestResponsesFaults(t *testing.T) {
	sim, ts := start(t, vllmsim.Profile{DefaultMaxTokens: 10})
	for _, stream := range []string{"false", "true"} {
		sim.SetFaults(vllmsim.Faults{FailPercent: 100, FailStatus: 429})
		resp, b := post(t, ts, "/v1/responses", `{"stream":`+stream+`,"input":"hi"}`)
		if e := decode[errorBody](t, b).Error; resp.StatusCode != 429 || e.Type != "RateLimitError" || e.Code != 429 {
			t.Errorf("stream %s: status %d body %s", stream, resp.StatusCode, b)
		}
	}

	sim.SetFaults(vllmsim.Faults{CutAfterChunks: 5})
	resp := send(t, context.Background(), ts, "/v1/responses", `{"stream":true,"input":"hi"}`)
	events, err := readEvents(resp.Body)
	resp.Body.Close()
	if len(events) != 5 || err == nil || events[len(events)-1].name != "response.output_text.delta" {
		t.Errorf("cut stream: %q, err %v: want 5 events ending in the first delta, then a read error", names(events), err)
	}
	resp = send(t, context.Background(), ts, "/v1/responses", `{"input":"hi"}`)
	_, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("cut body: read error %v, want unexpected EOF", err)
	}
	eventually(t, settle, "the failures counted", func() bool { return sim.Stats().Failed == 4 })
}

// TestResponsesTiming: the Responses stream keeps the profile's schedule,
// on a fake clock: created and in_progress at once, the first delta after
// prefill, one delta per decode step.
func TestResponsesTiming(t *testing.T) {
	clock := newFakeClock()
	_, ts := start(t, vllmsim.Profile{PrefillTPS: 2000, DecodeTPS: 200, SpeedUp: 2, DefaultMaxTokens: 20}, clock.option())
	s := runTimed(t, clock, ts, "/v1/responses", `{"stream":true,"input":"`+strings.Repeat("abcd", 400)+`"}`, 4)
	if s.lines[0] != "event: response.created" || s.lines[2] != "event: response.in_progress" {
		t.Errorf("before prefill: %q, want response.created and response.in_progress", s.lines[:4])
	}
	checkSchedule(t, ts, s)
	if n := countPrefix(s.lines, "event: response.output_text.delta"); n != 20 || s.lines[len(s.lines)-2] != "event: response.completed" {
		t.Errorf("%d deltas, last event %q: want 20, then response.completed", n, s.lines[len(s.lines)-2])
	}
}

func TestResponsesBatchQueue(t *testing.T) {
	// One slot: a second response waits until the first is done.
	sim, ts := start(t, vllmsim.Profile{MaxBatch: 1, DecodeTPS: 100, DefaultMaxTokens: 100})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{}, 2)
	for range 2 {
		go func() {
			defer func() { done <- struct{}{} }()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/v1/responses", strings.NewReader(`{"stream":true,"input":"hi"}`))
			if resp, err := ts.Client().Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	eventually(t, 5*time.Second, "one running and one waiting", func() bool { return sim.Running() == 1 && sim.Waiting() == 1 })
	cancel()
	<-done
	<-done
	eventually(t, settle, "both cancelled", func() bool { return sim.Stats().Cancelled == 2 && sim.Running() == 0 })
}

// TestResponsesOpenAIClient drives the Responses API with the official
// OpenAI Go client: plain, stream, a function-call round trip with
// previous_response_id, retrieval and errors.
func TestResponsesOpenAIClient(t *testing.T) {
	sim, ts := start(t, vllmsim.Profile{DefaultMaxTokens: 8})
	client := openai.NewClient(
		option.WithBaseURL(ts.URL+"/v1/"),
		option.WithAPIKey("unused"),
		option.WithHTTPClient(ts.Client()),
		option.WithMaxRetries(0),
	)
	ctx := context.Background()
	ask := responses.ResponseNewParams{
		Model:        testModel,
		Instructions: openai.String("You are terse."),
		Input:        responses.ResponseNewParamsInputUnion{OfString: openai.String("Describe the harbor.")},
	}

	resp, err := client.Responses.New(ctx, ask)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != responses.ResponseStatusCompleted || len(strings.Fields(resp.OutputText())) != 8 || resp.Usage.OutputTokens != 8 ||
		resp.Usage.InputTokens != int64(sim.Stats().PromptTokens) {
		t.Errorf("response %s", resp.RawJSON())
	}
	got, err := client.Responses.Get(ctx, resp.ID, responses.ResponseGetParams{})
	if err != nil || got.OutputText() != resp.OutputText() {
		t.Errorf("Get: %v, text %q", err, got.OutputText())
	}

	stream := client.Responses.NewStreaming(ctx, ask)
	var deltas string
	var completed responses.Response
	for stream.Next() {
		switch ev := stream.Current(); ev.Type {
		case "response.output_text.delta":
			deltas += ev.AsResponseOutputTextDelta().Delta
		case "response.completed":
			completed = ev.AsResponseCompleted().Response
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if deltas != resp.OutputText() || completed.OutputText() != deltas || completed.Usage.OutputTokens != 8 {
		t.Errorf("stream: deltas %q, completed %q, usage %+v", deltas, completed.OutputText(), completed.Usage)
	}

	tools := []responses.ToolUnionParam{responses.ToolParamOfFunction("get_weather", map[string]any{
		"type":       "object",
		"properties": map[string]any{"city": map[string]any{"type": "string"}},
		"required":   []string{"city"},
	}, true)}
	call, err := client.Responses.New(ctx, responses.ResponseNewParams{
		Model: testModel,
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Weather in Paris?")},
		Tools: tools,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(call.Output) != 1 || call.Output[0].Type != "function_call" {
		t.Fatalf("output %s: want a function call", call.RawJSON())
	}
	fc := call.Output[0].AsFunctionCall()
	if fc.Name != "get_weather" || fc.Arguments != `{"city":"Paris"}` {
		t.Errorf("function call %+v", fc)
	}
	result := responses.ResponseInputItemParamOfFunctionCallOutput("sunny, 21C")
	result.OfFunctionCallOutput.CallID = openai.String(fc.CallID)
	answer, err := client.Responses.New(ctx, responses.ResponseNewParams{
		Model:              testModel,
		PreviousResponseID: openai.String(call.ID),
		Input:              responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{result}},
		Tools:              tools,
	})
	if err != nil {
		t.Fatal(err)
	}
	if answer.OutputText() == "" || answer.PreviousResponseID != call.ID {
		t.Errorf("answer to the tool output %s", answer.RawJSON())
	}

	_, err = client.Responses.Get(ctx, "resp_nope", responses.ResponseGetParams{})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 || apiErr.Type != "invalid_request_error" || apiErr.Param != "response_id" {
		t.Errorf("Get of an unknown id: %v", err)
	}
}
