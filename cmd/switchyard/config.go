package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/switchyard/switchyard/policy"
)

// defaultConfig is the file serve, explain and eval read when neither
// --config nor $SWITCHYARD_CONFIG names one.
const defaultConfig = "switchyard.yaml"

// quickstartConfig is the first config the README's quick start names: a
// gateway on two `switchyard sim` replicas on loopback.
const quickstartConfig = "examples/quickstart.yaml"

// resolveConfig is the config file a command reads: the --config flag, else
// $SWITCHYARD_CONFIG, else ./switchyard.yaml. from says which, for errors.
func resolveConfig(flagValue string) (path, from string) {
	if flagValue != "" {
		return flagValue, "--config"
	}
	if env := os.Getenv("SWITCHYARD_CONFIG"); env != "" {
		return env, "$SWITCHYARD_CONFIG"
	}
	return defaultConfig, ""
}

// printConfigErr writes a config error: every problem as FILE:LINE:COL, or
// for a file that is not there, which file was looked for, why that one,
// and which example to copy.
func printConfigErr(w io.Writer, cmd, path, from string, err error) {
	var errs policy.Errors
	if errors.As(err, &errs) {
		for _, e := range errs {
			fmt.Fprintln(w, e.Error())
		}
		return
	}
	if errors.Is(err, fs.ErrNotExist) {
		where := path
		if abs, aerr := filepath.Abs(path); aerr == nil {
			where = abs
		}
		why := "the default, as neither --config nor $SWITCHYARD_CONFIG names a file"
		if from != "" {
			why = "named by " + from
		}
		fmt.Fprintf(w, "switchyard %s: no config file at %s (%s)\n", cmd, where, why)
		fmt.Fprintf(w, "to try the gateway on two simulated replicas, copy the quick start's (README.md, \"Quick start\"):\n")
		fmt.Fprintf(w, "  cp %s %s\n", quickstartConfig, defaultConfig)
		fmt.Fprintf(w, "for a cluster of your own, start from one of examples/policies/ (see docs/config.md)\n")
		return
	}
	fmt.Fprintf(w, "%s: %v\n", path, err)
}
