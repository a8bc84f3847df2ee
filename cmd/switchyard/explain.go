package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"

	"github.com/switchyard/switchyard/router"
)

func runExplain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("explain", "--config FILE [--class LABEL] [REQUEST_JSON or -]", stderr)
	configPath := fs.String("config", "", "config file (required)")
	class := fs.String("class", "", "use this class instead of calling the classifier")
	var headers headerFlags
	fs.Var(&headers, "header", "request header `Name: value` (repeatable), e.g. for header conditions")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if *configPath == "" || fs.NArg() > 1 {
		fs.Usage()
		return exitUsage
	}
	var body []byte
	var err error
	if fs.NArg() == 0 || fs.Arg(0) == "-" {
		body, err = io.ReadAll(os.Stdin)
	} else {
		body = []byte(fs.Arg(0))
	}
	if err != nil {
		fmt.Fprintln(stderr, "switchyard explain: read request:", err)
		return exitRuntime
	}
	cfg, err := router.LoadConfig(*configPath)
	if err != nil {
		printConfigErr(stderr, *configPath, err)
		return exitInvalid
	}
	if *class != "" {
		if cfg.Classifier == nil {
			fmt.Fprintln(stderr, "switchyard explain: --class given but the config has no classifier")
			return exitInvalid
		}
		if !slices.Contains(cfg.Classifier.Labels, *class) {
			fmt.Fprintf(stderr, "switchyard explain: --class %q is not a label (labels: %s)\n", *class, strings.Join(cfg.Classifier.Labels, ", "))
			return exitInvalid
		}
	}
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	g, err := router.New(cfg, router.Options{Logger: log, Version: version, Passive: true})
	if err != nil {
		fmt.Fprintln(stderr, "switchyard explain:", err)
		return exitRuntime
	}
	defer g.Close()
	e, err := g.Explain(ctx, http.Header(headers), body, *class)
	if err != nil {
		fmt.Fprintln(stderr, "switchyard explain:", err)
		return exitInvalid
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	_ = enc.Encode(e)
	return exitOK
}

type headerFlags http.Header

func (h *headerFlags) String() string { return "" }

func (h *headerFlags) Set(v string) error {
	name, value, ok := cut(v)
	if !ok {
		return fmt.Errorf("want Name: value, got %q", v)
	}
	if *h == nil {
		*h = headerFlags{}
	}
	http.Header(*h).Add(name, value)
	return nil
}

func cut(v string) (string, string, bool) {
	for i := 0; i < len(v); i++ {
		if v[i] == ':' {
			name, value := v[:i], v[i+1:]
			for len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
			return name, value, name != ""
		}
	}
	return "", "", false
}
