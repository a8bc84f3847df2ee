package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/switchyard/switchyard/policy"
	"github.com/switchyard/switchyard/router"
)

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("serve", "", stderr)
	configPath := fs.String("config", "", "config `file` (default $SWITCHYARD_CONFIG, then ./switchyard.yaml)")
	listen := fs.String("listen", "", "client API `address` (overrides server.listen)")
	adminListen := fs.String("admin-listen", "", "admin API `address` (overrides server.admin_listen)")
	logLevel := fs.String("log-level", "info", "log `level`: debug, info, warn, error")
	shadow := fs.String("shadow", "", "a candidate policy `file` evaluated on live traffic without affecting it; reloaded with the config (SIGHUP, POST /admin/reload)")
	noWatch := fs.Bool("no-watch", false, "do not reload when the config file changes (SIGHUP and POST /admin/reload still do)")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return exitUsage
	}
	path, from := resolveConfig(*configPath)
	log, err := newLogger(stderr, *logLevel)
	if err != nil {
		fmt.Fprintln(stderr, "switchyard serve:", err)
		return exitUsage
	}
	cfg, err := router.LoadConfig(path)
	if err != nil {
		printConfigErr(stderr, "serve", path, from, err)
		return exitInvalid
	}
	tp, shutdownTracing, err := startTracing(ctx, log, stdout)
	if err != nil {
		log.Error("tracing setup failed", "error", err.Error())
		return exitRuntime
	}
	defer shutdownTracing()
	// The flags override the file's addresses in every config read,
	// the first and each reload, so a reload compares like with like.
	override := func(c *policy.Config) *policy.Config { return c.WithListen(*listen, *adminListen) }
	cfg = override(cfg)
	if len(cfg.Server.APIKeys) > 0 && cfg.Server.ResponseIDSecretEnv == "" {
		log.Warn("stored-response ids are signed with a secret derived from the API keys: adding or rotating a key makes earlier ids unknown (404), and during a rollout that changes the keys the old and new instances refuse each other's ids; set server.response_id_secret_env (the same on every instance) to keep them")
	}
	if exposedAdmin(cfg.Server.AdminListen) && cfg.Server.AdminToken == "" {
		log.Warn("the admin API listens beyond this host without a token: whoever reaches it can read the config, reload it and run explain; set server.admin_token_env",
			"admin_listen", cfg.Server.AdminListen)
	}
	g, err := router.New(cfg, router.Options{ConfigPath: path, Logger: log, Version: version, Tracer: tp, Override: override, ShadowPath: *shadow})
	if err != nil {
		log.Error("cannot start", "error", err.Error())
		return exitRuntime
	}
	defer g.Close()
	srv := &Server{Gateway: g, Log: log, Listen: cfg.Server.Listen, AdminListen: cfg.Server.AdminListen, FDLimit: raiseFDLimit(log)}
	if !*noWatch {
		go watchConfig(ctx, path, g, log)
	}
	// SIGHUP is caught from here until serve returns, so a reload signal
	// during start-up or the shutdown drain never kills the process.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go reloadOnHUP(ctx, hup, g, log)
	if err := srv.Run(ctx, nil); err != nil {
		log.Error("server failed", "error", err.Error())
		return exitRuntime
	}
	return exitOK
}

// Server runs a gateway's two listeners and drains on shutdown.
type Server struct {
	Gateway     *router.Gateway
	Log         *slog.Logger
	Listen      string
	AdminListen string
	// Exit ends the process on a second SIGINT/SIGTERM during the drain;
	// nil means os.Exit.
	Exit func(code int)
	// Sleep waits out server.drain_delay; nil means time.Sleep.
	Sleep func(time.Duration)
	// FDLimit is the process's open-file limit, from which the client
	// listener's default connection cap is derived (0: unknown, no cap
	// unless server.max_connections sets one).
	FDLimit uint64
}

// Run serves until ctx ends, then drains in-flight requests (streams
// included) for server.shutdown_grace. ready, if non-nil, receives the bound
// addresses once both listeners are up.
func (s *Server) Run(ctx context.Context, ready func(api, admin net.Addr)) error {
	sc := s.Gateway.Snapshot().Config.Server
	apiLn, err := net.Listen("tcp", s.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w%s", s.Listen, err, inUseHint(err, "--listen", "server.listen"))
	}
	adminLn, err := net.Listen("tcp", s.AdminListen)
	if err != nil {
		apiLn.Close()
		return fmt.Errorf("admin listen %s: %w%s", s.AdminListen, err, inUseHint(err, "--admin-listen", "server.admin_listen"))
	}
	api := &http.Server{
		Handler:           s.Gateway.Handler(),
		ReadHeaderTimeout: sc.ReadHeaderTimeout.Std(),
		IdleTimeout:       sc.IdleTimeout.Std(),
		MaxHeaderBytes:    1 << 20,
		ErrorLog:          slog.NewLogLogger(s.Log.Handler(), slog.LevelWarn),
	}
	admin := &http.Server{
		Handler:           s.Gateway.AdminHandler(),
		ReadHeaderTimeout: sc.ReadHeaderTimeout.Std(),
		IdleTimeout:       sc.IdleTimeout.Std(),
		ErrorLog:          slog.NewLogLogger(s.Log.Handler(), slog.LevelWarn),
	}
	apiLn = s.Gateway.LimitServer(api, apiLn, "api", s.FDLimit)
	adminLn = s.Gateway.LimitServer(admin, adminLn, "admin", s.FDLimit)
	errc := make(chan error, 2)
	go func() { errc <- api.Serve(apiLn) }()
	go func() { errc <- admin.Serve(adminLn) }()
	s.Log.Info("switchyard serving", "listen", apiLn.Addr().String(), "admin_listen", adminLn.Addr().String(),
		"generation", s.Gateway.Snapshot().Generation, "version", version)
	if ready != nil {
		ready(apiLn.Addr(), adminLn.Addr())
	}
	select {
	case err := <-errc:
		api.Close()
		admin.Close()
		return err
	case <-ctx.Done():
	}
	grace := s.Gateway.Snapshot().Config.Server.ShutdownGrace.Std()
	// A second SIGINT or SIGTERM during the drain exits at once, as an
	// operator pressing Ctrl-C twice expects.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	s.Log.Info("shutting down; draining in-flight requests", "grace", grace.String())
	drained := make(chan struct{})
	defer close(drained)
	go func() {
		select {
		case sig := <-sigs:
			s.Log.Error("second signal during the drain: exiting now", "signal", sig.String())
			exit := s.Exit
			if exit == nil {
				exit = os.Exit
			}
			exit(1)
		case <-drained:
		}
	}()
	// /readyz answers 503 from now on. The admin listener (metrics, and
	// /readyz) stays up until the client API has drained.
	s.Gateway.Drain()
	// For drain_delay the listener still accepts and serves: load
	// balancers (a Kubernetes endpoint removal reaching every kube-proxy)
	// take a few seconds to stop sending here, and what they still send
	// must not be refused.
	if d := s.Gateway.Snapshot().Config.Server.DrainDelay.Std(); d > 0 {
		s.Log.Info("draining: /readyz answers 503 while new requests are still served", "drain_delay", d.String())
		sleep := s.Sleep
		if sleep == nil {
			sleep = time.Sleep
		}
		sleep(d)
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	err = api.Shutdown(sctx)
	if errors.Is(err, context.DeadlineExceeded) {
		// Streams still open get an error event rather than a bare EOF,
		// then a moment to write it before their connections close.
		n := s.Gateway.CutStreams()
		s.Log.Warn("shutdown grace expired; ending open streams with an error event and closing connections", "streams", n)
		fctx, fcancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = api.Shutdown(fctx)
		fcancel()
		api.Close()
	}
	actx, acancel := context.WithTimeout(context.Background(), time.Second)
	_ = admin.Shutdown(actx)
	acancel()
	return nil
}

// inUseHint says how to pick another address when err is an address in
// use (another switchyard, or a demo, already listens there).
func inUseHint(err error, flag, key string) string {
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Sprintf(" (another process listens there: choose another address with %s or %s)", flag, key)
	}
	return ""
}

func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("bad --log-level %q: use debug, info, warn or error", level)
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l})), nil
}

func reloadOnHUP(ctx context.Context, hup <-chan os.Signal, g *router.Gateway, log *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			log.Info("SIGHUP: reloading config")
			_, _ = g.Reload()
		}
	}
}

// watchConfig reloads when the config file changes. It watches the file's
// directory, since editors and Kubernetes ConfigMaps replace files rather
// than write them in place, and debounces bursts of events.
func watchConfig(ctx context.Context, path string, g *router.Gateway, log *slog.Logger) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		log.Warn("config watch unavailable; reload with SIGHUP or POST /admin/reload", "error", err.Error())
		return
	}
	defer w.Close()
	abs, _ := filepath.Abs(path)
	if err := w.Add(filepath.Dir(abs)); err != nil {
		log.Warn("config watch unavailable; reload with SIGHUP or POST /admin/reload", "error", err.Error())
		return
	}
	var timer *time.Timer
	fire := make(chan struct{}, 1)
	for {
		select {
		case <-ctx.Done():
			if timer != nil {
				timer.Stop()
			}
			return
		case ev, ok := <-w.Events:
			if !ok {
				return
			}
			if filepath.Clean(ev.Name) != abs && filepath.Base(ev.Name) != "..data" {
				continue
			}
			if timer != nil {
				timer.Stop()
			}
			timer = time.AfterFunc(200*time.Millisecond, func() {
				select {
				case fire <- struct{}{}:
				default:
				}
			})
		case <-fire:
			log.Info("config file changed: reloading", "file", path)
			_, _ = g.Reload()
		case err, ok := <-w.Errors:
			if !ok {
				return
			}
			log.Warn("config watch error", "error", err.Error())
		}
	}
}

// exposedAdmin reports whether an admin listener on addr can be reached
// from other hosts: any address but a loopback one or localhost.
func exposedAdmin(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || strings.EqualFold(host, "localhost") {
		return false
	}
	ip := net.ParseIP(host)
	return ip == nil || !ip.IsLoopback()
}
