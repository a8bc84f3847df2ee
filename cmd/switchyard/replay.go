package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/switchyard/switchyard/policy"
	"github.com/switchyard/switchyard/replay"
	"github.com/switchyard/switchyard/router"
)

// Exit code of a replay whose comparison moved past --max-change.
const exitChanged = 4

// runReplay sends captured sessions through a policy on simulated
// replicas, and with --against compares two policies (package replay).
func runReplay(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("replay", "CAPTURE...", stderr)
	configPath := fs.String("config", "", "the policy to replay through: config `file` (default $SWITCHYARD_CONFIG, then ./switchyard.yaml)")
	against := fs.String("against", "", "compare with this config `file`: list the turns whose route changes")
	maxChange := fs.Float64("max-change", -1, "with --against: exit 4 when a capture's share of turns on a route or a pool moves by more than this `share`\n(0: when any turn changes route)")
	asJSON := fs.Bool("json", false, "print one JSON document instead of tables")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	switch {
	case fs.NArg() == 0:
		fmt.Fprintln(stderr, "switchyard replay: name at least one capture file")
		fs.Usage()
		return exitUsage
	case *maxChange >= 0 && *against == "":
		fmt.Fprintln(stderr, "switchyard replay: --max-change needs --against")
		return exitUsage
	case *maxChange > 1:
		fmt.Fprintf(stderr, "switchyard replay: --max-change %g: a share is at most 1\n", *maxChange)
		return exitUsage
	}
	loader := func(path, from string) (func() (*policy.Config, error), int) {
		if _, err := router.LoadConfig(path); err != nil {
			printConfigErr(stderr, "replay", path, from, err)
			return nil, exitInvalid
		}
		return func() (*policy.Config, error) { return router.LoadConfig(path) }, exitOK
	}
	newPath, from := resolveConfig(*configPath)
	loadNew, code := loader(newPath, from)
	if loadNew == nil {
		return code
	}
	results, errs := replay.Run(ctx, loadNew, fs.Args())
	for _, err := range errs {
		fmt.Fprintln(stderr, "switchyard replay:", err)
	}
	if len(results) == 0 {
		fmt.Fprintln(stderr, "switchyard replay: nothing was replayed")
		return exitInvalid
	}
	var old []replay.Result
	var changes []replay.Change
	var shifts []replay.Shift
	if *against != "" {
		loadOld, code := loader(*against, "--against")
		if loadOld == nil {
			return code
		}
		old, _ = replay.Run(ctx, loadOld, fs.Args()) // its bad lines were printed once
		changes, shifts = replay.Compare(old, results)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(map[string]any{"config": newPath, "results": results, "against": old, "changes": changes, "shifts": shifts})
	} else {
		fmt.Fprintf(stdout, "Replayed through %s (simulated replicas; classifier: the simulator's, vllmsim.DefaultChooser)\n", newPath)
		replay.WriteTable(stdout, results)
		if *against != "" {
			fmt.Fprintf(stdout, "\nAgainst %s\n", *against)
			replay.WriteTable(stdout, old)
			replay.WriteComparison(stdout, changes, shifts)
		}
	}
	failed := false
	for i, rs := range [][]replay.Result{results, old} {
		for _, r := range rs {
			for _, f := range r.Failed {
				if i == 1 {
					f += " (through " + *against + ")"
				}
				fmt.Fprintf(stderr, "switchyard replay: %s: %s\n", r.Capture, f)
				failed = true
			}
		}
	}
	if *against != "" && *maxChange >= 0 && replay.Exceeds(changes, shifts, *maxChange) {
		fmt.Fprintf(stderr, "switchyard replay: the policies differ by more than --max-change %g\n", *maxChange)
		return exitChanged
	}
	if len(errs) > 0 || failed {
		return exitInvalid
	}
	return exitOK
}
