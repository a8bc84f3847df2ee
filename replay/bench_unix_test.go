//go:build unix

package replay_test

import (
	"context"
	"syscall"
	"testing"

	"github.com/switchyard/switchyard/replay"
)

// BenchmarkReplay100Turns is the CPU a 100-turn session's replay costs
// (issue 41's bound: under a second), the simulated cluster's start
// included; cpu-s/op is the process's user and system time.
func BenchmarkReplay100Turns(b *testing.B) {
	file := session(b, 100)
	var before, after syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	for b.Loop() {
		if _, errs := replay.Run(context.Background(), load, []string{file}); len(errs) != 0 {
			b.Fatal(errs)
		}
	}
	syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	cpu := func(r syscall.Rusage) float64 {
		return float64(r.Utime.Sec+r.Stime.Sec) + float64(r.Utime.Usec+r.Stime.Usec)/1e6
	}
	b.ReportMetric((cpu(after)-cpu(before))/float64(b.N), "cpu-s/op")
}
