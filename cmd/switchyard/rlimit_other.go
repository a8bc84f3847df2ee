//go:build !unix

package main

import "log/slog"

// raiseFDLimit: no open-file limit to read here.
func raiseFDLimit(*slog.Logger) uint64 { return 0 }
