package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/switchyard/switchyard/vllmsim"
)

func runSim(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("sim", "--listen ADDR --model NAME [flags]", stderr)
	listen := fs.String("listen", "127.0.0.1:8000", "address to serve on")
	preset := fs.String("preset", "", "start from a published profile: qwen (Qwen3.8 Flash Next on 2 DGX Spark nodes) or minicpm (MiniCPM5-2B on 1 node); other flags override it")
	var p vllmsim.Profile
	var f vllmsim.Faults
	p.RegisterFlags(fs)
	f.RegisterFlags(fs)
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if *preset != "" {
		var base vllmsim.Profile
		switch *preset {
		case "qwen":
			base = vllmsim.QwenFlashNext2Node()
		case "minicpm":
			base = vllmsim.MiniCPM5_2B()
		default:
			fmt.Fprintf(stderr, "switchyard sim: unknown --preset %q (known: qwen, minicpm)\n", *preset)
			return exitUsage
		}
		// Flags given explicitly win over the preset.
		set := map[string]bool{}
		fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
		p = mergeProfile(base, p, set)
	}
	if err := p.Validate(); err != nil {
		fmt.Fprintln(stderr, "switchyard sim:", err)
		return exitUsage
	}
	if err := f.Validate(); err != nil {
		fmt.Fprintln(stderr, "switchyard sim:", err)
		return exitUsage
	}
	sim := vllmsim.New(p)
	sim.SetFaults(f)
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(stderr, "switchyard sim:", err)
		return exitRuntime
	}
	log := slog.New(slog.NewJSONHandler(stderr, nil))
	log.Info("vLLM simulator serving", "listen", ln.Addr().String(), "model", p.Model, "decode_tps", p.DecodeTPS,
		"prefill_tps", p.PrefillTPS, "max_batch", p.MaxBatch, "speedup", p.SpeedUp)
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

// mergeProfile applies the explicitly set flags of over onto base.
func mergeProfile(base, over vllmsim.Profile, set map[string]bool) vllmsim.Profile {
	if set["model"] {
		base.Model = over.Model
	}
	if set["prefill-tps"] {
		base.PrefillTPS = over.PrefillTPS
	}
	if set["decode-tps"] {
		base.DecodeTPS = over.DecodeTPS
	}
	if set["max-batch"] {
		base.MaxBatch = over.MaxBatch
	}
	if set["speedup"] {
		base.SpeedUp = over.SpeedUp
	}
	if set["max-tokens"] {
		base.DefaultMaxTokens = over.DefaultMaxTokens
	}
	if set["max-model-len"] {
		base.MaxModelLen = over.MaxModelLen
	}
	if set["kv-cache-tokens"] {
		base.KVCacheTokens = over.KVCacheTokens
	}
	if set["legacy-metrics"] {
		base.LegacyMetrics = over.LegacyMetrics
	}
	return base
}
