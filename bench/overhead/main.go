// Command overhead measures what Switchyard adds to a request compared with
// a direct connection to the same upstream, in one run.
//
//	go run ./bench/overhead [flags]
//
// Three processes share the machine: this load tool, the gateway alone in
// a child process (this executable re-run with a hidden --serve-gateway
// argument, so that its CPU time and RSS can be read from /proc), and the
// vLLM simulators in another child (--serve-sim): a zero-delay one serving
// every measurement, a zero-delay classifier pool, and a slow one (1 token/s)
// for open streams. Everything listens on 127.0.0.1.
//
// Every measurement drives the simulator directly and through the gateway
// in alternating short slices, so that drift in a shared machine affects
// both sides alike:
//
//   - open loop at fixed rates (--rates): requests are due at exact
//     intervals and latency runs from the due time (no coordinated
//     omission); non-stream and stream (TTFT to the first content delta);
//   - closed loop (--workers): saturation throughput of each side;
//   - open streams (--open-streams): the gateway's RSS with that many
//     streams held open, over its idle RSS.
//
// The gateway configurations are pinned (model = pool name, no classifier),
// classifier-hit (kind model classifier, a few repeated prompts, so its
// cache answers) and classifier-miss (a unique prompt per request, so every
// request waits for the classifier; the classifier request is also sent
// straight to its simulator as a third arm to show what the call costs).
// On request, bare-proxy runs a minimal Go reverse proxy instead of the
// gateway: the floor any net/http proxy pays on the machine.
//
// The run stops by itself: every measurement is bounded in count and time
// and the children exit when the tool's pipe to them closes.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	if code, ok := childMain(os.Args[1:]); ok {
		os.Exit(code)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// parseFlags reads the command line into Options; jsonOut selects JSON
// lines on stdout.
func parseFlags(args []string, stderr io.Writer) (o Options, jsonOut bool, err error) {
	o = defaultOptions()
	fs := flag.NewFlagSet("overhead", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.DurationVar(&o.Duration, "duration", o.Duration, "time each side (direct, gateway) is driven per measurement")
	fs.DurationVar(&o.Warmup, "warmup", o.Warmup, "discarded warm-up per side before each measurement")
	fs.DurationVar(&o.Slice, "slice", o.Slice, "length of one side's turn in the interleaving")
	rates := fs.String("rates", joinInts(o.Rates), "open-loop rates in requests/s, comma-separated")
	fs.IntVar(&o.Workers, "workers", o.Workers, "closed-loop workers for saturation (0 = skip)")
	configs := fs.String("configs", strings.Join(o.Configs, ","), "gateway configurations: "+strings.Join(knownConfigs, ", ")+" (bare-proxy: a minimal Go reverse proxy, not Switchyard)")
	modes := fs.String("modes", strings.Join(o.Modes, ","), "nonstream, stream or both")
	fs.IntVar(&o.OpenStreams, "open-streams", o.OpenStreams, "streams held open for the memory measurement (0 = skip)")
	fs.IntVar(&o.MaxTokens, "max-tokens", o.MaxTokens, "completion length of the zero-delay simulator")
	fs.StringVar(&o.CPUProfile, "cpuprofile", "", "write each gateway's CPU profile to PREFIX-CONFIG.pprof")
	fs.BoolVar(&o.AccessLog, "access-log", false, "make the gateway format its JSON access log (to /dev/null)")
	fs.BoolVar(&jsonOut, "json", false, "print one JSON object per line on stdout (run info, each measurement, each target); the table goes to stderr")
	quick := fs.Bool("quick", false, "smoke run: 300ms per side, 100 req/s, 8 workers, 50 open streams (flags given explicitly win)")
	if err := fs.Parse(args); err != nil {
		return o, false, err
	}
	if fs.NArg() > 0 {
		return o, false, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if o.Rates, err = parseInts(*rates); err != nil {
		return o, false, fmt.Errorf("-rates: %w", err)
	}
	o.Configs = splitList(*configs)
	o.Modes = splitList(*modes)
	if *quick {
		// --quick sets what was not given explicitly.
		given := o
		o.quick()
		fs.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "duration":
				o.Duration = given.Duration
			case "warmup":
				o.Warmup = given.Warmup
			case "slice":
				o.Slice = given.Slice
			case "rates":
				o.Rates = given.Rates
			case "workers":
				o.Workers = given.Workers
			case "open-streams":
				o.OpenStreams = given.OpenStreams
			}
		})
	}
	return o, jsonOut, o.validate()
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, jsonOut, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "overhead:", err)
		return 2
	}
	o.Progress = stderr
	info := machineInfo(args)
	if jsonOut {
		if err := writeJSON(stdout, info); err != nil {
			fmt.Fprintln(stderr, "overhead:", err)
			return 1
		}
	}
	var results []Result
	err = Run(ctx, o, stderr, func(r Result) error {
		results = append(results, r)
		if jsonOut {
			return writeJSON(stdout, r)
		}
		return nil
	})
	if err != nil {
		fmt.Fprintln(stderr, "overhead:", err)
		return 1
	}
	ts := targets(results)
	table := stdout
	if jsonOut {
		for _, t := range ts {
			if err := writeJSON(stdout, t); err != nil {
				fmt.Fprintln(stderr, "overhead:", err)
				return 1
			}
		}
		table = stderr
	}
	writeTable(table, info, results, ts)
	return 0
}

func machineInfo(args []string) runInfo {
	info := runInfo{Record: "run", Date: time.Now().UTC().Format(time.RFC3339), NProc: runtime.NumCPU(), Go: runtime.Version(),
		Args:   append([]string{}, args...),
		Layout: "load tool, gateway child and simulator child share the machine's CPUs"}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				info.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if out, err := exec.Command("git", "describe", "--always", "--dirty").Output(); err == nil {
		info.Commit = strings.TrimSpace(string(out))
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			info.LoadAvg = strings.Join(f[:3], " ")
		}
	}
	return info
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, p := range splitList(s) {
		n, err := strconv.Atoi(p)
		if err != nil {
			return nil, fmt.Errorf("%q is not a whole number", p)
		}
		out = append(out, n)
	}
	return out, nil
}

func joinInts(v []int) string {
	parts := make([]string, len(v))
	for i, n := range v {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, ",")
}
