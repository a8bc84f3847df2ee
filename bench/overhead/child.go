package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/policy"
	"github.com/switchyard/switchyard/pools"
	"github.com/switchyard/switchyard/router"
	"github.com/switchyard/switchyard/vllmsim"
)

// The hidden first arguments that make the tool's own executable run as a
// child: the gateway alone in its process (so that its CPU and RSS can be
// read), or the simulators.
const (
	serveGatewayArg = "--serve-gateway"
	serveSimArg     = "--serve-sim"
)

// childMain runs a child mode when args start with one; ok is false
// otherwise. A child prints one JSON line with its addresses on stdout,
// then serves until its stdin closes (the parent stopped it or died) or
// max-life passes.
func childMain(args []string) (code int, ok bool) {
	if len(args) == 0 {
		return 0, false
	}
	switch args[0] {
	case serveGatewayArg:
		return serveGateway(args[1:], os.Stdin, os.Stdout, os.Stderr), true
	case serveSimArg:
		return serveSim(args[1:], os.Stdin, os.Stdout, os.Stderr), true
	}
	return 0, false
}

// waitParent returns when stdin reaches EOF or after maxLife.
func waitParent(stdin io.Reader, maxLife time.Duration) {
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, stdin)
		close(done)
	}()
	t := time.NewTimer(maxLife)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

func serveGateway(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(serveGatewayArg, flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgText := fs.String("config", "", "gateway config (YAML text)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole life of the gateway to this file")
	accessLog := fs.Bool("access-log", false, "write the JSON access log (to /dev/null) as a production gateway would")
	bare := fs.String("bare-upstream", "", "serve a minimal reverse proxy to this base URL instead of the gateway")
	maxLife := fs.Duration("max-life", time.Hour, "exit after this long even if the parent is still there")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintln(stderr, "overhead gateway:", err)
		return 1
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return fail(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fail(err)
		}
		defer pprof.StopCPUProfile()
	}
	var h http.Handler
	if *bare != "" {
		h = bareProxy(*bare)
	} else {
		cfg, err := policy.Load("overhead.yaml", []byte(*cfgText), router.LoadOptions())
		if err != nil {
			return fail(err)
		}
		log := slog.New(slog.DiscardHandler)
		if *accessLog {
			log = slog.New(slog.NewJSONHandler(io.Discard, nil))
		}
		g, err := router.New(cfg, router.Options{Logger: log, Registry: prometheus.NewRegistry(), Version: "bench"})
		if err != nil {
			return fail(err)
		}
		defer g.Close()
		h = g.Handler()
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fail(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	if err := json.NewEncoder(stdout).Encode(map[string]string{"gateway": ln.Addr().String()}); err != nil {
		return fail(err)
	}
	waitParent(stdin, *maxLife)
	return 0
}

// bareProxy is about the least a Go reverse proxy does per request: read
// the body, POST it upstream on a keep-alive connection (with the
// gateway's upstream transport settings), copy the answer back, flushing
// each read. No parsing, routing, metrics or header filtering.
func bareProxy(upstream string) http.Handler {
	client := &http.Client{Transport: pools.NewTransport(2 * time.Second)}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		req, err := http.NewRequestWithContext(r.Context(), http.MethodPost, upstream+r.URL.Path, bytes.NewReader(body))
		if err != nil {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		req.Header["Content-Type"] = r.Header["Content-Type"]
		resp, err := client.Do(req)
		if err != nil {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		if resp.ContentLength >= 0 {
			w.Header().Set("Content-Length", strconv.FormatInt(resp.ContentLength, 10))
		}
		w.WriteHeader(resp.StatusCode)
		rc := http.NewResponseController(w)
		buf := make([]byte, 32<<10)
		for {
			n, err := resp.Body.Read(buf)
			if n > 0 {
				_, _ = w.Write(buf[:n])
				_ = rc.Flush()
			}
			if err != nil {
				return
			}
		}
	})
}

// simAddrs are the loopback addresses of the sim child's simulators.
type simAddrs struct {
	Chat     string `json:"chat"`
	Classify string `json:"classify"`
	Slow     string `json:"slow"`
}

func serveSim(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(serveSimArg, flag.ContinueOnError)
	fs.SetOutput(stderr)
	maxTokens := fs.Int("max-tokens", 16, "completion length of the zero-delay simulator")
	slowTPS := fs.Float64("slow-decode-tps", 1, "decode rate of the slow simulator (tokens/s per request)")
	slowTokens := fs.Int("slow-max-tokens", 600, "completion length of the slow simulator")
	maxLife := fs.Duration("max-life", time.Hour, "exit after this long even if the parent is still there")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	profiles := []vllmsim.Profile{
		{Model: chatModel, DefaultMaxTokens: *maxTokens},
		// The classifier's answer is one constrained token, instantly.
		{Model: classifyModel, DefaultMaxTokens: 1},
		{Model: slowModel, DecodeTPS: *slowTPS, DefaultMaxTokens: *slowTokens},
	}
	addrs := make([]string, len(profiles))
	for i, p := range profiles {
		if err := p.Validate(); err != nil {
			fmt.Fprintln(stderr, "overhead sim:", err)
			return 2
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Fprintln(stderr, "overhead sim:", err)
			return 1
		}
		srv := &http.Server{Handler: vllmsim.New(p), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		addrs[i] = ln.Addr().String()
	}
	if err := json.NewEncoder(stdout).Encode(simAddrs{Chat: addrs[0], Classify: addrs[1], Slow: addrs[2]}); err != nil {
		fmt.Fprintln(stderr, "overhead sim:", err)
		return 1
	}
	waitParent(stdin, *maxLife)
	return 0
}

// child is a running child process of the tool.
type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	exit  chan struct{}
	err   error // set before exit closes
}

// startChild runs exe with args and decodes its first stdout line into
// ready. The child is stopped if it does not answer within 15s.
func startChild(exe string, args []string, stderr io.Writer, ready any) (*child, error) {
	cmd := exec.Command(exe, args...)
	cmd.Stderr = stderr
	if _, set := os.LookupEnv("GORACE"); !set {
		// A race-enabled child (the test binary) would otherwise wait a
		// second at exit.
		cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0")
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", args[0], err)
	}
	c := &child{cmd: cmd, stdin: stdin, exit: make(chan struct{})}
	line := make(chan []byte, 1)
	go func() {
		r := bufio.NewReader(stdout)
		b, _ := r.ReadBytes('\n')
		line <- b
		_, _ = io.Copy(io.Discard, r)
		c.err = cmd.Wait()
		close(c.exit)
	}()
	select {
	case b := <-line:
		if err := json.Unmarshal(b, ready); err != nil {
			c.stop()
			return nil, fmt.Errorf("child %s: no address line (%q): %w", args[0], b, err)
		}
	case <-time.After(15 * time.Second):
		c.stop()
		return nil, fmt.Errorf("child %s: no address within 15s", args[0])
	}
	return c, nil
}

// pid is the child's process id.
func (c *child) pid() int { return c.cmd.Process.Pid }

// stop closes the child's stdin and waits up to 10s for it to exit (a CPU
// profile is written on the way out), then kills it.
func (c *child) stop() error {
	_ = c.stdin.Close()
	select {
	case <-c.exit:
		return c.err
	case <-time.After(10 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.exit
		return errors.New("child did not exit within 10s; killed")
	}
}

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat:
// 100 on every Linux architecture Go supports.
const clockTicks = 100

// cpuSeconds is the user plus system CPU time the process has used, from
// /proc/<pid>/stat (all threads; 10 ms resolution).
func cpuSeconds(pid int) (float64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces: count fields after its
	// closing parenthesis. utime and stime are fields 14 and 15.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	utime, err1 := strconv.ParseUint(f[11], 10, 64)
	stime, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return float64(utime+stime) / clockTicks, nil
}

// memKiB reads VmRSS (resident now) and VmHWM (peak resident) of the
// process from /proc/<pid>/status, in KiB.
func memKiB(pid int) (rss, hwm float64, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		n, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/%d/status: %s: %w", pid, k, err)
		}
		if k == "VmRSS" {
			rss = n
		} else {
			hwm = n
		}
	}
	if rss == 0 || hwm == 0 {
		return 0, 0, fmt.Errorf("/proc/%d/status: no VmRSS or VmHWM", pid)
	}
	return rss, hwm, nil
}
