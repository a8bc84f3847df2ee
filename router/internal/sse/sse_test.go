package sse

import (
	"bytes"
	"testing"
)

// FuzzSSE: splitting a stream into events loses and invents no byte.
func FuzzSSE(f *testing.F) {
	f.Add([]byte("data: {\"a\":1,\"usage\":null}\n\ndata: [DONE]\n\n"))
	f.Add([]byte("data: x\r\n\r\ndata: y\n\n"))
	f.Add([]byte("data: x\r\rdata:y\r\r"))
	f.Add([]byte("data: {\"usage\":null,\"b\":2}\n\npartial"))
	f.Fuzz(func(t *testing.T, stream []byte) {
		var got []byte
		rest := stream
		for {
			ev, n, _ := NextEvent(rest, 0)
			if ev == nil {
				break
			}
			if n <= 0 || n > len(rest) || !bytes.Equal(ev, rest[:n]) {
				t.Fatalf("bad event boundary %d in %q", n, rest)
			}
			got = append(got, ev...)
			_, _ = EventData(ev)
			rest = rest[n:]
		}
		if !bytes.Equal(append(got, rest...), stream) {
			t.Fatalf("events do not reassemble the stream")
		}
	})
}
