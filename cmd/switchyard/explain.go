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
	fs := newFlags("explain", "[REQUEST_JSON | -]", stderr)
	configPath := fs.String("config", "", "config `file` (default $SWITCHYARD_CONFIG, then ./switchyard.yaml)")
	class := fs.String("class", "", "use this class `label` instead of calling the classifier")
	api := fs.String("api", "", "the request's `API`: chat, completions, responses or messages (default: detected from the body)")
	var headers headerFlags
	fs.Var(&headers, "header", "request `header` as 'Name: value' (repeatable), e.g. for header conditions")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if fs.NArg() > 1 {
		fs.Usage()
		return exitUsage
	}
	// The same file serve would load. It is read before the request so that
	// a config error shows at once rather than after standard input ends.
	path, from := resolveConfig(*configPath)
	cfg, err := router.LoadConfig(path)
	if err != nil {
		printConfigErr(stderr, "explain", path, from, err)
		return exitInvalid
	}
	var body []byte
	if fs.NArg() == 0 || fs.Arg(0) == "-" {
		body, err = io.ReadAll(os.Stdin)
	} else {
		body = []byte(fs.Arg(0))
	}
	if err != nil {
		fmt.Fprintln(stderr, "switchyard explain: read request:", err)
		return exitRuntime
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
	e, err := g.ExplainAPI(ctx, http.Header(headers), body, *class, *api)
	if err != nil {
		fmt.Fprintln(stderr, "switchyard explain:", err)
		return exitInvalid
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	_ = enc.Encode(e)
	if c := e.Classifier; c != nil && c.Fallback {
		// The explanation stands (it is what the gateway would do now), but
		// it rests on the fallback label, not on a classification.
		fmt.Fprintf(stderr, "switchyard explain: the classifier could not answer (%s: %s); the class is on_error's label %q\n", c.Result, c.Error, e.Class)
		return exitRuntime
	}
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
