package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime/debug"
	"strings"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

// run starts go test and returns its exit status (2 when it cannot start).
func run(args []string) int {
	if len(args) == 0 {
		args = []string{"-race", "./..."}
	}
	goArgs := append([]string{"test", "-json"}, args...)
	cmd := exec.Command("go", goArgs...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintf(os.Stderr, "testsummary: %v\n", err)
		return 2
	}
	// An interrupt reaches go test too (same process group); this process
	// waits for it to end and still prints what ran.
	signal.Ignore(os.Interrupt)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "testsummary: %v\n", err)
		return 2
	}
	s := newSummary(os.Stdout, modulePath())
	readErr := s.read(stdout)
	waitErr := cmd.Wait()
	if readErr != nil {
		fmt.Fprintf(os.Stderr, "testsummary: reading go test's output: %v\n", readErr)
	}
	s.report("go test " + strings.Join(args, " "))

	var exit *exec.ExitError
	switch {
	case errors.As(waitErr, &exit):
		return exit.ExitCode()
	case waitErr != nil:
		fmt.Fprintf(os.Stderr, "testsummary: %v\n", waitErr)
		return 2
	case readErr != nil || s.failed > 0:
		return 1
	}
	return 0
}

// modulePath is the module this program was built in (go run builds it
// there), trimmed from package paths in the summary.
func modulePath() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Path != "" {
		return bi.Main.Path
	}
	return ""
}
