package upstream

import (
	"context"
	"errors"
	"fmt"
	"io"

	"golang.org/x/sync/semaphore"
)

// ErrAnswerTooLarge: a non-stream answer exceeded its bound.
var ErrAnswerTooLarge = errors.New("answer too large")

// Answers bounds the memory that non-stream answers held whole take,
// across requests: an answer under Small is read freely; a larger one
// first reserves what it may take (its Content-Length, or the bound when
// the replica sends none) from a budget shared by every request, waiting
// for earlier large answers to be passed on when the budget is spent.
type Answers struct {
	// Limit bounds one answer (bytes); Small is what an answer may hold
	// without a reservation.
	Limit, Small int64
	budget       *semaphore.Weighted
}

// NewAnswers is a budget of total bytes for answers of at most limit
// (total is raised to limit if below it).
func NewAnswers(limit, small, total int64) *Answers {
	return &Answers{Limit: limit, Small: min(small, limit), budget: semaphore.NewWeighted(max(total, limit))}
}

// Read reads a whole answer of declared length (-1: unknown) from body.
// It never holds more than Limit bytes: a declared answer is read into
// one buffer of its size, an undeclared one into a buffer that doubles up
// to an eighth of the bound (reserving the bound once past Small) and
// then into one of the bound; an answer declared over the bound is
// refused before a byte is read. release gives back the answer's
// reservation: call it once the answer has been passed on (it is never
// nil). A read that waits for the budget returns ctx.Err() when ctx ends
// first.
func (a *Answers) Read(ctx context.Context, body io.Reader, length int64) (answer []byte, release func(), err error) {
	release = func() {}
	if length > a.Limit {
		return nil, release, a.tooLarge()
	}
	var reserved int64
	reserve := func(n int64) error {
		if err := a.budget.Acquire(ctx, n); err != nil {
			return err
		}
		reserved = n
		release = func() { a.budget.Release(reserved) }
		return nil
	}
	size := a.Small
	if length >= 0 {
		if length > a.Small {
			if err := reserve(length); err != nil {
				return nil, release, err
			}
		}
		size = length + 1 // + 1: to see the end without growing
	}
	buf := make([]byte, 0, max(512, min(size, a.Limit+1)))
	for {
		if len(buf) == cap(buf) {
			if int64(len(buf)) > a.Limit {
				release()
				return nil, func() {}, a.tooLarge()
			}
			if reserved == 0 && int64(len(buf)) >= a.Small {
				// Past the small size with no length: the bound is
				// reserved from the budget.
				if err := reserve(a.Limit); err != nil {
					return nil, release, err
				}
			}
			next := 2 * int64(cap(buf))
			if next > a.Limit/8 {
				// Doubling on to the bound would leave as much again as
				// garbage: past an eighth of it, the buffer takes what
				// was reserved at once (a medium answer, under an eighth,
				// does not pay for allocating the whole bound).
				next = a.Limit + 1
			}
			grown := make([]byte, len(buf), next)
			copy(grown, buf)
			buf = grown
		}
		n, err := body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			if int64(len(buf)) > a.Limit {
				release()
				return nil, func() {}, a.tooLarge()
			}
			return buf, release, nil
		}
		if err != nil {
			return buf, release, err
		}
	}
}

func (a *Answers) tooLarge() error {
	return fmt.Errorf("%w: non-stream answer larger than %d bytes", ErrAnswerTooLarge, a.Limit)
}
