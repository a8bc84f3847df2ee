package upstream

import (
	"context"
	"testing"
	"time"
)

// TestClockContinuesStreamDuration: a continuation's clock counts
// max_stream_duration from the cut stream's start, so one begun an hour
// ago is ended at once, and one begun now is not.
func TestClockContinuesStreamDuration(t *testing.T) {
	tt := NewTimeouts(time.Minute, 0, 0, time.Minute)
	var c Clock
	ctx := c.Start(context.Background(), tt)
	defer c.Stop()
	if !c.Take() {
		t.Fatal("the header timeout fired")
	}
	c.StreamingSince(time.Now().Add(-time.Hour))
	<-ctx.Done()
	if cause := context.Cause(ctx); cause != tt.TotalErr {
		t.Errorf("cause %v, want max_stream_duration", cause)
	}

	var fresh Clock
	ctx = fresh.Start(context.Background(), tt)
	defer fresh.Stop()
	fresh.Take()
	fresh.StreamingSince(time.Now())
	if ctx.Err() != nil {
		t.Errorf("a stream begun now was ended: %v", context.Cause(ctx))
	}
}
