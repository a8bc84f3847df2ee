package router

import "github.com/switchyard/switchyard/router/internal/upstream"

// SetAnswerLimit bounds the non-stream answers held whole to n bytes, for
// a test, until the func it returns restores the bound.
func SetAnswerLimit(n int64) (restore func()) {
	old := answers
	answers = upstream.NewAnswers(n, n, n)
	return func() { answers = old }
}
