// Command switchyard is an OpenAI-compatible multi-model routing gateway.
//
// See README.md for the commands.
package main

import (
	"context"
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
		{"eval", "measure the classifier and the policy on a labelled set of requests", runEval},
		{"replay", "replay captured agent sessions through a policy; compare two policies", runReplay},
		{"sim", "run a vLLM-compatible simulated backend (needs --preset or --model)", runSim},
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
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help":
		usage(stderr)
		return exitOK
	case "-version", "--version":
		return runVersion(ctx, args[1:], stdout, stderr)
	case "help":
		return runHelp(ctx, args[1:], stdout, stderr)
	}
	if c, ok := lookup(args[0]); ok {
		return c.run(ctx, args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "switchyard: unknown command %q\n\n", args[0])
	usage(stderr)
	return exitUsage
}

func lookup(name string) (command, bool) {
	for _, c := range commands() {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// runHelp prints the top-level help, or with a command name that command's
// help, exactly as 'switchyard COMMAND --help' does.
func runHelp(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	switch {
	case len(args) == 0:
		usage(stderr)
		return exitOK
	case len(args) > 1:
		fmt.Fprintln(stderr, "Usage: switchyard help [COMMAND]")
		return exitUsage
	}
	c, ok := lookup(args[0])
	if !ok {
		fmt.Fprintf(stderr, "switchyard help: unknown command %q\n\n", args[0])
		usage(stderr)
		return exitUsage
	}
	return c.run(ctx, []string{"--help"}, stdout, stderr)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "Switchyard: an OpenAI-compatible multi-model routing gateway.")
	fmt.Fprintln(w, "\nUsage: switchyard <command> [flags] [arguments]\n\nCommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'switchyard help <command>' (or 'switchyard <command> --help') for its flags.")
	fmt.Fprintln(w, "'switchyard --version' prints the same as 'switchyard version'.")
}
