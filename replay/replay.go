// Package replay sends captured agent sessions through a policy, against
// simulated replicas, and reports where each turn went: the split by
// requests and prompt tokens, classifier calls, what the sessions did,
// side requests, turn outcomes and the throughput the capacity model
// projects; and it compares two policies turn by turn, so that a policy
// edit can be gated in CI (switchyard replay).
//
// A capture is a JSON Lines file, one request a line: {"path", "headers",
// "body"}, as testdata/agents/sessions holds and the capture: config
// section writes. Each file is replayed in order on a fresh gateway (its
// sessions are its own), with the config's pools served by simulators
// (the reference cluster's profiles) whose classifier answers are
// vllmsim.DefaultChooser's.
package replay

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/switchyard/switchyard/demo"
	"github.com/switchyard/switchyard/policy"
	"github.com/switchyard/switchyard/policy/routing"
	"github.com/switchyard/switchyard/router"
	"github.com/switchyard/switchyard/vllmsim"
)

// Request is one captured request: where it stands in its file, its API
// path, the headers kept and its body.
type Request struct {
	Line    int               `json:"-"`
	Path    string            `json:"path"`
	Headers map[string]string `json:"headers,omitempty"`
	Body    json.RawMessage   `json:"body"`
}

// LineError is a line of a capture file that cannot be replayed.
type LineError struct {
	File string
	Line int
	Err  error
}

func (e *LineError) Error() string { return fmt.Sprintf("%s:%d: %v", e.File, e.Line, e.Err) }

// maxLine bounds a capture line (a request body the gateway would take).
const maxLine = 64 << 20

// Load reads a capture file. A line that is truncated, not JSON, or not a
// request of this format (another version's) is returned as a LineError
// naming the file and line; the other lines are kept.
func Load(file string) ([]Request, []error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, []error{err}
	}
	defer f.Close()
	var out []Request
	var errs []error
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var r Request
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		switch err := dec.Decode(&r); {
		case err != nil:
			errs = append(errs, &LineError{file, n, fmt.Errorf("not a captured request: %w", err)})
			continue
		case !strings.HasPrefix(r.Path, "/v1/"):
			errs = append(errs, &LineError{file, n, fmt.Errorf("path %q is not an API path (/v1/...)", r.Path)})
			continue
		case len(r.Body) == 0 || r.Body[0] != '{':
			errs = append(errs, &LineError{file, n, errors.New("the body is not a JSON object")})
			continue
		}
		r.Line = n
		out = append(out, r)
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, &LineError{file, len(out) + len(errs) + 1, err})
	}
	return out, errs
}

// Turn is where one replayed request went.
type Turn struct {
	Line         int    `json:"line"`
	Route        string `json:"route"`
	Pool         string `json:"pool"`
	Class        string `json:"class,omitempty"`
	Session      string `json:"session,omitempty"`
	Side         bool   `json:"side,omitempty"`
	PromptTokens int    `json:"prompt_tokens"`
}

// Result is one capture file replayed through one config.
type Result struct {
	// Capture is the file's name without its directory and extension:
	// one agent's sessions.
	Capture      string         `json:"capture"`
	Turns        []Turn         `json:"turns"`
	Requests     int            `json:"requests"`
	PromptTokens int            `json:"prompt_tokens"`
	ByPool       map[string]int `json:"by_pool"`
	TokensByPool map[string]int `json:"prompt_tokens_by_pool"`
	ByRoute      map[string]int `json:"by_route"`
	// Sessions counts the session outcomes of the turns (new, kept,
	// moved_up, moved_down, side, not_kept).
	Sessions map[string]int `json:"sessions"`
	Side     int            `json:"side"`
	// Outcomes counts the turn outcomes (switchyard_turn_outcomes_total).
	Outcomes map[string]int `json:"outcomes"`
	// ClassifierCalls are the calls that reached the classifier's pool;
	// ClassifierTokens their prompt tokens.
	ClassifierCalls  int `json:"classifier_calls"`
	ClassifierTokens int `json:"classifier_prompt_tokens"`
	// Failed are the requests the gateway did not answer 200 (line: why).
	Failed []string `json:"failed,omitempty"`
	Gain   Gain     `json:"gain"`
}

// Run replays each file through the config that load returns (a fresh
// one for each file: the simulators are pointed at by its replica URLs).
// Bad lines come back as errors; the rest of the file is replayed.
func Run(ctx context.Context, load func() (*policy.Config, error), files []string) ([]Result, []error) {
	var out []Result
	var errs []error
	for _, file := range files {
		reqs, lineErrs := Load(file)
		errs = append(errs, lineErrs...)
		if len(reqs) == 0 {
			continue
		}
		cfg, err := load()
		if err != nil {
			return out, append(errs, err)
		}
		res, err := replayFile(ctx, cfg, file, reqs)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", file, err))
			continue
		}
		out = append(out, res)
	}
	return out, errs
}

// replayFile sends reqs in order through a fresh gateway on cfg.
func replayFile(ctx context.Context, cfg *policy.Config, file string, reqs []Request) (Result, error) {
	res := Result{Capture: strings.TrimSuffix(filepath.Base(file), filepath.Ext(file)),
		ByPool: map[string]int{}, TokensByPool: map[string]int{}, ByRoute: map[string]int{},
		Sessions: map[string]int{}, Outcomes: map[string]int{}}
	cl, err := demo.StartCluster(cfg, demo.ProfileByModel, 1000, vllmsim.WithChooser(vllmsim.DefaultChooser))
	if err != nil {
		return res, err
	}
	defer cl.Close()
	logs := &accessLog{}
	reg := prometheus.NewRegistry()
	g, err := router.New(cfg, router.Options{Logger: slog.New(slog.NewJSONHandler(logs, nil)), Registry: reg})
	if err != nil {
		return res, err
	}
	defer g.Close()
	srv := httptest.NewServer(g.Handler())
	defer srv.Close()
	for _, req := range reqs {
		turn, err := send(ctx, srv.URL, req, logs)
		if err != nil {
			res.Failed = append(res.Failed, fmt.Sprintf("line %d: %v", req.Line, err))
			continue
		}
		res.Turns = append(res.Turns, turn)
		res.Requests++
		res.PromptTokens += turn.PromptTokens
		res.ByPool[turn.Pool]++
		res.TokensByPool[turn.Pool] += turn.PromptTokens
		res.ByRoute[turn.Route]++
		if turn.Session != "" {
			res.Sessions[turn.Session]++
		}
		if turn.Side {
			res.Side++
		}
	}
	readMetrics(reg, &res)
	res.Gain = project(cfg, res.Turns, res.ClassifierCalls, res.ClassifierTokens)
	return res, nil
}

// send posts one captured request and reads its access line.
func send(ctx context.Context, base string, req Request, logs *accessLog) (Turn, error) {
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, base+req.Path, bytes.NewReader(req.Body))
	if err != nil {
		return Turn{}, err
	}
	hr.Header.Set("Content-Type", "application/json")
	for k, v := range req.Headers {
		if !strings.EqualFold(k, "authorization") && !strings.EqualFold(k, "x-api-key") {
			hr.Header.Set(k, v)
		}
	}
	if req.Path == "/v1/messages" && hr.Header.Get("anthropic-version") == "" {
		hr.Header.Set("anthropic-version", "2023-06-01")
	}
	mark := logs.mark()
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		return Turn{}, err
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Turn{}, fmt.Errorf("status %d: %s", resp.StatusCode, bytes.TrimSpace(body[:min(len(body), 300)]))
	}
	line := logs.lastRequest(mark)
	t := Turn{Line: req.Line, Route: resp.Header.Get("X-Switchyard-Route"), Pool: resp.Header.Get("X-Switchyard-Pool"),
		Class: line.Class, Session: line.Session, Side: line.Session == routing.SessionSide,
		PromptTokens: (len(req.Body) + 3) / 4}
	return t, nil
}

// accessLog keeps the gateway's JSON log lines.
type accessLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *accessLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *accessLog) mark() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Len()
}

// accessLine is what the replay reads of a request's access line.
type accessLine struct {
	Msg     string `json:"msg"`
	Class   string `json:"class"`
	Session string `json:"session"`
}

// lastRequest is the last access line written after mark.
func (l *accessLog) lastRequest(mark int) accessLine {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out accessLine
	for _, line := range bytes.Split(l.buf.Bytes()[mark:], []byte("\n")) {
		var a accessLine
		if json.Unmarshal(line, &a) == nil && a.Msg == "request" {
			out = a
		}
	}
	return out
}

// readMetrics reads the classifier's calls and tokens and the turn
// outcomes from the gateway's registry.
func readMetrics(reg *prometheus.Registry, res *Result) {
	families, err := reg.Gather()
	if err != nil {
		return
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			switch f.GetName() {
			case "switchyard_classifier_duration_seconds":
				res.ClassifierCalls += int(m.GetHistogram().GetSampleCount())
			case "switchyard_classifier_tokens_total":
				if label(m, "kind") == "prompt" {
					res.ClassifierTokens += int(m.GetCounter().GetValue())
				}
			case "switchyard_turn_outcomes_total":
				res.Outcomes[label(m, "outcome")] += int(m.GetCounter().GetValue())
			}
		}
	}
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
