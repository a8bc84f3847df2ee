package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/switchyard/switchyard/vllmsim"
)

func runSim(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("sim", "", stderr)
	listen := fs.String("listen", "127.0.0.1:8000", "`address` to serve on")
	fs.String("preset", "", "start from a published `profile`: qwen (Qwen3.8 Flash Next on 2 DGX Spark nodes) or minicpm (MiniCPM5-2B on 1 node); other flags override it")
	// The preset supplies the defaults of the profile flags, so it is read
	// before they are registered; flags given explicitly still win.
	var p vllmsim.Profile
	switch preset := presetArg(args); preset {
	case "":
	case "qwen":
		p = vllmsim.QwenFlashNext2Node()
	case "minicpm":
		p = vllmsim.MiniCPM5_2B()
	default:
		fmt.Fprintf(stderr, "switchyard sim: unknown --preset %q (known: qwen, minicpm)\n", preset)
		return exitUsage
	}
	// Answers end by themselves as vLLM's do unless --natural-lengths=false.
	p.NaturalLengths = true
	var f vllmsim.Faults
	p.RegisterFlags(fs)
	f.RegisterFlags(fs)
	scenario := fs.String("scenario", "", "script the answers turn by turn from this YAML or JSON `file` (tool calls and texts; see docs/reference.md)")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if err := p.Validate(); err != nil {
		fmt.Fprintln(stderr, "switchyard sim:", err)
		return exitUsage
	}
	if err := f.Validate(); err != nil {
		fmt.Fprintln(stderr, "switchyard sim:", err)
		return exitUsage
	}
	var opts []vllmsim.Option
	if *scenario != "" {
		sc, err := vllmsim.LoadScenario(*scenario)
		if err != nil {
			fmt.Fprintln(stderr, "switchyard sim:", err)
			return exitUsage
		}
		opts = append(opts, vllmsim.WithScenario(sc))
	}
	sim := vllmsim.New(p, opts...)
	sim.SetFaults(f)
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(stderr, "switchyard sim:", err)
		return exitRuntime
	}
	log := slog.New(slog.NewJSONHandler(stderr, nil))
	log.Info("vLLM simulator serving", "listen", ln.Addr().String(), "model", p.Model, "decode_tps", p.DecodeTPS,
		"prefill_tps", p.PrefillTPS, "max_batch", p.MaxBatch, "speedup", p.SpeedUp, "scenario", *scenario)
	srv := &http.Server{Handler: sim, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintln(stderr, "switchyard sim:", err)
			return exitRuntime
		}
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}
	return exitOK
}

// presetArg finds the value of --preset (or -preset) in args.
func presetArg(args []string) string {
	for i, a := range args {
		if a == "--" {
			break
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if name != "preset" || !strings.HasPrefix(a, "-") {
			continue
		}
		if hasValue {
			return value
		}
		if i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}
