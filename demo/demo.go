package demo

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/switchyard/switchyard/examples"
	"github.com/switchyard/switchyard/policy"
	"github.com/switchyard/switchyard/router"
)

// DefaultPolicy is the embedded config the demo runs.
const DefaultPolicy = "policies/dgx-spark-8node.yaml"

// Options configures a demo run.
type Options struct {
	Listen      string // default 127.0.0.1:8080
	AdminListen string // default 127.0.0.1:9090
	// Duration ends the run; 0 runs until ctx ends.
	Duration time.Duration
	// Requests, when positive, ends the run once that many requests have
	// ended (with Duration, whichever comes first): a run of a known size
	// however fast the machine is.
	Requests int
	// NoLoad starts the cluster and gateway only.
	NoLoad bool
	// SpeedUp divides simulated model time (default 10).
	SpeedUp float64
	// Workers is the load's concurrency (default 16).
	Workers int
	// Tick is the live table interval (default 1s; negative disables).
	Tick time.Duration
	// Kill names a replica to crash KillAfter into the run, to show the
	// streams it was serving resume on another replica.
	Kill      string
	KillAfter time.Duration
	Out       io.Writer
	// Terminal: Out is a terminal, so the live table is redrawn in place;
	// otherwise a line is written every few seconds.
	Terminal bool
	// Width is the terminal's width in columns (0: 120).
	Width  int
	Logger *slog.Logger
}

// Run starts the simulated 8-node cluster from the embedded reference
// policy, the gateway and (unless NoLoad) the built-in load, prints a live
// table each Tick and a summary at the end.
func Run(ctx context.Context, o Options) (Summary, error) {
	if o.Listen == "" {
		o.Listen = "127.0.0.1:8080"
	}
	if o.AdminListen == "" {
		o.AdminListen = "127.0.0.1:9090"
	}
	if o.SpeedUp <= 0 {
		o.SpeedUp = 10
	}
	if o.Tick == 0 {
		o.Tick = time.Second
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewJSONHandler(io.Discard, nil))
	}
	// Said at once, before anything that takes time, so a start never looks
	// like a hang.
	fmt.Fprintf(o.Out, "switchyard demo: starting the simulated vLLM replicas and the gateway from %s (embedded)…\n", "examples/"+DefaultPolicy)
	data, err := fs.ReadFile(examples.Policies, DefaultPolicy)
	if err != nil {
		return Summary{}, err
	}
	cfg, err := policy.Load("examples/"+DefaultPolicy, data, router.LoadOptions())
	if err != nil {
		return Summary{}, err
	}
	cfg = cfg.WithListen(o.Listen, o.AdminListen)
	cl, err := StartCluster(cfg, nil, o.SpeedUp)
	if err != nil {
		return Summary{}, err
	}
	defer cl.Close()
	nodes := 0
	if t := cfg.Topology; t != nil {
		nodes = len(t.Nodes)
	}
	fmt.Fprintf(o.Out, "switchyard demo: started %d simulated vLLM replicas for the %d-node cluster on loopback (model time ÷%g)\n", len(cl.Replicas), nodes, o.SpeedUp)
	g, err := router.New(cfg, router.Options{Logger: o.Logger, Version: "demo"})
	if err != nil {
		return Summary{}, err
	}
	defer g.Close()
	apiLn, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return Summary{}, fmt.Errorf("listen %s: %w (is another switchyard running?)", o.Listen, err)
	}
	adminLn, err := net.Listen("tcp", o.AdminListen)
	if err != nil {
		apiLn.Close()
		return Summary{}, fmt.Errorf("admin listen %s: %w", o.AdminListen, err)
	}
	api := &http.Server{Handler: g.Handler(), ReadHeaderTimeout: 10 * time.Second}
	admin := &http.Server{Handler: g.AdminHandler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = api.Serve(apiLn) }()
	go func() { _ = admin.Serve(adminLn) }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = api.Shutdown(sctx)
		_ = admin.Shutdown(sctx)
	}()
	base := "http://" + apiLn.Addr().String()
	fmt.Fprintf(o.Out, "switchyard demo: gateway on %s (admin on http://%s)\n\n", base, adminLn.Addr())
	fmt.Fprintf(o.Out, "Point any OpenAI client at it, e.g.\n  OPENAI_BASE_URL=%s/v1 OPENAI_API_KEY=unused, model \"auto\" (or pin \"qwen\" / \"minicpm\")\n", base)
	fmt.Fprintf(o.Out, "  curl -s %s/v1/chat/completions -d '{\"model\":\"auto\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}'\n", base)
	fmt.Fprintf(o.Out, "  curl -s http://%s/metrics | grep switchyard_requests_total\n", adminLn.Addr())

	runCtx := ctx
	if o.Duration > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeout(ctx, o.Duration)
		defer cancel()
	}
	until := "Ctrl-C to stop"
	if o.Duration > 0 {
		until = "stopping after " + o.Duration.String()
	}
	rec := NewRecorder()
	onResult := rec.Add
	if o.Requests > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithCancel(runCtx)
		defer cancel()
		var n atomic.Int64
		onResult = func(r Result) {
			rec.Add(r)
			if n.Add(1) == int64(o.Requests) {
				cancel()
			}
		}
	}
	done := make(chan struct{})
	if !o.NoLoad {
		load := &Load{BaseURL: base, Workers: o.Workers, OnResult: onResult, Seed: 1}
		if load.Workers <= 0 {
			load.Workers = 16
		}
		fmt.Fprintf(o.Out, "\nRunning a mixed agent-like load (%d concurrent sessions); %s.\n", load.Workers, until)
		fmt.Fprintf(o.Out, "Latencies are of the simulated replicas, whose model time runs %g× faster than the reference cluster's (--speedup).\n", o.SpeedUp)
		fmt.Fprintln(o.Out)
		go func() { load.Run(runCtx); close(done) }()
	} else {
		fmt.Fprintf(o.Out, "\nNo load (--no-load); %s.\n", until)
		close(done)
	}
	var kill <-chan time.Time
	if o.Kill != "" {
		if _, ok := cl.byName[o.Kill]; !ok {
			return Summary{}, fmt.Errorf("--kill %q: no such replica", o.Kill)
		}
		kt := time.NewTimer(o.KillAfter)
		defer kt.Stop()
		kill = kt.C
	}
	var tick <-chan time.Time
	if o.Tick > 0 && !o.NoLoad {
		t := time.NewTicker(o.Tick)
		defer t.Stop()
		tick = t.C
	}
	view := &screen{w: o.Out, terminal: o.Terminal, width: o.Width, rec: rec, g: g, lastLine: time.Now()}
	for {
		select {
		case now := <-tick:
			view.tick(now)
		case <-kill:
			cl.Kill(o.Kill)
			view.event(time.Since(rec.started), fmt.Sprintf("killed %s: its requests are retried and its streams (chat, Responses, Messages) resume elsewhere; one cut inside a tool call ends with an error event", o.Kill))
		case <-runCtx.Done():
			<-done
			s := rec.Summarize()
			if !o.NoLoad {
				view.tick(time.Now())
				PrintSummary(o.Out, s)
			}
			return s, nil
		}
	}
}
