// Command switchyard is an OpenAI-compatible multi-model routing gateway.
//
// See README.md for the commands.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
)

// Exit codes.
const (
	exitOK      = 0
	exitInvalid = 1
	exitUsage   = 2
	exitRuntime = 3
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

func commands() []command {
	return []command{
		{"serve", "run the gateway", runServe},
		{"validate", "check config files and print every problem as FILE:LINE:COL", runValidate},
		{"explain", "show which route, pool and replica a request would get, and why", runExplain},
		{"sim", "run a vLLM-compatible simulated backend", runSim},
		{"demo", "run a simulated 8-node cluster, the gateway and a mixed load", runDemo},
		{"version", "print version, commit and Go version", runVersion},
	}
}

func main() {
	ctx, stop := signalContext()
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(ctx, args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "switchyard: unknown command %q\n\n", args[0])
	usage(stderr)
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "Switchyard: an OpenAI-compatible multi-model routing gateway.")
	fmt.Fprintln(w, "\nUsage: switchyard <command> [flags]\n\nCommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'switchyard <command> --help' for a command's flags.")
}

// errUsage marks a flag parsing failure already reported by the FlagSet.
var errUsage = errors.New("usage")
