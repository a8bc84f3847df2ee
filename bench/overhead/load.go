package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// requestTimeout bounds every measured request, its body included.
const requestTimeout = 30 * time.Second

// maxOpenLoopInflight bounds the requests an open loop has outstanding.
// When it is reached the scheduler waits; the wait is still charged to the
// late requests, whose latency runs from their scheduled time.
const maxOpenLoopInflight = 4096

// newClient is the load client: keep-alive connections, enough idle ones
// per host that no request of a measurement has to dial, no compression,
// HTTP/1.1 (what clients of an OpenAI-compatible server mostly speak).
func newClient(timeout time.Duration) *http.Client {
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			Proxy:               nil, // loopback only, never via $HTTP_PROXY
			DialContext:         (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        0, // no total limit
			MaxIdleConnsPerHost: 4096,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true,
			ForceAttemptHTTP2:   false,
		},
	}
}

// arm is one side of an interleaved measurement.
type arm struct {
	name   string // direct, gateway or classifier
	url    string
	tmpl   bodyTemplate
	stream bool
}

// sample is one request's outcome. Times run from the request's scheduled
// send time (open loop) or its actual send time (closed loop).
type sample struct {
	lat  time.Duration // to the end of the response body
	ttft time.Duration // to the first content delta (streams)
	lag  time.Duration // how late the scheduler sent it (open loop)
	err  bool          // transport error, status other than 200, or an incomplete answer
}

// loader sends the requests of every measurement of a run.
type loader struct {
	client *http.Client
	// seq numbers requests across the whole run, so that a unique prompt
	// is never repeated against the same gateway.
	seq atomic.Uint64
}

func newLoader() *loader { return &loader{client: newClient(requestTimeout)} }

var (
	jsonContentType = []string{"application/json"}
	doneLine        = []byte("data: [DONE]")
	contentDelta    = []byte(`"delta":{"content":"`)
)

var readerPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4096) }}

// isContentDelta reports whether an SSE line carries a non-empty content
// delta (the role chunk's empty content does not count).
func isContentDelta(line []byte) bool {
	i := bytes.Index(line, contentDelta)
	return i >= 0 && i+len(contentDelta) < len(line) && line[i+len(contentDelta)] != '"'
}

// do sends one request of a and reads the whole answer.
func (l *loader) do(ctx context.Context, a *arm, from time.Time) sample {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.url, bytes.NewReader(a.tmpl.body(l.seq.Add(1))))
	if err != nil {
		return sample{err: true}
	}
	req.Header["Content-Type"] = jsonContentType
	resp, err := l.client.Do(req)
	if err != nil {
		return sample{lat: time.Since(from), err: true}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !a.stream {
		n, err := io.Copy(io.Discard, resp.Body)
		return sample{lat: time.Since(from), err: err != nil || n == 0 || resp.StatusCode != http.StatusOK}
	}
	var s sample
	br := readerPool.Get().(*bufio.Reader)
	br.Reset(resp.Body)
	defer func() {
		br.Reset(nil)
		readerPool.Put(br)
	}()
	sawDone := false
	for {
		line, err := br.ReadSlice('\n')
		if s.ttft == 0 && isContentDelta(line) {
			s.ttft = time.Since(from)
		}
		if bytes.HasPrefix(line, doneLine) {
			sawDone = true
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil {
			s.lat = time.Since(from)
			s.err = !errors.Is(err, io.EOF) || !sawDone || s.ttft == 0
			return s
		}
	}
}

// openLoop sends rate requests per second on a fixed schedule, for perArm
// on each arm. Time is cut into slices of about slice; the arms take turns
// slice by slice (direct, gateway, direct, …), so that drift in the machine
// affects every arm alike. Request i is due at t0 + i/rate whatever
// happened to earlier ones, and its latency runs from that due time, so a
// stall is charged to every request it delayed (no coordinated omission).
// The result holds each arm's samples, in arms order.
func (l *loader) openLoop(ctx context.Context, arms []*arm, rate int, perArm, slice time.Duration) ([][]sample, error) {
	if rate <= 0 {
		return nil, fmt.Errorf("rate %d: must be > 0", rate)
	}
	perSlice := max(1, int(float64(rate)*slice.Seconds()))
	slices := max(1, int(math.Round(perArm.Seconds()*float64(rate)/float64(perSlice))))
	total := perSlice * slices * len(arms)
	interval := float64(time.Second) / float64(rate)
	samples := make([]sample, total)
	sem := make(chan struct{}, maxOpenLoopInflight)
	var wg sync.WaitGroup
	restore := preciseTimer()
	defer restore()
	t0 := time.Now().Add(2 * time.Millisecond)
	sent := 0
	for i := range total {
		at := t0.Add(time.Duration(float64(i) * interval))
		sleepUntil(at)
		if ctx.Err() != nil {
			break
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		a := arms[(i/perSlice)%len(arms)]
		lag := time.Since(at)
		wg.Add(1)
		go func() {
			defer func() {
				<-sem
				wg.Done()
			}()
			s := l.do(ctx, a, at)
			s.lag = lag
			samples[i] = s
		}()
		sent++
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := make([][]sample, len(arms))
	for i := range sent {
		k := (i / perSlice) % len(arms)
		out[k] = append(out[k], samples[i])
	}
	return out, nil
}

// closedResult is what a closed loop measured on one arm.
type closedResult struct {
	samples []sample
	active  time.Duration // time the arm was driven, drain included
}

// closedLoop runs workers concurrent request loops, each sending its next
// request as soon as the previous answer is read, for perArm on each arm,
// in alternating slices. A slice ends when its last request has answered,
// so the arms never overlap.
func (l *loader) closedLoop(ctx context.Context, arms []*arm, workers int, perArm, slice time.Duration) ([]closedResult, error) {
	if workers <= 0 {
		return nil, fmt.Errorf("workers %d: must be > 0", workers)
	}
	slices := max(1, int(math.Round(perArm.Seconds()/slice.Seconds())))
	out := make([]closedResult, len(arms))
	for k := range slices * len(arms) {
		res := &out[k%len(arms)]
		a := arms[k%len(arms)]
		start := time.Now()
		end := start.Add(slice)
		var mu sync.Mutex
		var wg sync.WaitGroup
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var local []sample
				for ctx.Err() == nil && time.Now().Before(end) {
					local = append(local, l.do(ctx, a, time.Now()))
				}
				mu.Lock()
				res.samples = append(res.samples, local...)
				mu.Unlock()
			}()
		}
		wg.Wait()
		res.active += time.Since(start)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// holdStreams opens n streaming requests to url and returns once every one
// has received its first content delta, or fails after timeout. The
// streams stay open, read as they come, until release is called.
func holdStreams(ctx context.Context, url string, body []byte, n int, timeout time.Duration) (release func(), err error) {
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConnsPerHost: n,
		DisableCompression:  true,
	}
	client := &http.Client{Transport: tr}
	hctx, cancel := context.WithCancel(ctx)
	var ready, done sync.WaitGroup
	var failed atomic.Int64
	for range n {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			signalled := false
			signal := func() {
				if !signalled {
					signalled = true
					ready.Done()
				}
			}
			defer signal()
			req, err := http.NewRequestWithContext(hctx, http.MethodPost, url, bytes.NewReader(body))
			if err != nil {
				failed.Add(1)
				return
			}
			req.Header["Content-Type"] = jsonContentType
			resp, err := client.Do(req)
			if err != nil {
				failed.Add(1)
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				failed.Add(1)
				return
			}
			br := bufio.NewReader(resp.Body)
			for {
				line, err := br.ReadSlice('\n')
				if isContentDelta(line) {
					signal()
				}
				if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
					if !signalled {
						failed.Add(1)
					}
					return
				}
			}
		}()
	}
	release = func() {
		cancel()
		done.Wait()
		tr.CloseIdleConnections()
	}
	allReady := make(chan struct{})
	go func() {
		ready.Wait()
		close(allReady)
	}()
	select {
	case <-allReady:
	case <-time.After(timeout):
		release()
		return nil, fmt.Errorf("open streams: not all %d streams started within %s", n, timeout)
	}
	if f := failed.Load(); f > 0 {
		release()
		return nil, fmt.Errorf("open streams: %d of %d streams failed", f, n)
	}
	return release, nil
}
