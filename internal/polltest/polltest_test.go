package polltest

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// TestEventually: a condition that comes true is waited for; one that
// never does fails the test after the deadline, saying what was awaited
// and what was seen.
func TestEventually(t *testing.T) {
	var n atomic.Int32
	go func() {
		time.Sleep(20 * time.Millisecond)
		n.Store(1)
	}()
	Eventually(t, 10*time.Second, "the flag", func() bool { return n.Load() == 1 })

	ft := &fakeT{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() { _ = recover() }() // fakeT.Fatalf stops the wait
		Eventually(ft, 30*time.Millisecond, "never", func() bool { return false }, func() string { return "seen" })
	}()
	<-done
	if want := "timed out after 30ms waiting for never: seen"; ft.msg != want {
		t.Errorf("failure %q, want %q", ft.msg, want)
	}
}

type fakeT struct {
	testing.TB
	msg string
}

func (f *fakeT) Helper() {}

func (f *fakeT) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	panic("fatal")
}
