package router

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"

	"github.com/switchyard/switchyard/router/internal/conns"

	"github.com/switchyard/switchyard/router/internal/wire"
)

// readBody reads at most limit bytes; more is errTooLarge.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
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
	admitted(w, r)
	return body, nil
}

// admitted marks r's body read: its connection carries an admitted request
// (no longer evictable), and an answer no longer closes it (bounded set
// Connection: close until now, so that an answer given before the body
// was read never waits to drain it).
func admitted(w http.ResponseWriter, r *http.Request) {
	conns.Admitted(r)
	if w != nil && len(r.TransferEncoding) == 0 {
		w.Header().Del("Connection")
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
