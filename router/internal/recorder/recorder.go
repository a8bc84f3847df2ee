package recorder

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Config is what to record and where.
type Config struct {
	Dir          string
	Keys         []string
	Sample       float64
	MaxFileBytes int64
	MaxFiles     int
	// Headers are the header names kept (canonical or not); every other
	// header is left out.
	Headers []string
}

// maxQueued bounds the bytes of lines waiting for the writer.
const maxQueued = 32 << 20

// Recorder records requests while configured (Configure); safe for
// concurrent use.
type Recorder struct {
	conf    atomic.Pointer[Config]
	lines   chan []byte
	queued  atomic.Int64
	dropped *prometheus.CounterVec
	written prometheus.Counter
	log     *slog.Logger
	rand    func() float64
	now     func() time.Time

	// openFile opens a new capture file (os.OpenFile; tests put a full
	// device in its place).
	openFile func(name string, flag int, perm os.FileMode) (*os.File, error)
	// lastWarn is when a drop was last logged (unix nanos).
	lastWarn atomic.Int64
	once     sync.Once
	// The writer's state (its goroutine only).
	file *os.File
	size int64
	dir  string
}

// New returns a recorder, off until Configure. dropped (label reason:
// queue_full, write_error) and written count lines; both may be nil.
func New(log *slog.Logger, rnd func() float64, now func() time.Time, dropped *prometheus.CounterVec, written prometheus.Counter) *Recorder {
	return &Recorder{lines: make(chan []byte, 4096), log: log, rand: rnd, now: now, dropped: dropped, written: written, openFile: os.OpenFile}
}

// Configure turns recording on with c, or off with nil; the writer starts
// on first use and stops with ctx.
func (r *Recorder) Configure(ctx context.Context, c *Config) {
	if c != nil {
		cc := *c
		cc.Headers = make([]string, len(c.Headers))
		for i, h := range c.Headers {
			cc.Headers[i] = http.CanonicalHeaderKey(h)
		}
		c = &cc
		r.once.Do(func() { go r.write(ctx) })
	}
	r.conf.Store(c)
}

// line is one recorded request, as a capture file holds it.
type line struct {
	Path    string            `json:"path"`
	Headers map[string]string `json:"headers,omitempty"`
	Body    json.RawMessage   `json:"body"`
}

// Offer records the request when key (its API key's name, "" for none)
// is chosen or the sample draws it. body must be the valid JSON the
// gateway parsed. It never blocks.
func (r *Recorder) Offer(key, path string, h http.Header, body []byte) {
	c := r.conf.Load()
	if c == nil || !(slices.Contains(c.Keys, key) && key != "" || c.Sample > 0 && r.rand() < c.Sample) {
		return
	}
	l := line{Path: path, Body: body}
	for _, name := range c.Headers {
		if v := h.Get(name); v != "" {
			if l.Headers == nil {
				l.Headers = map[string]string{}
			}
			l.Headers[name] = v
		}
	}
	b, err := json.Marshal(l)
	if err != nil {
		r.drop("write_error", err)
		return
	}
	b = append(b, '\n')
	if r.queued.Add(int64(len(b))) > maxQueued {
		r.queued.Add(-int64(len(b)))
		r.drop("queue_full", nil)
		return
	}
	select {
	case r.lines <- b:
	default:
		r.queued.Add(-int64(len(b)))
		r.drop("queue_full", nil)
	}
}

// drop counts a line not written, and logs it at most once a minute.
func (r *Recorder) drop(reason string, err error) {
	if r.dropped != nil {
		r.dropped.WithLabelValues(reason).Inc()
	}
	now := r.now().UnixNano()
	last := r.lastWarn.Load()
	if now-last < int64(time.Minute) || !r.lastWarn.CompareAndSwap(last, now) {
		return
	}
	if err != nil {
		r.log.Warn("capture: a request was not recorded", "reason", reason, "error", err.Error())
	} else {
		r.log.Warn("capture: a request was not recorded", "reason", reason)
	}
}

// write is the writer: it appends lines to the current file, starting a
// new one past the size bound and removing the oldest past the count.
func (r *Recorder) write(ctx context.Context) {
	defer func() {
		if r.file != nil {
			r.file.Close()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case b := <-r.lines:
			r.queued.Add(-int64(len(b)))
			c := r.conf.Load()
			if c == nil {
				continue // switched off: what waited is not written
			}
			if err := r.append(c, b); err != nil {
				if r.file != nil {
					r.file.Close()
					r.file = nil // try a new file next time
				}
				r.drop("write_error", err)
				continue
			}
			if r.written != nil {
				r.written.Inc()
			}
		}
	}
}

func (r *Recorder) append(c *Config, b []byte) error {
	if r.file != nil && (r.dir != c.Dir || r.size+int64(len(b)) > c.MaxFileBytes) {
		r.file.Close()
		r.file = nil
	}
	if r.file == nil {
		if err := os.MkdirAll(c.Dir, 0o750); err != nil {
			return err
		}
		name := filepath.Join(c.Dir, fmt.Sprintf("capture-%s.jsonl", r.now().UTC().Format("20060102T150405.000000000")))
		f, err := r.openFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o640)
		if err != nil {
			return err
		}
		r.file, r.size, r.dir = f, 0, c.Dir
		prune(c.Dir, c.MaxFiles)
	}
	n, err := r.file.Write(b)
	r.size += int64(n)
	if err != nil && n > 0 {
		// A part of the line is in the file: end it, so the next line
		// starts on its own (replay names the broken one).
		r.file.Write([]byte{'\n'})
	}
	return err
}

// prune removes the oldest capture files of dir beyond keep.
func prune(dir string, keep int) {
	names, err := filepath.Glob(filepath.Join(dir, "capture-*.jsonl"))
	if err != nil || len(names) <= keep {
		return
	}
	sort.Strings(names) // their names sort by time
	for _, n := range names[:len(names)-keep] {
		os.Remove(n)
	}
}

// Queued is the bytes waiting for the writer (tests).
func (r *Recorder) Queued() int64 { return r.queued.Load() }
