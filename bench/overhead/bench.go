package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"
)

// Options are one run's settings; parseFlags fills them from the command
// line.
type Options struct {
	// Duration is how long each arm (direct, gateway, classifier) is driven
	// in one measurement, excluding warm-up.
	Duration time.Duration
	// Warmup is driven on every arm before each measurement and discarded.
	Warmup time.Duration
	// Slice is the length of one turn of an arm in the interleaving.
	Slice time.Duration
	// Rates are the open-loop rates in requests/s.
	Rates []int
	// Workers is the closed loop's concurrency; 0 skips it.
	Workers int
	// Configs are the gateway configurations to measure, in order.
	Configs []string
	// Modes are nonstream and/or stream.
	Modes []string
	// OpenStreams is how many streams to hold open for the memory
	// measurement; 0 skips it.
	OpenStreams int
	// MaxTokens is the zero-delay simulator's completion length.
	MaxTokens int
	// CPUProfile, when set, is the path prefix of a CPU profile written by
	// each gateway child: PREFIX-CONFIG.pprof.
	CPUProfile string
	// AccessLog makes the gateway format its JSON access log (to
	// /dev/null), as a production gateway logging at info does.
	AccessLog bool
	// Exe is the executable started for the children; empty means
	// os.Executable(). It must dispatch the hidden child arguments to
	// childMain.
	Exe string
	// Progress receives one line per step; nil means none.
	Progress io.Writer
}

// defaultOptions are the full run's settings.
func defaultOptions() Options {
	return Options{
		Duration:    5 * time.Second,
		Warmup:      500 * time.Millisecond,
		Slice:       200 * time.Millisecond,
		Rates:       []int{500, 2000},
		Workers:     64,
		Configs:     defaultConfigs,
		Modes:       []string{"nonstream", "stream"},
		OpenStreams: 1000,
		MaxTokens:   16,
	}
}

// quick shrinks o to a smoke run of a few seconds per config.
func (o *Options) quick() {
	o.Duration = 300 * time.Millisecond
	o.Warmup = 50 * time.Millisecond
	o.Slice = 100 * time.Millisecond
	o.Rates = []int{100}
	o.Workers = 8
	o.OpenStreams = 50
}

func (o *Options) validate() error {
	var errs []error
	if o.Duration <= 0 || o.Slice <= 0 || o.Warmup < 0 {
		errs = append(errs, errors.New("duration and slice must be > 0, warmup >= 0"))
	}
	for _, r := range o.Rates {
		if r <= 0 || r > 100000 {
			errs = append(errs, fmt.Errorf("rate %d: must be in 1..100000", r))
		}
	}
	if o.Workers < 0 || o.Workers > 4096 {
		errs = append(errs, fmt.Errorf("workers %d: must be in 0..4096", o.Workers))
	}
	if o.OpenStreams < 0 || o.OpenStreams > 10000 {
		errs = append(errs, fmt.Errorf("open-streams %d: must be in 0..10000", o.OpenStreams))
	}
	for _, c := range o.Configs {
		if _, err := gatewayYAML(c, simAddrs{}); err != nil {
			errs = append(errs, err)
		}
	}
	for _, m := range o.Modes {
		if m != "nonstream" && m != "stream" {
			errs = append(errs, fmt.Errorf("mode %q: unknown (known: nonstream, stream)", m))
		}
	}
	return errors.Join(errs...)
}

const chatPath = "/v1/chat/completions"

// bench is one run in progress.
type bench struct {
	o      Options
	exe    string
	sims   simAddrs
	load   *loader
	stderr io.Writer
	emit   func(Result) error
}

func (b *bench) progress(format string, args ...any) {
	if b.o.Progress != nil {
		fmt.Fprintf(b.o.Progress, format+"\n", args...)
	}
}

// Run performs every measurement of o and passes each result to emit as
// it is taken. Children's diagnostics go to stderr.
func Run(ctx context.Context, o Options, stderr io.Writer, emit func(Result) error) error {
	if err := o.validate(); err != nil {
		return err
	}
	b := &bench{o: o, exe: o.Exe, load: newLoader(), stderr: stderr, emit: emit}
	if b.exe == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("find own executable: %w", err)
		}
		b.exe = exe
	}
	sim, err := startChild(b.exe, []string{serveSimArg, "-max-tokens", strconv.Itoa(o.MaxTokens)}, stderr, &b.sims)
	if err != nil {
		return err
	}
	defer sim.stop()
	for _, name := range o.Configs {
		if err := b.runConfig(ctx, name); err != nil {
			return fmt.Errorf("config %q: %w", name, err)
		}
	}
	// Open streams are measured on the first Switchyard config asked for
	// (the bare proxy has no slow upstream).
	for _, name := range o.Configs {
		if o.OpenStreams == 0 || name == configBare {
			continue
		}
		if err := b.runOpenStreams(ctx, name); err != nil {
			return fmt.Errorf("config %q: %w", name, err)
		}
		break
	}
	return nil
}

// startGateway runs the gateway for config name in its own process;
// profile adds a CPU profile.
func (b *bench) startGateway(name string, profile bool) (*child, string, error) {
	y, err := gatewayYAML(name, b.sims)
	if err != nil {
		return nil, "", err
	}
	args := []string{serveGatewayArg, "-config", y}
	if name == configBare {
		args = []string{serveGatewayArg, "-bare-upstream", "http://" + b.sims.Chat}
	}
	if profile && b.o.CPUProfile != "" {
		args = append(args, "-cpuprofile", b.o.CPUProfile+"-"+name+".pprof")
	}
	if b.o.AccessLog {
		args = append(args, "-access-log")
	}
	var ready struct{ Gateway string }
	c, err := startChild(b.exe, args, b.stderr, &ready)
	if err != nil {
		return nil, "", err
	}
	return c, "http://" + ready.Gateway, nil
}

// gatewayUsage is the gateway process's CPU and peak RSS at one moment.
type gatewayUsage struct{ cpu, hwmKiB float64 }

func usageOf(pid int) (gatewayUsage, error) {
	cpu, err := cpuSeconds(pid)
	if err != nil {
		return gatewayUsage{}, err
	}
	_, hwm, err := memKiB(pid)
	return gatewayUsage{cpu: cpu, hwmKiB: hwm}, err
}

// resources sets r's CPU per 10k gateway requests and peak RSS from the
// usage before and after the measurement.
func resources(r *Result, before, after gatewayUsage, gatewayRequests int) {
	if gatewayRequests > 0 {
		r.CPUPer10k = round2((after.cpu - before.cpu) / float64(gatewayRequests) * 10000)
	}
	r.PeakRSSMiB = round1(after.hwmKiB / 1024)
}

func round2(x float64) float64 { return float64(int64(x*100+0.5)) / 100 }

// arms returns the interleaved arms of config name: direct, gateway and,
// for classifier-miss, the classifier call on its own.
func (b *bench) arms(name, gwURL string, stream bool) ([]*arm, error) {
	gwT, dT := templates(name, stream)
	arms := []*arm{
		{name: "direct", url: "http://" + b.sims.Chat + chatPath, tmpl: dT, stream: stream},
		{name: "gateway", url: gwURL + chatPath, tmpl: gwT, stream: stream},
	}
	if name == configMiss {
		ct, err := classifierTemplate(name)
		if err != nil {
			return nil, err
		}
		arms = append(arms, &arm{name: "classifier", url: "http://" + b.sims.Classify + chatPath, tmpl: ct})
	}
	return arms, nil
}

func (b *bench) runConfig(ctx context.Context, name string) error {
	gw, gwURL, err := b.startGateway(name, true)
	if err != nil {
		return err
	}
	defer gw.stop()
	o := b.o
	for _, mode := range o.Modes {
		stream := mode == "stream"
		arms, err := b.arms(name, gwURL, stream)
		if err != nil {
			return err
		}
		for _, rate := range o.Rates {
			b.progress("%s %s: open loop at %d req/s, %s per side", name, mode, rate, o.Duration)
			if o.Warmup > 0 {
				if _, err := b.load.openLoop(ctx, arms, rate, o.Warmup, o.Slice); err != nil {
					return err
				}
			}
			before, err := usageOf(gw.pid())
			if err != nil {
				return err
			}
			got, err := b.load.openLoop(ctx, arms, rate, o.Duration, o.Slice)
			if err != nil {
				return err
			}
			after, err := usageOf(gw.pid())
			if err != nil {
				return err
			}
			r := Result{Record: "measurement", Config: name, Mode: mode, Load: "open_loop", RateRPS: rate, Seconds: o.Duration.Seconds(),
				Direct: summarize(got[0], stream), Gateway: summarize(got[1], stream)}
			r.Added = sub(r.Gateway.Latency, r.Direct.Latency)
			if stream {
				r.TTFTAdded = sub(r.Gateway.TTFT, r.Direct.TTFT)
			}
			if len(got) > 2 {
				r.Classifier = summarize(got[2], false)
			}
			resources(&r, before, after, r.Gateway.Requests)
			if err := b.emit(r); err != nil {
				return err
			}
		}
	}
	if o.Workers == 0 {
		return nil
	}
	for _, mode := range o.Modes {
		stream := mode == "stream"
		arms, err := b.arms(name, gwURL, stream)
		if err != nil {
			return err
		}
		arms = arms[:2] // saturation compares direct and gateway only
		b.progress("%s %s: closed loop, %d workers, %s per side", name, mode, o.Workers, o.Duration)
		if o.Warmup > 0 {
			if _, err := b.load.closedLoop(ctx, arms, o.Workers, o.Warmup, min(o.Slice, o.Warmup)); err != nil {
				return err
			}
		}
		before, err := usageOf(gw.pid())
		if err != nil {
			return err
		}
		got, err := b.load.closedLoop(ctx, arms, o.Workers, o.Duration, o.Slice)
		if err != nil {
			return err
		}
		after, err := usageOf(gw.pid())
		if err != nil {
			return err
		}
		r := Result{Record: "measurement", Config: name, Mode: mode, Load: "closed_loop", Workers: o.Workers, Seconds: o.Duration.Seconds()}
		sides := make([]*Side, 2)
		for i, c := range got {
			s := summarize(c.samples, stream)
			s.SendLagP99 = 0 // no schedule in a closed loop
			if c.active > 0 {
				s.ThroughputRPS = round1(float64(s.Requests-s.Errors) / c.active.Seconds())
			}
			sides[i] = s
		}
		r.Direct, r.Gateway = sides[0], sides[1]
		r.Added = sub(r.Gateway.Latency, r.Direct.Latency)
		if r.Direct.ThroughputRPS > 0 {
			r.ThroughputRatio = round2(r.Gateway.ThroughputRPS / r.Direct.ThroughputRPS)
		}
		resources(&r, before, after, r.Gateway.Requests)
		if err := b.emit(r); err != nil {
			return err
		}
	}
	return nil
}

// runOpenStreams starts a fresh gateway for config name (so that its RSS
// is not inflated by earlier load), warms it up at 200 requests/s for the
// warm-up time, reads its idle VmRSS,
// holds OpenStreams streams open against the slow simulator through it,
// and reads VmRSS again.
func (b *bench) runOpenStreams(ctx context.Context, name string) error {
	n := b.o.OpenStreams
	b.progress("%s: %d open streams through a fresh gateway", name, n)
	gw, gwURL, err := b.startGateway(name, false)
	if err != nil {
		return err
	}
	defer gw.stop()
	// Warm-up: both request paths once through, at a low rate.
	for _, stream := range []bool{false, true} {
		arms, err := b.arms(configPinned, gwURL, stream)
		if err != nil {
			return err
		}
		if _, err := b.load.openLoop(ctx, arms[1:2], 200, max(b.o.Warmup, 100*time.Millisecond), 100*time.Millisecond); err != nil {
			return err
		}
	}
	b.load.client.CloseIdleConnections()
	time.Sleep(b.o.Slice)
	idle, _, err := memKiB(gw.pid())
	if err != nil {
		return err
	}
	// "slow" is a pool name: a direct target in every config.
	release, err := holdStreams(ctx, gwURL+chatPath, []byte(chatBody("slow", userPrompt(configPinned), true)), n, 60*time.Second)
	if err != nil {
		return err
	}
	// Let the streams settle (a token per second each), then take the
	// highest of a few readings a slice apart.
	var open float64
	for range 5 {
		time.Sleep(b.o.Slice)
		rss, _, err := memKiB(gw.pid())
		if err != nil {
			release()
			return err
		}
		open = max(open, rss)
	}
	release()
	r := Result{Record: "measurement", Config: name, Mode: "open_streams", Load: "open_streams", OpenStreams: n,
		IdleRSSMiB: round1(idle / 1024), OpenRSSMiB: round1(open / 1024), KiBPerOpenStream: round1((open - idle) / float64(n))}
	return b.emit(r)
}
