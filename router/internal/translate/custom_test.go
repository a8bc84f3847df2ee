package translate

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestInputDecoder: the input of {"input": "..."} arguments is decoded
// whatever the pieces they arrive in (every split of every case is
// tried), each piece yielding the characters it makes certain; arguments
// of another shape stop the decoder before the value, and CustomInput then
// falls back to the input member or to the raw arguments; a value that
// began is the input however it goes on (what its deltas added up to).
func TestInputDecoder(t *testing.T) {
	for _, tc := range []struct {
		name, args string
		want       string // the decoded input
		complete   bool
		input      string // CustomInput
	}{
		{"plain", `{"input": "ls -la"}`, "ls -la", true, "ls -la"},
		{"escapes", `{"input":"a\"b\\c\/d\b\f\n\r\t"}`, "a\"b\\c/d\b\f\n\r\t", true, "a\"b\\c/d\b\f\n\r\t"},
		{"unicode escapes", `{"input":"\u00e9\u4E2D\u0000x"}`, "é中\x00x", true, "é中\x00x"},
		{"surrogate pair", `{"input":"a\ud83d\ude00b"}`, "a😀b", true, "a😀b"},
		{"lone high surrogate", `{"input":"a\ud83dz\ud83d\n\ud83d\u0041\ud83d"}`, "a\uFFFDz\uFFFD\n\uFFFDA\uFFFD", true, "a\uFFFDz\uFFFD\n\uFFFDA\uFFFD"},
		{"lone low surrogate", `{"input":"\ude00x"}`, "\uFFFDx", true, "\uFFFDx"},
		{"two highs", `{"input":"\ud83d\ud83d\ude00"}`, "\uFFFD😀", true, "\uFFFD😀"},
		{"raw utf-8", `{"input":"héllo 😀"}`, "héllo 😀", true, "héllo 😀"},
		{"whitespace", " \n{ \"input\" :\t\"x\" } \n", "x", true, "x"},
		{"escaped key", `{"\u0069nput":"x"}`, "x", true, "x"},
		{"empty", `{"input":""}`, "", true, ""},
		{"another member after", `{"input":"abc","x":1}`, "abc", false, "abc"},
		{"another key first", `{"cmd":"ls","input":"x"}`, "", false, "x"},
		{"not a string", `{"input":["ls"]}`, "", false, `{"input":["ls"]}`},
		{"not an object", `"ls"`, "", false, `"ls"`},
		{"plain text", `*** Begin Patch`, "", false, `*** Begin Patch`},
		// Once the value began (its characters may have been sent as
		// deltas), it is read leniently, and it is the input.
		{"cut", `{"input":"abc`, "abc", false, "abc"},
		{"cut in an escape", `{"input":"ab\u00`, "ab", false, "ab"},
		{"bad escape", `{"input":"a\qb"}`, `a\qb`, false, `a\qb`},
		{"bad hex", `{"input":"a\u00g0"}`, `a\u00g0`, false, `a\u00g0`},
		{"bad hex, then a quote", `{"input":"a\u0"}`, `a\u0`, false, `a\u0`},
		{"bad hex after a high surrogate", `{"input":"\ud83d\u0\\"}`, "\uFFFD\\u0\\", false, "\uFFFD\\u0\\"},
		{"control character", "{\"input\":\"a\nb\"}", "a\nb", false, "a\nb"},
		{"trailing text", `{"input":"a"} x`, "a", false, "a"},
		{"broken after the value", `{"input":"a",}`, "a", false, "a"},
		{"long key", `{"` + strings.Repeat("k", 100) + `":"x"}`, "", false, "{\"" + strings.Repeat("k", 100) + "\":\"x\"}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := CustomInput(tc.args); got != tc.input {
				t.Errorf("customInput = %q, want %q", got, tc.input)
			}
			for i := 0; i <= len(tc.args); i++ {
				for j := i; j <= len(tc.args); j++ {
					var d InputDecoder
					got := d.Feed(tc.args[:i]) + d.Feed(tc.args[i:j]) + d.Feed(tc.args[j:])
					if got != tc.want || d.complete() != tc.complete {
						t.Fatalf("split at %d, %d: %q complete %v, want %q %v", i, j, got, d.complete(), tc.want, tc.complete)
					}
				}
			}
		})
	}
}

// TestInputDecoderMatchesJSON: for any string, its JSON encoding decodes
// to it, however it is split.
func TestInputDecoderMatchesJSON(t *testing.T) {
	for _, s := range []string{"", "a", "*** Begin Patch\n*** Add File: a.go\n+package a\n*** End Patch\n", "tab\there \"quoted\" \\ back", "é 中 😀 \u2028 \x01 \x7f <>&"} {
		b, _ := json.Marshal(map[string]string{"input": s})
		args := string(b)
		var d InputDecoder
		var got strings.Builder
		for _, c := range []byte(args) {
			got.WriteString(d.Feed(string([]byte{c})))
		}
		if d := cmp.Diff(s, got.String()); d != "" {
			t.Errorf("byte by byte %s (-want +got):\n%s", args, d)
		}
	}
}

// FuzzInputDecoder: however arguments are split, the decoder yields the
// same characters as when they come whole, which are CustomInput once the
// value began (a stream's deltas add up to its input); when it calls them complete,
// they are JSON {"input": s} and it yielded exactly s (encoding/json's
// reading, lone surrogates as U+FFFD).
func FuzzInputDecoder(f *testing.F) {
	for _, s := range []string{`{"input":"a\ud83d\ude00\n"}`, `{"input":"\ud83dx"}`, ` { "input" : "" } `, `{"input":1}`, `{"\u0069nput":"\"\\\/"}`} {
		f.Add(s, uint(3))
	}
	f.Fuzz(func(t *testing.T, args string, at uint) {
		var whole InputDecoder
		want := whole.Feed(args)
		i := int(at % uint(len(args)+1))
		var d InputDecoder
		got := d.Feed(args[:i]) + d.Feed(args[i:])
		if got != want || d.complete() != whole.complete() {
			t.Fatalf("split at %d: %q %v, whole %q %v", i, got, d.complete(), want, whole.complete())
		}
		if whole.began && CustomInput(args) != want {
			t.Fatalf("%q: the deltas add up to %q, CustomInput is %q", args, want, CustomInput(args))
		}
		if !whole.complete() {
			return
		}
		var v struct{ Input *string }
		dec := json.NewDecoder(strings.NewReader(args))
		if err := dec.Decode(&v); err != nil || v.Input == nil {
			t.Fatalf("complete, but not {\"input\": string}: %q (%v)", args, err)
		}
		if *v.Input != want && strings.ToValidUTF8(want, "\uFFFD") == want {
			t.Fatalf("%q: decoded %q, encoding/json %q", args, want, *v.Input)
		}
	})
}
