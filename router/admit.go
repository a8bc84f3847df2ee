package router

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"

	"github.com/switchyard/switchyard/router/internal/wire"
)

// readBody reads at most limit bytes; more is errTooLarge.
func readBody(r *http.Request, limit int64) ([]byte, error) {
	if r.ContentLength > limit {
		return nil, fmt.Errorf("%w: %d bytes is over the %d-byte limit", errTooLarge, r.ContentLength, limit)
	}
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, fmt.Errorf("%w: over the %d-byte limit", errTooLarge, limit)
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, fmt.Errorf("%w: the request body did not arrive within server.body_timeout", errBodyTimeout)
		}
		return nil, wire.BadRequest("", "could not read request body: "+err.Error())
	}
	return body, nil
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
