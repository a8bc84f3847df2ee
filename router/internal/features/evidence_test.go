package features

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/switchyard/switchyard/classifier"
	"github.com/switchyard/switchyard/router/internal/wire"
)

func mustRead(t testing.TB, ep wire.Endpoint, body string) Turn {
	t.Helper()
	info, err := wire.Parse([]byte(body), ep, 64)
	if err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	return Read(info, 4000)
}

// TestReadCurrentInstruction: the classifier reads the latest instruction
// in the user's own words, boilerplate removed, with the opening as
// context; tool results and a reminder-only message are not instructions.
func TestReadCurrentInstruction(t *testing.T) {
	for _, tc := range []struct {
		name            string
		ep              wire.Endpoint
		body            string
		latest, opening string
		instructions    int
		last            string
		steps           int
	}{
		{"fifth instruction", wire.Chat, `{"model":"m","messages":[{"role":"user","content":"one"},{"role":"assistant","content":"ok"},{"role":"user","content":"two"},{"role":"assistant","content":"ok"},{"role":"user","content":"three"},{"role":"assistant","content":"ok"},{"role":"user","content":"four"},{"role":"assistant","content":"ok"},{"role":"user","content":"debug the parser"}]}`,
			"debug the parser", "one", 5, classifier.LastInstruction, 0},
		{"reminders stripped", wire.Chat, `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"<system-reminder>\nskills: a, b\n</system-reminder>"},{"type":"text","text":"<system-reminder>Today's date is 2026-12-01.</system-reminder>"},{"type":"text","text":"fix the bug"}]}]}`,
			"fix the bug", "", 1, classifier.LastInstruction, 0},
		{"escaped tags stripped", wire.Chat, `{"model":"m","messages":[{"role":"user","content":"\u003csystem-reminder\u003eyou have 3 skills\u003c/system-reminder\u003e\nrename foo"}]}`,
			"rename foo", "", 1, classifier.LastInstruction, 0},
		{"codex environment context is not the task", wire.Responses, `{"model":"m","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"<environment_context><cwd>/w</cwd></environment_context>"}]},{"type":"message","role":"user","content":[{"type":"input_text","text":"create notes.txt"}]},{"type":"function_call","call_id":"a","name":"exec","arguments":"{}"},{"type":"function_call_output","call_id":"a","output":"done"}]}`,
			"create notes.txt", "", 1, classifier.LastToolResult, 1},
		{"claude code tool result with a reminder", wire.Messages, `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"write notes"},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"Write","input":{"p":1}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"File created"},{"type":"text","text":"<system-reminder>\n<total_tokens>1 tokens left</total_tokens>\n</system-reminder>"}]}]}`,
			"write notes", "", 1, classifier.LastToolResult, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := mustRead(t, tc.ep, tc.body).Input
			if in.LastUser != tc.latest || in.Opening != tc.opening || in.Instructions != tc.instructions || in.Last != tc.last || in.Steps != tc.steps {
				t.Errorf("got latest %q opening %q instructions %d last %q steps %d; want %q %q %d %q %d",
					in.LastUser, in.Opening, in.Instructions, in.Last, in.Steps, tc.latest, tc.opening, tc.instructions, tc.last, tc.steps)
			}
		})
	}
}

// TestReadToolError: a failed tool result is read in every API's shape:
// Messages' is_error, and the output's own words on chat and Responses.
func TestReadToolError(t *testing.T) {
	chat := func(out string) string {
		b, _ := json.Marshal(out)
		return `{"model":"m","messages":[{"role":"user","content":"run the tests"},{"role":"assistant","tool_calls":[{"id":"1","type":"function","function":{"name":"bash","arguments":"{\"cmd\":\"go test\"}"}}]},{"role":"tool","tool_call_id":"1","content":` + string(b) + `}]}`
	}
	for _, tc := range []struct {
		name, body string
		ep         wire.Endpoint
		want       string
	}{
		{"messages is_error", `{"model":"m","max_tokens":9,"messages":[{"role":"user","content":"go"},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"Bash","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","is_error":true,"content":"boom"}]}]}`, wire.Messages, "is_error"},
		{"messages blocks content", `{"model":"m","max_tokens":9,"messages":[{"role":"user","content":"go"},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"Bash","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"Traceback (most recent call last):\n  File x\nValueError: bad"}]}]}]}`, wire.Messages, "traceback"},
		{"responses exit code", `{"model":"m","input":[{"role":"user","content":"go"},{"type":"function_call","call_id":"a","name":"exec","arguments":"{}"},{"type":"function_call_output","call_id":"a","output":"Chunk ID: 1\nProcess exited with code 2\nOutput:\n"}]}`, wire.Responses, "exit code 2"},
		{"responses exit 0", `{"model":"m","input":[{"role":"user","content":"go"},{"type":"function_call","call_id":"a","name":"exec","arguments":"{}"},{"type":"function_call_output","call_id":"a","output":"Process exited with code 0\nOutput:\nok"}]}`, wire.Responses, ""},
		{"go test failure", chat("--- FAIL: TestParse (0.00s)\n    parse_test.go:12: got 2 fields, want 3\nFAIL\nexit status 1"), wire.Chat, "failing tests"},
		{"pytest summary", chat("collected 4 items\n\ntest_csv.py ..F.\n\n=== 1 failed, 3 passed in 0.02s ==="), wire.Chat, "failing tests"},
		{"0 failed passes", chat("=== 0 failed, 4 passed in 0.02s ==="), wire.Chat, ""},
		{"not found", chat("bash: gotest: command not found"), wire.Chat, "not found"},
		{"error line", chat("error: could not compile `csv`"), wire.Chat, "error"},
		{"cline json", chat(`{"query":"x","result":"no such path","success":false}`), wire.Chat, "error"},
		{"a read file mentioning errors", chat("1: package csv\n2: // returns an error when a field is failed or not found\n3: func Parse() error"), wire.Chat, ""},
		{"success", chat("Wrote file successfully."), wire.Chat, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := mustRead(t, tc.ep, tc.body)
			if tr.ToolError != tc.want {
				t.Errorf("ToolError = %q, want %q (result %q)", tr.ToolError, tc.want, tr.Input.ToolResult)
			}
			if tr.Input.ToolResult == "" {
				t.Error("the tool result is not in the classifier's input")
			}
		})
	}
	// An earlier failure followed by a new instruction is not this turn's.
	tr := mustRead(t, wire.Chat, `{"model":"m","messages":[{"role":"user","content":"go"},{"role":"assistant","tool_calls":[{"id":"1","type":"function","function":{"name":"bash","arguments":"{}"}}]},{"role":"tool","tool_call_id":"1","content":"FAIL"},{"role":"assistant","content":"it failed"},{"role":"user","content":"thanks, now write a title"}]}`)
	if tr.ToolError != "" || tr.Input.ToolResult != "" {
		t.Errorf("a new instruction carries the earlier failure: %q %q", tr.ToolError, tr.Input.ToolResult)
	}
}

// TestReadRepeatedCall: the latest call repeats one of the last few with
// identical arguments; other arguments, or a call out of the window, do
// not count.
func TestReadRepeatedCall(t *testing.T) {
	loop := func(args ...string) string {
		var sb strings.Builder
		sb.WriteString(`{"model":"m","messages":[{"role":"user","content":"go"}`)
		for i, a := range args {
			id := string(rune('a' + i))
			sb.WriteString(`,{"role":"assistant","tool_calls":[{"id":"` + id + `","type":"function","function":{"name":"read","arguments":` + a + `}}]},{"role":"tool","tool_call_id":"` + id + `","content":"x"}`)
		}
		sb.WriteString(`]}`)
		return sb.String()
	}
	same := `"{\"path\":\"a.go\"}"`
	other := `"{\"path\":\"b.go\"}"`
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"spinning", []string{same, other, same}, "read"},
		{"new arguments", []string{same, other}, ""},
		{"first call", []string{same}, ""},
		{"out of the window", append(append([]string{same}, strings.Split(strings.Repeat(other+"|", 0)+`"{\"n\":1}"|"{\"n\":2}"|"{\"n\":3}"|"{\"n\":4}"|"{\"n\":5}"|"{\"n\":6}"|"{\"n\":7}"|"{\"n\":8}"`, "|")...), same), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := mustRead(t, wire.Chat, loop(tc.args...)).RepeatedCall; got != tc.want {
				t.Errorf("RepeatedCall = %q, want %q", got, tc.want)
			}
		})
	}
	// Messages tool_use and Responses function_call items.
	msgs := `{"model":"m","max_tokens":9,"messages":[{"role":"user","content":"go"},` +
		`{"role":"assistant","content":[{"type":"tool_use","id":"1","name":"Grep","input":{"q":"x"}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"1","content":"none"}]},` +
		`{"role":"assistant","content":[{"type":"tool_use","id":"2","name":"Grep","input":{"q":"x"}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"2","content":"none"}]}]}`
	if got := mustRead(t, wire.Messages, msgs).RepeatedCall; got != "Grep" {
		t.Errorf("messages: RepeatedCall = %q", got)
	}
	resp := `{"model":"m","input":[{"role":"user","content":"go"},{"type":"function_call","call_id":"a","name":"exec","arguments":"{\"cmd\":\"ls\"}"},{"type":"function_call_output","call_id":"a","output":"x"},{"type":"function_call","call_id":"b","name":"exec","arguments":"{\"cmd\":\"ls\"}"},{"type":"function_call_output","call_id":"b","output":"x"}]}`
	if got := mustRead(t, wire.Responses, resp).RepeatedCall; got != "exec" {
		t.Errorf("responses: RepeatedCall = %q", got)
	}
}

// TestOpeningKeyCanonical: the implicit session key ignores what agents
// change on their own from one request to the next (cache_control moved
// to the newest block, a date reminder dropped), and still tells two
// tasks apart.
func TestOpeningKeyCanonical(t *testing.T) {
	key := func(ep wire.Endpoint, body string) [16]byte { return mustRead(t, ep, body).OpeningKey() }
	// pi over Messages: cache_control follows the newest block.
	a := key(wire.Messages, `{"model":"m","max_tokens":9,"system":[{"type":"text","text":"You are pi.","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":[{"type":"text","text":"create notes","cache_control":{"type":"ephemeral"}}]}]}`)
	b := key(wire.Messages, `{"model":"m","max_tokens":9,"system":[{"type":"text","text":"You are pi."}],"messages":[{"role":"user","content":[{"type":"text","text":"create notes"}]},{"role":"assistant","content":[{"type":"tool_use","id":"1","name":"write","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"1","content":"ok","cache_control":{"type":"ephemeral"}}]}]}`)
	if a != b {
		t.Error("moving cache_control changed the session key")
	}
	// Qwen Code -c: the first message without its date reminder.
	c := key(wire.Chat, `{"model":"m","messages":[{"role":"system","content":"You are Qwen Code."},{"role":"user","content":[{"type":"text","text":"<system-reminder>skills</system-reminder>"},{"type":"text","text":"<system-reminder>Today's date is Sunday, December 6, 2026.</system-reminder>"},{"type":"text","text":"create notes"}]}]}`)
	d := key(wire.Chat, `{"model":"m","messages":[{"role":"system","content":"You are Qwen Code."},{"role":"user","content":[{"type":"text","text":"<system-reminder>skills</system-reminder>"},{"type":"text","text":"create notes"}]},{"role":"assistant","content":"done"},{"role":"user","content":"now edit it"}]}`)
	if c != d {
		t.Error("dropping the date reminder changed the session key")
	}
	// A dated line in the system prompt.
	e := key(wire.Chat, `{"model":"m","messages":[{"role":"system","content":"Agent.\nToday is 2026-12-06.\nBe brief."},{"role":"user","content":"x"}]}`)
	f := key(wire.Chat, `{"model":"m","messages":[{"role":"system","content":"Agent.\nToday is 2026-12-07.\nBe brief."},{"role":"user","content":"x"}]}`)
	if e != f {
		t.Error("the date in the system prompt changed the session key")
	}
	g := key(wire.Chat, `{"model":"m","messages":[{"role":"system","content":"You are Qwen Code."},{"role":"user","content":"create other notes"}]}`)
	if g == d {
		t.Error("two tasks share a session key")
	}
}

// TestReadBounded: megabyte tool outputs, invalid UTF-8, thousands of
// messages: a bounded, valid excerpt and no panic.
func TestReadBounded(t *testing.T) {
	big := strings.Repeat("line of output \\\"quoted\\\" é\\n", 80000) // about 2.3 MB of JSON
	body := `{"model":"m","messages":[{"role":"user","content":"go"}`
	for i := range 3000 {
		body += `,{"role":"assistant","tool_calls":[{"id":"` + string(rune('a'+i%26)) + `","type":"function","function":{"name":"read","arguments":"{}"}}]},{"role":"tool","tool_call_id":"x","content":"ok"}`
	}
	body += `,{"role":"assistant","tool_calls":[{"id":"z","type":"function","function":{"name":"read","arguments":"{\"n\":1}"}}]},{"role":"tool","tool_call_id":"z","content":"` + big + "\xff\xfe" + `\nFAIL"}]}`
	info, err := wire.Parse([]byte(body), wire.Chat, 64)
	if err != nil {
		t.Fatal(err)
	}
	tr := Read(info, 4000)
	if n := len(tr.Input.ToolResult); n > 2*4000+16 {
		t.Errorf("tool result excerpt of %d bytes", n)
	}
	if !utf8.ValidString(tr.Input.ToolResult) {
		t.Error("the excerpt is not valid UTF-8")
	}
	if tr.ToolError != "failing tests" {
		t.Errorf("the failure at the output's end was missed: %q", tr.ToolError)
	}
	if s := classifier.Summary(tr.Input, 4000); len(s) > 4000+600 {
		t.Errorf("summary of %d bytes", len(s))
	}
}

// TestUnescape: the excerpts' decoder reads JSON strings as
// encoding/json does (escapes, surrogate pairs; a lone surrogate is
// U+FFFD).
func TestUnescape(t *testing.T) {
	for _, raw := range []string{`plain`, `a\nb\tc\"d\\e\/f\b\f\r`, `\u00e9\u4e2d`, `\ud83d\ude00 smile`, `lone \ud83d end`, `\u003csystem-reminder\u003e`, `bad \uZZZZ`} {
		var want string
		if err := json.Unmarshal([]byte(`"`+raw+`"`), &want); err != nil {
			want = "" // not valid JSON: only no panic and valid UTF-8 is asked
		}
		got := unescape(raw)
		if want != "" && got != want {
			t.Errorf("unescape(%q) = %q, want %q", raw, got, want)
		}
		if !utf8.ValidString(got) {
			t.Errorf("unescape(%q) is not valid UTF-8", raw)
		}
	}
}

// TestStripBoilerplate: blocks removed wherever they stand, a block cut
// by an excerpt removed as far as it reaches, other tags kept.
func TestStripBoilerplate(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"fix it", "fix it"},
		{"<system-reminder>a</system-reminder>fix <b>it</b>", "fix <b>it</b>"},
		{"x <system-reminder>a</system-reminder> y <environment_context><cwd>/</cwd></environment_context> z", "x  y  z"},
		{"tail of a reminder</system-reminder>\nfix it", "fix it"},
		{"fix it\n<system-reminder>a reminder cut short", "fix it"},
		{"<system-reminders>kept</system-reminders>", "<system-reminders>kept</system-reminders>"},
		{"a < b and c </ d", "a < b and c </ d"},
	} {
		if got := stripBoilerplate(tc.in); got != tc.want {
			t.Errorf("stripBoilerplate(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// BenchmarkStripManyBlocks: a 32 kB text of about 900 reminder blocks
// (the most a user text is read whole) costs one pass over it.
func BenchmarkStripManyBlocks(b *testing.B) {
	s := strings.Repeat("<system-reminder>r</system-reminder>w ", 900)
	b.SetBytes(int64(len(s)))
	b.ReportAllocs()
	for b.Loop() {
		if got := stripBoilerplate(s); !strings.HasPrefix(got, "w") {
			b.Fatal(got[:10])
		}
	}
}
