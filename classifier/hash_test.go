package classifier

import (
	"hash/maphash"
	"strings"
	"testing"
)

// TestHashSeparatesFields: inputs whose fields would run together into the
// same bytes still get different cache keys.
func TestHashSeparatesFields(t *testing.T) {
	seed := maphash.MakeSeed()
	pairs := [][2]Input{
		{{LastUser: "hi\x00Prove it"}, {LastUser: "hi", Prompt: "Prove it\x00"}},
		{{System: "x\x00y"}, {System: "x", LastUser: "y\x00"}},
		{{Tools: []string{"a\x01b"}}, {Tools: []string{"a", "b"}}},
		{{Tools: []string{"ab"}}, {Tools: []string{"a", "b"}}},
		{{Turns: 1}, {Turns: 2}},
		{{Last: LastInstruction}, {Last: LastToolResult}},
		{{Last: LastToolResult, Steps: 1}, {Last: LastToolResult, Steps: 2}},
		{{Last: LastToolResult, PromptTokens: 900}, {Last: LastToolResult, PromptTokens: 5000}},
		{{Last: LastToolResult}, {Last: LastToolResult, MaxTokens: 100}},
	}
	for _, p := range pairs {
		if p[0].hash(seed) == p[1].hash(seed) {
			t.Errorf("%+v and %+v share a cache key", p[0], p[1])
		}
	}
	a := Input{System: "s", LastUser: "u", Tools: []string{"t"}, Turns: 3}
	b := a
	if a.hash(seed) != b.hash(seed) {
		t.Error("equal inputs hash differently")
	}
}

// TestHashBandsSizes: prompt and answer sizes in one band share a cache
// key (the summary shows only the band).
func TestHashBandsSizes(t *testing.T) {
	seed := maphash.MakeSeed()
	a := Input{Last: LastToolResult, Steps: 2, PromptTokens: 5000, MaxTokens: 32000}
	b := Input{Last: LastToolResult, Steps: 2, PromptTokens: 7000, MaxTokens: 20000}
	if a.hash(seed) != b.hash(seed) {
		t.Errorf("%+v and %+v are in the same bands but hash differently", a, b)
	}
}

func TestBand(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want string
	}{{0, "under 1k"}, {1023, "under 1k"}, {1024, "1k-2k"}, {2047, "1k-2k"}, {2048, "2k-4k"}, {32000, "16k-32k"}, {32768, "32k-64k"},
		{131071, "64k-128k"}, {131072, "128k or more"}, {1 << 30, "128k or more"}} {
		if got := band(tc.n); got != tc.want {
			t.Errorf("band(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
	if got := answerBand(0); got != "not set" {
		t.Errorf("answerBand(0) = %q", got)
	}
}

// TestSummaryDescribesTheTurn: with Last set, the classifier reads what
// the turn is, how far into the loop, and the sizes' bands.
func TestSummaryDescribesTheTurn(t *testing.T) {
	for _, tc := range []struct {
		in   Input
		want []string
	}{
		{Input{LastUser: "fix it", Last: LastInstruction, PromptTokens: 3000}, []string{"Last message: a new instruction from the user\n", "Prompt: 2k-4k tokens\n", "Answer budget: not set\n"}},
		{Input{LastUser: "fix it", Last: LastToolResult, Steps: 3, PromptTokens: 40000, MaxTokens: 32000}, []string{"Last message: a tool result, 3 assistant steps after the user's last message\n", "Prompt: 32k-64k tokens\n", "Answer budget: 16k-32k tokens\n"}},
	} {
		got := tc.in.summary()
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("summary of %+v lacks %q:\n%s", tc.in, w, got)
			}
		}
	}
	if got := (&Input{LastUser: "hi", Turns: 1}).summary(); strings.Contains(got, "Last message") || strings.Contains(got, "Prompt:") {
		t.Errorf("without Last the summary describes no turn:\n%s", got)
	}
}
