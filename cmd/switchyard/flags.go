package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// newFlagsHook, when set, sees every FlagSet newFlags makes; tests use it to
// list a command's flags from the FlagSet itself.
var newFlagsHook func(name string, fs *flag.FlagSet)

// newFlags returns the FlagSet of command name. operands describes the
// arguments after the flags ("FILE...", "" for none). The help it prints
// (for -h, --help, 'switchyard help NAME' and usage errors) lists every flag
// registered on the set, in the usage line and under Flags:, so it cannot
// fall behind the flags themselves. A flag's value name is the word in
// backquotes in its usage string, else its type, upper-cased.
func newFlags(name, operands string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("switchyard "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { printHelp(fs.Output(), name, operands, fs) }
	if newFlagsHook != nil {
		newFlagsHook(name, fs)
	}
	return fs
}

// helpWidth is where the usage line wraps.
const helpWidth = 80

// printHelp writes a command's usage line, its summary and, when it has
// flags, a Flags: section.
func printHelp(w io.Writer, name, operands string, fs *flag.FlagSet) {
	prefix := "Usage: switchyard " + name
	var words []string
	fs.VisitAll(func(f *flag.Flag) {
		words = append(words, "["+flagSynopsis(f)+"]")
	})
	nflags := len(words)
	if operands != "" {
		words = append(words, operands)
	}
	var sb strings.Builder
	sb.WriteString(prefix)
	col := len(prefix)
	for _, word := range words {
		if col+1+len(word) > helpWidth && col > len(prefix) {
			sb.WriteString("\n" + strings.Repeat(" ", len(prefix)))
			col = len(prefix)
		}
		sb.WriteString(" " + word)
		col += 1 + len(word)
	}
	fmt.Fprintln(w, sb.String())
	for _, c := range commands() {
		if c.name == name {
			fmt.Fprintf(w, "\n%s%s.\n", strings.ToUpper(c.summary[:1]), c.summary[1:])
		}
	}
	if nflags == 0 {
		return // no empty Flags: section
	}
	fmt.Fprintln(w, "\nFlags:")
	fs.VisitAll(func(f *flag.Flag) {
		_, usage := flag.UnquoteUsage(f)
		fmt.Fprintf(w, "  %s\n", flagSynopsis(f))
		text := strings.ReplaceAll(usage, "\n", "\n        ")
		if def := shownDefault(f); def != "" {
			text += " (default " + def + ")"
		}
		fmt.Fprintf(w, "        %s\n", text)
	})
}

// flagSynopsis is "--name VALUE", or "--name" for a boolean flag.
func flagSynopsis(f *flag.Flag) string {
	value, _ := flag.UnquoteUsage(f)
	if value == "" {
		return "--" + f.Name
	}
	return "--" + f.Name + " " + strings.ToUpper(value)
}

// shownDefault is the flag's default as the help shows it: "" for a zero
// value, quoted for a string.
func shownDefault(f *flag.Flag) string {
	switch f.DefValue {
	case "", "0", "false", "0s":
		return ""
	}
	if g, ok := f.Value.(flag.Getter); ok {
		if _, isString := g.Get().(string); isString {
			return fmt.Sprintf("%q", f.DefValue)
		}
	}
	return f.DefValue
}

// parse parses args; ok=false carries the exit code (0 for --help).
func parse(fs *flag.FlagSet, args []string) (int, bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK, false
		}
		return exitUsage, false
	}
	return 0, true
}

// signalContext is cancelled by SIGINT or SIGTERM.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}
