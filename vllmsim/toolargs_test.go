package vllmsim

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/tidwall/gjson"
)

// TestExampleArguments: arguments fill the required properties (all of
// them when none is required) with a value of each property's type.
func TestExampleArguments(t *testing.T) {
	tests := []struct {
		name, schema, want string
	}{
		{"no schema", ``, `{}`},
		{"not an object", `"string"`, `{}`},
		{"paths and commands", `{"type":"object","properties":{"file_path":{"type":"string"},"filename":{"type":"string"},"path":{"type":"string"},"command":{"type":"string"},"cmd":{"type":"string"},"pattern":{"type":"string"}}}`,
			`{"file_path":"report.txt","filename":"report.txt","path":"report.txt","command":"ls -la","cmd":"ls -la","pattern":"**/*.go"}`},
		{"required only, in their order", `{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"integer"},"c":{"type":"boolean"}},"required":["c","a"]}`,
			`{"c":true,"a":"example"}`},
		{"numbers within bounds", `{"type":"object","properties":{"n":{"type":"integer","minimum":5},"m":{"type":"integer","maximum":0},"x":{"type":"number","minimum":0.25},"y":{"type":"number"}}}`,
			`{"n":5,"m":0,"x":0.25,"y":1.5}`},
		{"enum, const, default", `{"type":"object","properties":{"e":{"type":"string","enum":["low","high"]},"k":{"const":7},"d":{"type":"integer","default":3}}}`,
			`{"e":"low","k":7,"d":3}`},
		{"arrays and nested objects", `{"type":"object","properties":{"todos":{"type":"array","items":{"type":"object","properties":{"content":{"type":"string"},"status":{"enum":["pending","done"]}},"required":["content","status"]}},"opts":{"properties":{"lang":{"type":"string"}}}},"required":["todos","opts"]}`,
			`{"todos":[{"content":"Hello from the simulator.","status":"pending"}],"opts":{"lang":"en"}}`},
		{"nullable and anyOf", `{"type":"object","properties":{"a":{"type":["null","integer"]},"b":{"anyOf":[{"type":"null"},{"type":"boolean"}]}}}`,
			`{"a":1,"b":true}`},
		{"too deep", `{"type":"object","properties":{"a":` + strings.Repeat(`{"type":"object","properties":{"a":`, 10) + `{"type":"integer"}` + strings.Repeat(`}}`, 10) + `}}`,
			`{"a":{"a":{"a":{"a":{"a":{"a":{"a":{"a":{"a":"example"}}}}}}}}}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := exampleArguments(gjson.Parse(tc.schema))
			if !gjson.Valid(got) {
				t.Fatalf("arguments %s are not JSON", got)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("arguments (-want +got):\n%s", diff)
			}
			if strings.Join(splitArguments(got), "") != got {
				t.Errorf("pieces of %s do not add up", got)
			}
		})
	}
}

// TestSplitText: a scripted text's tokens are its words with the space
// before them, adding up to the text.
func TestSplitText(t *testing.T) {
	for text, want := range map[string][]string{
		"":                {""},
		"All done.":       {"All", " done."},
		"  two\nlines  ":  {"  two", "\nlines  "},
		"wörds, ünicode!": {"wörds,", " ünicode!"},
	} {
		got := splitText(text)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("splitText(%q) (-want +got):\n%s", text, diff)
		}
	}
}
