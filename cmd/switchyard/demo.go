package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/switchyard/switchyard/demo"
)

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("demo", "", stderr)
	duration := fs.Duration("duration", 0, "stop after this long and print the summary (default: run until interrupted)")
	listen := fs.String("listen", "127.0.0.1:8080", "gateway client API `address`")
	adminListen := fs.String("admin-listen", "127.0.0.1:9090", "gateway admin `address` (/metrics, /admin/*)")
	noLoad := fs.Bool("no-load", false, "start the cluster and gateway only, without the built-in load")
	speedUp := fs.Float64("speedup", 10, "divide simulated model time by this `factor`")
	workers := fs.Int("workers", 16, "`number` of concurrent sessions of the built-in load")
	kill := fs.String("kill", "", "`replica@delay`: crash that replica this long into the run, e.g. qwen-b@10s; its streams resume on another replica")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return exitUsage
	}
	o := demo.Options{Listen: *listen, AdminListen: *adminListen, Duration: *duration,
		NoLoad: *noLoad, SpeedUp: *speedUp, Workers: *workers, Out: stdout, Terminal: isTerminal(stdout), Width: terminalWidth(stdout)}
	if *kill != "" {
		name, after, ok := strings.Cut(*kill, "@")
		d, err := time.ParseDuration(after)
		if !ok || name == "" || err != nil || d < 0 {
			fmt.Fprintf(stderr, "switchyard demo: --kill %q: want REPLICA@DURATION, e.g. qwen-b@10s\n", *kill)
			return exitUsage
		}
		o.Kill, o.KillAfter = name, d
	}
	s, err := demo.Run(ctx, o)
	if err != nil {
		fmt.Fprintln(stderr, "switchyard demo:", err)
		return exitRuntime
	}
	if s.Errors > 0 {
		return exitRuntime
	}
	return exitOK
}

// isTerminal reports whether w is a terminal that understands cursor
// movement (not a pipe or a file, not TERM=dumb).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || os.Getenv("TERM") == "dumb" {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
