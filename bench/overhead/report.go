package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Quantiles are latency percentiles in microseconds (nearest rank).
type Quantiles struct {
	P50 float64 `json:"p50_us"`
	P90 float64 `json:"p90_us"`
	P99 float64 `json:"p99_us"`
}

// Side is what one arm of a measurement saw.
type Side struct {
	Requests int `json:"requests"`
	// Errors counts transport errors, statuses other than 200 and
	// incomplete answers (a stream without a content delta or [DONE]).
	Errors  int        `json:"errors"`
	Latency *Quantiles `json:"latency,omitempty"`
	// TTFT is the time to the first content delta (streams).
	TTFT *Quantiles `json:"ttft,omitempty"`
	// ThroughputRPS is answered requests per second while the arm was
	// driven (closed loop).
	ThroughputRPS float64 `json:"throughput_rps,omitempty"`
	// SendLagP99 is how late the open-loop scheduler sent its requests
	// (p99, µs): the load tool's own lateness, charged to both arms.
	SendLagP99 float64 `json:"send_lag_p99_us,omitempty"`
}

// Result is one measurement: one JSON line with --json.
type Result struct {
	Record string `json:"record"` // "measurement"
	Config string `json:"config"`
	// Mode is nonstream or stream; open_streams for the held-streams
	// measurement.
	Mode string `json:"mode"`
	// Load is open_loop (fixed rate), closed_loop (workers) or open_streams.
	Load    string  `json:"load"`
	RateRPS int     `json:"rate_rps,omitempty"`
	Workers int     `json:"workers,omitempty"`
	Seconds float64 `json:"seconds_per_side,omitempty"`
	Direct  *Side   `json:"direct,omitempty"`
	Gateway *Side   `json:"gateway,omitempty"`
	// Added is gateway minus direct, percentile by percentile.
	Added     *Quantiles `json:"added,omitempty"`
	TTFTAdded *Quantiles `json:"ttft_added,omitempty"`
	// Classifier is the classifier request sent straight to the
	// classifier's simulator, interleaved with the other arms
	// (classifier-miss only).
	Classifier *Side `json:"classifier_call,omitempty"`
	// ThroughputRatio is gateway over direct saturation throughput.
	ThroughputRatio float64 `json:"throughput_ratio,omitempty"`
	// CPUPer10k is the gateway process's CPU seconds (user+system) over
	// the measurement per 10,000 gateway requests.
	CPUPer10k float64 `json:"cpu_s_per_10k,omitempty"`
	// PeakRSSMiB is the gateway process's VmHWM so far.
	PeakRSSMiB float64 `json:"peak_rss_mib,omitempty"`
	// Open streams: the gateway's VmRSS idle and with OpenStreams held,
	// and the difference per stream.
	OpenStreams      int     `json:"open_streams,omitempty"`
	IdleRSSMiB       float64 `json:"idle_rss_mib,omitempty"`
	OpenRSSMiB       float64 `json:"open_rss_mib,omitempty"`
	KiBPerOpenStream float64 `json:"kib_per_open_stream,omitempty"`
}

// quantiles returns the percentiles of d, which it sorts; nil when empty.
func quantiles(d []time.Duration) *Quantiles {
	if len(d) == 0 {
		return nil
	}
	slices.Sort(d)
	at := func(q float64) float64 {
		i := int(math.Ceil(q*float64(len(d)))) - 1
		return us(d[min(max(i, 0), len(d)-1)])
	}
	return &Quantiles{P50: at(0.50), P90: at(0.90), P99: at(0.99)}
}

func us(d time.Duration) float64 { return math.Round(float64(d)/float64(time.Microsecond)*10) / 10 }

func sub(a, b *Quantiles) *Quantiles {
	if a == nil || b == nil {
		return nil
	}
	r := func(x float64) float64 { return math.Round(x*10) / 10 }
	return &Quantiles{P50: r(a.P50 - b.P50), P90: r(a.P90 - b.P90), P99: r(a.P99 - b.P99)}
}

// summarize turns an arm's samples into a Side. Latency percentiles cover
// the answered requests only; errors are counted apart.
func summarize(s []sample, stream bool) *Side {
	side := &Side{Requests: len(s)}
	var lat, ttft, lag []time.Duration
	for _, x := range s {
		lag = append(lag, x.lag)
		if x.err {
			side.Errors++
			continue
		}
		lat = append(lat, x.lat)
		if stream {
			ttft = append(ttft, x.ttft)
		}
	}
	side.Latency, side.TTFT = quantiles(lat), quantiles(ttft)
	if q := quantiles(lag); q != nil && q.P99 > 0 {
		side.SendLagP99 = q.P99
	}
	return side
}

func round1(x float64) float64 { return math.Round(x*10) / 10 }

// runInfo is the first JSON line: where and how the numbers were taken.
type runInfo struct {
	Record string `json:"record"` // "run"
	Date   string `json:"date"`
	NProc  int    `json:"nproc"`
	CPU    string `json:"cpu"`
	Go     string `json:"go"`
	// Commit is `git describe --always --dirty` of the working directory
	// (empty outside a git checkout).
	Commit  string   `json:"commit,omitempty"`
	LoadAvg string   `json:"loadavg_at_start"`
	Args    []string `json:"args"`
	// Layout says which process runs what.
	Layout string `json:"layout"`
}

// targetCheck compares one measured number with its target.
type targetCheck struct {
	Record string   `json:"record"` // "target"
	Name   string   `json:"name"`
	Limit  string   `json:"limit"`
	Value  *float64 `json:"value"` // nil: not measured in this run
	Unit   string   `json:"unit"`
	Met    *bool    `json:"met"`
}

// targets checks the targets against the results: added p50 and
// p99 at 2000 rps non-stream with no classifier, saturation through the
// gateway, added TTFT (p50, pinned, 2000 rps) and memory per open stream.
func targets(rs []Result) []targetCheck {
	find := func(mode, load string, rate int) *Result {
		for i := range rs {
			r := &rs[i]
			if r.Config == configPinned && r.Mode == mode && r.Load == load && (rate == 0 || r.RateRPS == rate) {
				return r
			}
		}
		return nil
	}
	check := func(name, limit, unit string, v *float64, ok func(float64) bool) targetCheck {
		t := targetCheck{Record: "target", Name: name, Limit: limit, Unit: unit, Value: v}
		if v != nil {
			met := ok(*v)
			t.Met = &met
		}
		return t
	}
	var out []targetCheck
	var p50, p99, sat, ttft, kib *float64
	if r := find("nonstream", "open_loop", 2000); r != nil && r.Added != nil {
		p50, p99 = &r.Added.P50, &r.Added.P99
	}
	if r := find("nonstream", "closed_loop", 0); r != nil && r.Gateway != nil {
		sat = &r.Gateway.ThroughputRPS
	}
	if r := find("stream", "open_loop", 2000); r != nil && r.TTFTAdded != nil {
		ttft = &r.TTFTAdded.P50
	}
	for i := range rs {
		if rs[i].Load == "open_streams" {
			kib = &rs[i].KiBPerOpenStream
		}
	}
	out = append(out,
		check("added p50, pinned, non-stream, 2000 rps", "<= 100", "µs", p50, func(v float64) bool { return v <= 100 }),
		check("added p99, pinned, non-stream, 2000 rps", "<= 1000", "µs", p99, func(v float64) bool { return v <= 1000 }),
		check("saturation through the gateway, pinned, non-stream", ">= 10000", "req/s", sat, func(v float64) bool { return v >= 10000 }),
		check("added TTFT p50, pinned, stream, 2000 rps", "<= 200", "µs", ttft, func(v float64) bool { return v <= 200 }),
		check("memory per open stream", "<= 64", "KiB", kib, func(v float64) bool { return v <= 64 }),
	)
	return out
}

func writeJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

func q3(q *Quantiles) string {
	if q == nil {
		return "-"
	}
	return fmt.Sprintf("%.0f / %.0f / %.0f", q.P50, q.P90, q.P99)
}

func f0(v float64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f", v)
}

func f2(v float64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", v)
}

func errs(sides ...*Side) string {
	parts := make([]string, 0, len(sides))
	for _, s := range sides {
		if s != nil {
			parts = append(parts, fmt.Sprint(s.Errors))
		}
	}
	return strings.Join(parts, "/")
}

// writeTable prints the results for people: latency, saturation, memory,
// then the targets.
func writeTable(w io.Writer, info runInfo, rs []Result, ts []targetCheck) {
	fmt.Fprintf(w, "Switchyard overhead against a direct connection — %s, %d CPUs (%s), %s, commit %s\n", info.Date, info.NProc, info.CPU, info.Go, orDash(info.Commit))
	fmt.Fprintf(w, "%s; load average at start %s\n", info.Layout, info.LoadAvg)
	fmt.Fprintln(w, "Latency in µs as p50 / p90 / p99, from each request's scheduled send time; added = gateway − direct per percentile.")
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "config\tmode\trate\tmetric\tdirect\tgateway\tadded\treqs/side\terrors d/g\tcpu s/10k\tpeak RSS MiB\t")
	for _, r := range rs {
		if r.Load != "open_loop" {
			continue
		}
		metric := "latency"
		if r.Mode == "stream" {
			metric = "done"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t\n", r.Config, r.Mode, r.RateRPS, metric,
			q3(r.Direct.Latency), q3(r.Gateway.Latency), q3(r.Added), r.Gateway.Requests, errs(r.Direct, r.Gateway), f2(r.CPUPer10k), f0(r.PeakRSSMiB))
		if r.Mode == "stream" {
			fmt.Fprintf(tw, "\t\t\tTTFT\t%s\t%s\t%s\t\t\t\t\t\n", q3(r.Direct.TTFT), q3(r.Gateway.TTFT), q3(r.TTFTAdded))
		}
		if c := r.Classifier; c != nil {
			fmt.Fprintf(tw, "\t\t\tclassifier call\t%s\t\tadded−call p50 %.0f\t%d\t%d\t\t\t\n", q3(c.Latency), addedMinusCall(r), c.Requests, c.Errors)
		}
	}
	tw.Flush()

	var closed []Result
	for _, r := range rs {
		if r.Load == "closed_loop" {
			closed = append(closed, r)
		}
	}
	if len(closed) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Saturation (closed loop): answered requests/s while each side was driven.")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "config\tmode\tworkers\tdirect req/s\tgateway req/s\tratio\tgateway latency\terrors d/g\tcpu s/10k\tpeak RSS MiB\t")
		for _, r := range closed {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%.2f\t%s\t%s\t%s\t%s\t\n", r.Config, r.Mode, r.Workers, f0(r.Direct.ThroughputRPS),
				f0(r.Gateway.ThroughputRPS), r.ThroughputRatio, q3(r.Gateway.Latency), errs(r.Direct, r.Gateway), f2(r.CPUPer10k), f0(r.PeakRSSMiB))
		}
		tw.Flush()
	}
	for _, r := range rs {
		if r.Load == "open_streams" {
			fmt.Fprintln(w)
			fmt.Fprintf(w, "Open streams (%s, fresh gateway): %d held, RSS idle %.1f MiB → %.1f MiB: %.1f KiB per open stream\n",
				r.Config, r.OpenStreams, r.IdleRSSMiB, r.OpenRSSMiB, r.KiBPerOpenStream)
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Targets:")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, t := range ts {
		v, verdict := "-", "not measured"
		if t.Value != nil {
			v = fmt.Sprintf("%.1f %s", *t.Value, t.Unit)
			verdict = "NOT MET"
			if *t.Met {
				verdict = "met"
			}
		}
		fmt.Fprintf(tw, "  %s\t%s %s\t%s\t%s\t\n", t.Name, t.Limit, t.Unit, v, verdict)
	}
	tw.Flush()
}

// addedMinusCall is the added p50 (TTFT for streams) less the directly
// measured classifier call's p50: what the gateway adds besides the call.
func addedMinusCall(r Result) float64 {
	if r.Classifier == nil || r.Classifier.Latency == nil {
		return 0
	}
	a := r.Added
	if r.Mode == "stream" {
		a = r.TTFTAdded
	}
	if a == nil {
		return 0
	}
	return round1(a.P50 - r.Classifier.Latency.P50)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
