package wire

import (
	"encoding/json"
	"reflect"
	"testing"
)

// TestValidUTF8: each byte that is not part of a UTF-8 character becomes
// U+FFFD, exactly as encoding/json writes the string; valid text is not
// copied.
func TestValidUTF8(t *testing.T) {
	for _, s := range []string{"", "plain", "é中😀", "a\xff\xfeb", "\xe2\x82", "\xe2\x82\xac\xc3", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xc0\xaf"} {
		want, _ := json.Marshal(s)
		var got string
		_ = json.Unmarshal(want, &got)
		if out := string(ValidUTF8([]byte(s))); out != got {
			t.Errorf("ValidUTF8(%q) = %q, want %q", s, out, got)
		}
	}
	b := []byte("valid é")
	if out := ValidUTF8(b); &out[0] != &b[0] {
		t.Error("valid text was copied")
	}
	for s, want := range map[string]int{"": 0, "a": 0, "é": 0, "a\xc3": 1, "a\xe2\x82": 2, "\xf0\x9f\x98": 3, "\xff": 0, "a\x82": 0, "😀": 0} {
		if got := PartialRune([]byte(s)); got != want {
			t.Errorf("PartialRune(%q) = %d, want %d", s, got, want)
		}
	}
}

// TestValidEscapes: a lone surrogate's \u escape becomes \ufffd (what
// encoding/json decodes it to), a pair and every other escape stay as they
// are, an escaped backslash before "u" is no escape, and text without a
// lone half is not copied.
func TestValidEscapes(t *testing.T) {
	for in, want := range map[string]string{
		`"plain"`:                     `"plain"`,
		`"\ud83d\ude00"`:              `"\ud83d\ude00"`,
		`"\ud83d"`:                    `"\ufffd"`,
		`"\ude00x\uD83Dy"`:            `"\ufffdx\ufffdy"`,
		`"\ud83d\ud83d\ude00"`:        `"\ufffd\ud83d\ude00"`,
		`"\\ud83d"`:                   `"\\ud83d"`,
		`"\\\ud83d"`:                  `"\\\ufffd"`,
		`"\u00e9\n\ud8"`:              `"\u00e9\n\ud8"`,
		`{"a":"\udfff","b":"\u0041"}`: `{"a":"\ufffd","b":"\u0041"}`,
	} {
		got := string(ValidEscapes([]byte(in)))
		if got != want {
			t.Errorf("ValidEscapes(%s) = %s, want %s", in, got, want)
		}
		var a, b any
		if json.Unmarshal([]byte(in), &a) == nil && (json.Unmarshal([]byte(got), &b) != nil || !reflect.DeepEqual(a, b)) {
			t.Errorf("%s: encoding/json reads %v, after %v", in, a, b)
		}
	}
	b := []byte(`"\ud83d\ude00 \u00e9"`)
	if out := ValidEscapes(b); &out[0] != &b[0] {
		t.Error("text without a lone surrogate was copied")
	}
}
