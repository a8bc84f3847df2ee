//go:build !linux

package main

import "time"

// preciseTimer does nothing here: only Linux gets the precise sleeper.
func preciseTimer() (restore func()) { return func() {} }

// sleepUntil sleeps until t with Go's timer.
func sleepUntil(t time.Time) { time.Sleep(time.Until(t)) }
