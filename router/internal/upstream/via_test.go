package upstream

import (
	"net/http"
	"strings"
	"testing"
)

// TestVia: the gateway's Via entry is appended after the client's, and a
// request carrying it is recognised whatever else Via holds.
func TestVia(t *testing.T) {
	via := NewVia()
	h := http.Header{}
	h.Add("Via", "1.0 fred, 1.1 p.example.net (Apache/1.1)")
	if Looped(h, via) {
		t.Fatal("an unmarked request read as looped")
	}
	AddVia(h, via)
	if got := h.Get("Via"); !strings.HasPrefix(got, "1.0 fred, 1.1 p.example.net (Apache/1.1), 1.1 switchyard-") {
		t.Errorf("Via = %q", got)
	}
	if !Looped(h, via) {
		t.Error("a request this gateway marked is not recognised")
	}
	if Looped(h, NewVia()) {
		t.Error("another gateway process reads the mark as its own")
	}
}

// FuzzVia: reading Via never panics, and a marked header is always
// recognised.
func FuzzVia(f *testing.F) {
	for _, s := range []string{"", "1.1 a", "1.1 a, 1.0 b (c, d)", ",,,", "  ", "HTTP/2 x y z", "1.1 switchyard-000000000000"} {
		f.Add(s)
	}
	via := NewVia()
	f.Fuzz(func(t *testing.T, v string) {
		h := http.Header{"Via": {v}}
		_ = Looped(h, via)
		AddVia(h, via)
		if !Looped(h, via) {
			t.Fatalf("Via %q with the gateway's entry appended is not recognised", h.Get("Via"))
		}
	})
}
