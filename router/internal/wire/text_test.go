package wire

import (
	"encoding/json"
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
