//go:build linux

package main

import (
	"runtime"
	"syscall"
	"time"
)

const (
	prSetTimerSlack = 29 // prctl(2) PR_SET_TIMERSLACK
	prGetTimerSlack = 30 // prctl(2) PR_GET_TIMERSLACK
)

// preciseTimer makes sleepUntil precise on the calling goroutine, which it
// locks to its OS thread with a timer slack of 1 ns, until the returned
// function is called. Go's own timers wake up to about a millisecond late
// on an idle process (the netpoller waits in whole milliseconds), more than
// the differences this tool measures; nanosleep on a thread with no slack
// wakes within tens of microseconds.
func preciseTimer() (restore func()) {
	runtime.LockOSThread()
	old, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prGetTimerSlack, 0, 0)
	if errno != 0 {
		return runtime.UnlockOSThread
	}
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetTimerSlack, 1, 0); errno != 0 {
		return runtime.UnlockOSThread
	}
	return func() {
		_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetTimerSlack, old, 0)
		runtime.UnlockOSThread()
	}
}

// sleepUntil sleeps until t with nanosleep(2), resuming after signals (the
// Go runtime preempts with SIGURG).
func sleepUntil(t time.Time) {
	d := time.Until(t)
	if d <= 0 {
		return
	}
	ts := syscall.NsecToTimespec(int64(d))
	for syscall.Nanosleep(&ts, &ts) == syscall.EINTR {
	}
}
