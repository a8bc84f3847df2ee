//go:build !unix

package main

import "io"

// terminalWidth: unknown here.
func terminalWidth(io.Writer) int { return 0 }
