package vllmsim

import (
	"context"
	"sync"
)

// batch hands out a bounded number of slots in arrival order, like vLLM's
// scheduler with max_num_seqs: requests beyond the limit wait in a FIFO queue.
type batch struct {
	max int // 0 = unlimited

	mu      sync.Mutex
	running int       // slots held; guarded by mu
	queue   []*waiter // FIFO of requests waiting for a slot; guarded by mu
}

// waiter is one queued request. ready is closed when a releasing request
// hands its slot over; granted records that hand-over under batch.mu, so a
// waiter whose context ends at the same moment knows it owns a slot.
type waiter struct {
	ready   chan struct{}
	granted bool
}

// acquire takes a slot, waiting in the queue when all are held. It returns
// ctx.Err() if ctx ends first; the request then holds no slot and has left
// the queue.
func (b *batch) acquire(ctx context.Context) error {
	b.mu.Lock()
	if b.max <= 0 || (b.running < b.max && len(b.queue) == 0) {
		b.running++
		b.mu.Unlock()
		return nil
	}
	w := &waiter{ready: make(chan struct{})}
	b.queue = append(b.queue, w)
	b.mu.Unlock()

	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
	}
	b.mu.Lock()
	if w.granted {
		// The slot arrived together with the cancel: pass it on.
		b.mu.Unlock()
		b.release()
		return ctx.Err()
	}
	for i, q := range b.queue {
		if q == w {
			b.queue = append(b.queue[:i], b.queue[i+1:]...)
			break
		}
	}
	b.mu.Unlock()
	return ctx.Err()
}

// release gives a slot back, handing it straight to the oldest waiter if any.
func (b *batch) release() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queue) == 0 {
		b.running--
		return
	}
	w := b.queue[0]
	b.queue[0] = nil
	b.queue = b.queue[1:]
	w.granted = true
	close(w.ready)
}

// counts reports the slots held and the requests waiting.
func (b *batch) counts() (running, waiting int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.running, len(b.queue)
}
