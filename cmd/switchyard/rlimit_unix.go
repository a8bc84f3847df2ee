//go:build unix

package main

import (
	"log/slog"
	"syscall"
)

// raiseFDLimit raises the soft limit on open files to the hard limit and
// returns the soft limit in force, logging both: every client connection
// and every replica connection is a descriptor, and the connection caps
// are derived from this limit. (Go's runtime already raises it at start on
// Linux; this makes it so on every Unix and says what it is.)
func raiseFDLimit(log *slog.Logger) uint64 {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		log.Warn("cannot read the open-file limit", "error", err.Error())
		return 0
	}
	if l.Cur < l.Max {
		raised := l
		raised.Cur = l.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised); err != nil {
			log.Warn("cannot raise the open-file soft limit to the hard limit", "soft", l.Cur, "hard", l.Max, "error", err.Error())
		} else {
			l = raised
		}
	}
	log.Info("open-file limit", "soft", l.Cur, "hard", l.Max)
	return uint64(l.Cur)
}
