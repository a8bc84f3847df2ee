package classifier

import (
	"hash/maphash"
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
