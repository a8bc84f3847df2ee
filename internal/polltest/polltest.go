// Package polltest waits in tests for what another goroutine or process
// makes true (a slot released, a reload applied, a series exported). It is
// the one polling helper of the repository's tests; a test that can tick
// an injected clock instead should.
package polltest

import (
	"testing"
	"time"
)

// maxInterval caps the wait between two polls: a condition that holds
// late is seen within it, and a slow one (an HTTP query) is not asked
// more than about ten times a second.
const maxInterval = 100 * time.Millisecond

// Eventually polls cond until it holds, first at once and then at
// intervals doubling from 1 ms up to maxInterval, and fails t when it
// still does not after within: within is the slack a loaded machine may
// take, not a speed the test asks for. what names the awaited thing in the
// failure, and state, when given, is called once to describe what was seen
// instead.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool, state ...func() string) {
	t.Helper()
	deadline := time.Now().Add(within)
	wait := time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			s := ""
			if len(state) > 0 {
				s = ": " + state[0]()
			}
			t.Fatalf("timed out after %s waiting for %s%s", within, what, s)
		}
		time.Sleep(wait)
		wait = min(2*wait, maxInterval)
	}
}
