package vllmsim_test

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/switchyard/switchyard/vllmsim"
)

// TestNaturalLengths: with NaturalLengths an unscripted answer ends by
// itself, as vLLM's model does. Without max_tokens the budget is the rest
// of max_model_len, so an answer asked to be long runs past 256 tokens; an
// agent's max_tokens of 32000 is a budget the answer ends well before,
// with "stop"; "length" only when the budget really cuts it.
func TestNaturalLengths(t *testing.T) {
	_, ts := start(t, vllmsim.Profile{DefaultMaxTokens: 256, MaxModelLen: 32768, NaturalLengths: true})
	chat := func(extra, user string) (int64, string) {
		t.Helper()
		resp, b := post(t, ts, "/v1/chat/completions", `{`+extra+`"messages":[{"role":"user","content":`+strconv.Quote(user)+`}]}`)
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
		return gjson.GetBytes(b, "usage.completion_tokens").Int(), gjson.GetBytes(b, "choices.0.finish_reason").Str
	}
	long := "Write a long, detailed essay about the harbor."
	n, finish := chat("", long)
	if n <= 256 || finish != "stop" {
		t.Errorf("a long answer without max_tokens: %d tokens, %s; want more than 256, stop", n, finish)
	}
	if again, _ := chat("", long); again != n {
		t.Errorf("the same conversation: %d tokens, then %d", n, again)
	}
	n, finish = chat(`"max_tokens":32000,`, "Describe the harbor.")
	if n >= 4000 || finish != "stop" {
		t.Errorf("max_tokens 32000: %d tokens, %s; want an answer that ends by itself well before", n, finish)
	}
	n, finish = chat(`"max_tokens":5,`, "Describe the harbor.")
	if n != 5 || finish != "length" {
		t.Errorf("max_tokens 5: %d tokens, %s; want 5, length", n, finish)
	}
	// Without max_tokens the room the context leaves is the budget.
	_, small := start(t, vllmsim.Profile{MaxModelLen: 300, NaturalLengths: true})
	resp, b := post(t, small, "/v1/chat/completions", `{"messages":[{"role":"user","content":`+strconv.Quote(long)+`}]}`)
	prompt := gjson.GetBytes(b, "usage.prompt_tokens").Int()
	if got := gjson.GetBytes(b, "usage.completion_tokens").Int(); resp.StatusCode != 200 || got != 300-prompt ||
		gjson.GetBytes(b, "choices.0.finish_reason").Str != "length" {
		t.Errorf("a long answer in a 300-token context: %d %s", resp.StatusCode, b)
	}
}

// TestNaturalLengthsContinue: a continued answer (continue_final_message,
// as the gateway resumes a stream) ends where the uncut answer did.
func TestNaturalLengthsContinue(t *testing.T) {
	_, ts := start(t, vllmsim.Profile{NaturalLengths: true, LengthSeed: 7})
	user := `{"role":"user","content":"Describe the harbor."}`
	_, b := post(t, ts, "/v1/chat/completions", `{"max_tokens":32000,"messages":[`+user+`]}`)
	whole := gjson.GetBytes(b, "choices.0.message.content").String()
	total := gjson.GetBytes(b, "usage.completion_tokens").Int()
	words := strings.SplitAfter(whole, " ")
	prefix := strings.TrimSuffix(strings.Join(words[:4], ""), " ")
	_, b = post(t, ts, "/v1/chat/completions", `{"max_tokens":31996,"continue_final_message":true,"add_generation_prompt":false,"messages":[`+user+`,{"role":"assistant","content":`+strconv.Quote(prefix)+`}]}`)
	if cont := gjson.GetBytes(b, "choices.0.message.content").String(); prefix+cont != whole {
		t.Errorf("prefix %q + continuation %q\n!= uncut answer %q", prefix, cont, whole)
	}
	if n, f := gjson.GetBytes(b, "usage.completion_tokens").Int(), gjson.GetBytes(b, "choices.0.finish_reason").Str; n != total-4 || f != "stop" {
		t.Errorf("continuation of %d tokens (%s), want the %d left, stop", n, f, total-4)
	}
}

// TestNaturalLengthsAllAPIs: the Responses and Messages APIs' answers end
// at their natural length too.
func TestNaturalLengthsAllAPIs(t *testing.T) {
	_, ts := start(t, vllmsim.Profile{DefaultMaxTokens: 16, NaturalLengths: true})
	_, b := post(t, ts, "/v1/responses", `{"max_output_tokens":32000,"input":"Describe the harbor."}`)
	if n := gjson.GetBytes(b, "usage.output_tokens").Int(); n == 16 || n >= 4000 || gjson.GetBytes(b, "status").Str != "completed" {
		t.Errorf("responses: %s", b)
	}
	_, b = post(t, ts, "/v1/messages", `{"model":"`+testModel+`","max_tokens":32000,"messages":[{"role":"user","content":"Describe the harbor."}]}`)
	if n := gjson.GetBytes(b, "usage.output_tokens").Int(); n == 16 || n >= 4000 || gjson.GetBytes(b, "stop_reason").Str != "end_turn" {
		t.Errorf("messages: %s", b)
	}
}

// TestNaturalLengthDistribution: over many conversations the lengths
// follow the documented distribution (median about 200 tokens, about one
// in ten over 640), differ by seed, and stay within their bounds.
func TestNaturalLengthDistribution(t *testing.T) {
	var lengths []int
	differ := 0
	for i := range 2000 {
		key := uint64(i) * 0x9e3779b97f4a7c15
		n := vllmsim.NaturalLength(1, key, false)
		if n < 8 || n > 16384 {
			t.Fatalf("length %d out of bounds", n)
		}
		if n != vllmsim.NaturalLength(2, key, false) {
			differ++
		}
		lengths = append(lengths, n)
	}
	slices.Sort(lengths)
	if med := lengths[1000]; med < 170 || med > 235 {
		t.Errorf("median %d, want about 200", med)
	}
	if p90 := lengths[1800]; p90 < 540 || p90 > 750 {
		t.Errorf("90th percentile %d, want about 640", p90)
	}
	if differ < 1900 {
		t.Errorf("only %d of 2000 lengths change with the seed", differ)
	}
	var long []int
	for i := range 200 {
		long = append(long, vllmsim.NaturalLength(1, uint64(i), true))
	}
	slices.Sort(long)
	if med := long[100]; med < 1100 || med > 1900 {
		t.Errorf("long answers: median %d, want about 1500", med)
	}
}

// TestNaturalLengthsContinueAcrossAPIs: a Responses or Messages answer
// continued as the gateway resumes it (a chat request with the answer so
// far as the final assistant message) ends where the uncut answer did.
func TestNaturalLengthsContinueAcrossAPIs(t *testing.T) {
	_, ts := start(t, vllmsim.Profile{NaturalLengths: true, LengthSeed: 3})
	for _, tc := range []struct{ name, path, body, text, tokens string }{
		{"responses", "/v1/responses", `{"max_output_tokens":32000,"input":[{"role":"user","content":[{"type":"input_text","text":"Describe  the harbor."}]}]}`, "output.0.content.0.text", "usage.output_tokens"},
		{"messages", "/v1/messages", `{"model":"` + testModel + `","max_tokens":32000,"messages":[{"role":"user","content":[{"type":"text","text":"Describe the harbor."}]}]}`, "content.0.text", "usage.output_tokens"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, b := post(t, ts, tc.path, tc.body)
			whole, total := gjson.GetBytes(b, tc.text).String(), gjson.GetBytes(b, tc.tokens).Int()
			if total < 8 || whole == "" {
				t.Fatalf("uncut answer: %s", b)
			}
			prefix := strings.TrimSuffix(strings.Join(strings.SplitAfter(whole, " ")[:3], ""), " ")
			_, b = post(t, ts, "/v1/chat/completions", `{"max_tokens":31997,"continue_final_message":true,"add_generation_prompt":false,"messages":[{"role":"user","content":"Describe the harbor."},{"role":"assistant","content":`+strconv.Quote(prefix)+`}]}`)
			if cont := gjson.GetBytes(b, "choices.0.message.content").String(); prefix+cont != whole {
				t.Errorf("prefix %q + continuation %q\n!= uncut answer %q", prefix, cont, whole)
			}
			if n := gjson.GetBytes(b, "usage.completion_tokens").Int(); n != total-3 {
				t.Errorf("continuation of %d tokens, want the %d left", n, total-3)
			}
		})
	}
}
