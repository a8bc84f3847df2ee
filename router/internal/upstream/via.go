package upstream

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"strings"
)

// newVia is this process's Via entry: a pseudonym no other process shares.
func NewVia() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "1.1 switchyard-" + hex.EncodeToString(b[:])
}

// addVia appends this gateway's entry to the outbound request's Via
// (after those the client's request carried).
func AddVia(h http.Header, via string) {
	if prior := h.Values("Via"); len(prior) > 0 {
		h.Set("Via", strings.Join(prior, ", ")+", "+via)
		return
	}
	h["Via"] = []string{via}
}

// looped reports whether h's Via names this gateway (via is its own
// entry): the request was forwarded by this process and came back.
func Looped(h http.Header, via string) bool {
	_, self, _ := strings.Cut(via, " ")
	for _, v := range h.Values("Via") {
		for entry := range strings.SplitSeq(v, ",") {
			if viaReceivedBy(entry) == self {
				return true
			}
		}
	}
	return false
}

// viaReceivedBy is the received-by part of one Via entry
// ("[protocol-name/]protocol-version received-by [comment]"); "" when it
// has none.
func viaReceivedBy(entry string) string {
	f := strings.Fields(entry)
	if len(f) < 2 {
		return ""
	}
	return f[1]
}
