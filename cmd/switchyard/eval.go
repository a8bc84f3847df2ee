package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/switchyard/switchyard/eval"
	"github.com/switchyard/switchyard/router"
)

// runEval replays a labelled set through the configured classifier and
// policy and reports how they did (package eval).
func runEval(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("eval", "", stderr)
	configPath := fs.String("config", "", "config `file` (default $SWITCHYARD_CONFIG, then ./switchyard.yaml)")
	dataPath := fs.String("data", "", "labelled set: a JSON Lines `file`, one {\"label\": …, \"request\": {…}} a line (required)")
	asJSON := fs.Bool("json", false, "print one JSON document instead of tables")
	concurrency := fs.Int("concurrency", eval.DefaultConcurrency, "`number` of cases classified at once")
	hard := fs.String("hard", "", "the class `label` whose requests belong on the large pool, for the sweep and the projection\n(default: the classifier's last label)")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 || *dataPath == "" || *concurrency < 1 {
		switch {
		case *dataPath == "":
			fmt.Fprintln(stderr, "switchyard eval: --data is required")
		case *concurrency < 1:
			fmt.Fprintf(stderr, "switchyard eval: --concurrency %d: must be at least 1\n", *concurrency)
		}
		fs.Usage()
		return exitUsage
	}
	path, from := resolveConfig(*configPath)
	cfg, err := router.LoadConfig(path)
	if err != nil {
		printConfigErr(stderr, "eval", path, from, err)
		return exitInvalid
	}
	if cfg.Classifier == nil {
		fmt.Fprintf(stderr, "switchyard eval: %s has no classifier: nothing to evaluate\n", path)
		return exitInvalid
	}
	data, err := os.ReadFile(*dataPath)
	if err != nil {
		fmt.Fprintln(stderr, "switchyard eval:", err)
		return exitInvalid
	}
	g, err := router.New(cfg, router.Options{Logger: slog.New(slog.DiscardHandler), Version: version, Passive: true})
	if err != nil {
		fmt.Fprintln(stderr, "switchyard eval:", err)
		return exitRuntime
	}
	defer g.Close()
	cases, err := eval.Read(g, cfg.Classifier.Labels, *dataPath, data)
	if err != nil {
		var errs eval.Errors
		if errors.As(err, &errs) {
			for _, e := range errs {
				fmt.Fprintln(stderr, e.Error())
			}
		} else {
			fmt.Fprintf(stderr, "%s: %v\n", *dataPath, err)
		}
		return exitInvalid
	}
	r, err := eval.Run(ctx, g, cases, eval.Options{Concurrency: *concurrency, HardLabel: *hard, Progress: prefixed{stderr}})
	if err != nil {
		fmt.Fprintln(stderr, "switchyard eval:", err)
		if ctx.Err() != nil {
			return exitRuntime
		}
		return exitInvalid
	}
	r.Config, r.Data = path, *dataPath
	for _, f := range r.ClassifierFailures.Cases {
		fmt.Fprintf(stderr, "%s:%d: the classifier could not answer (%s: %s); counted as %q\n", *dataPath, f.Line, f.Result, f.Error, r.ClassifierFailures.Label)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		_ = enc.Encode(r)
	} else {
		_ = eval.WriteText(stdout, r, cfg.Pools.Names(), g.Snapshot().Policy.Routes())
	}
	if r.ClassifierFailures.Count == r.Cases {
		fmt.Fprintln(stderr, "switchyard eval: the classifier answered no case; is its pool reachable?")
		return exitRuntime
	}
	return exitOK
}

// prefixed writes progress lines as "switchyard eval: …".
type prefixed struct{ w io.Writer }

func (p prefixed) Write(b []byte) (int, error) {
	if _, err := fmt.Fprintf(p.w, "switchyard eval: %s", b); err != nil {
		return 0, err
	}
	return len(b), nil
}
