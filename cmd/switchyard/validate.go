package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/switchyard/switchyard/policy"
	"github.com/switchyard/switchyard/router"
)

// runValidate checks each file and prints `FILE: ok` or one
// `FILE:LINE:COL: message` line per problem. It never contacts a backend,
// and reads the *_env variables only with --check-env, so configs can be
// checked without their secrets.
func runValidate(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("validate", "FILE...", stderr)
	checkEnv := fs.Bool("check-env", false, "also require the *_env variables (API keys, admin token) to be set, as serve does")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return exitUsage
	}
	code := exitOK
	for _, file := range fs.Args() {
		reg := router.LoadOptions()
		reg.SkipEnv = !*checkEnv
		if _, err := policy.LoadFile(file, reg); err != nil {
			code = exitInvalid
			var errs policy.Errors
			if errors.As(err, &errs) {
				for _, e := range errs {
					fmt.Fprintln(stderr, e.Error())
				}
			} else {
				fmt.Fprintf(stderr, "%s: %v\n", file, err)
			}
			continue
		}
		fmt.Fprintf(stdout, "%s: ok\n", file)
	}
	return code
}
