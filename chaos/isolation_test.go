package chaos_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidwall/gjson"
)

// isolationConfig: two traffic pools chosen by a model classifier, three
// keys. The classifier's model has a short context (2048 tokens) and
// max_input_chars is set past it, so that a long turn makes the
// classifier's own call fail for the request's sake. With defaults, no
// isolation knob is set (no key cap, no reserved classifier slot, the
// default breaker and connection cap).
func isolationConfig(a, b, c, cls string, defaults bool) string {
	server, hog, classifier := "\n  max_connections: 512", ", max_inflight: 6", "\n  breaker: {failures: 3, cooldown: 30s}\n  reserved_slots: 1"
	if defaults {
		server, hog, classifier = "", "", ""
	}
	return fmt.Sprintf(`version: 1
server:
  body_timeout: 1s
  read_header_timeout: 2s%s
  api_keys:
    - {name: victim, key_env: VICTIM_KEY}
    - {name: attacker, key_env: ATTACKER_KEY}
    - {name: hog, key_env: HOG_KEY%s}
pools:
  small:
    model: m
    balance: least_outstanding
    max_inflight: 4
    queue_timeout: 20s
    retries: 2
    outlier: {consecutive_5xx: 3}
    health: {interval: 200ms, timeout: 1s}
    replicas: [{name: a, url: "http://%s"}, {name: b, url: "http://%s"}]
  big:
    model: m
    max_inflight: 4
    queue_timeout: 20s
    outlier: {consecutive_5xx: 3}
    health: {interval: 200ms, timeout: 1s}
    replicas: [{name: c, url: "http://%s"}]
  cls:
    model: cls
    max_inflight: 2
    queue_timeout: 20s
    health: {interval: 200ms, timeout: 1s}
    replicas: [{name: cls, url: "http://%s"}]
classifier:
  kind: model
  pool: cls
  labels: [simple, complex]
  on_error: complex
  max_input_chars: 40000
  timeout: 2s
  cache: {size: 0}%s
models:
  - {name: auto, route: policy}
session: {implicit: false}
routes:
  - name: complex
    when: {class: complex}
    to: big
  - name: default
    to: small
`, server, hog, a, b, c, cls, classifier)
}

// victimKinds are the request shapes the victim sends, each in its API.
var victimKinds = []struct {
	name, path string
	stream     bool
	body       func(prompt string) string
	done       func(body string) bool
}{
	{"chat", "/v1/chat/completions", false, func(p string) string {
		return `{"model":"auto","messages":[{"role":"user","content":` + strconv.Quote(p) + `}]}`
	}, func(b string) bool { return gjson.Get(b, "choices.0.message").Exists() }},
	{"chat stream", "/v1/chat/completions", true, func(p string) string {
		return `{"model":"auto","stream":true,"messages":[{"role":"user","content":` + strconv.Quote(p) + `}]}`
	}, func(b string) bool {
		return strings.HasSuffix(b, "data: [DONE]\n\n") && !strings.Contains(b, `"error"`)
	}},
	{"responses", "/v1/responses", false, func(p string) string {
		return `{"model":"auto","input":` + strconv.Quote(p) + `}`
	}, func(b string) bool { return gjson.Get(b, "status").Str == "completed" }},
	{"responses stream", "/v1/responses", true, func(p string) string {
		return `{"model":"auto","stream":true,"input":` + strconv.Quote(p) + `}`
	}, func(b string) bool {
		return strings.Count(b, "event: response.completed") == 1 && !strings.Contains(b, "event: error")
	}},
	{"messages", "/v1/messages", false, func(p string) string {
		return `{"model":"auto","max_tokens":16,"messages":[{"role":"user","content":` + strconv.Quote(p) + `}]}`
	}, func(b string) bool { return gjson.Get(b, "type").Str == "message" }},
	{"messages stream", "/v1/messages", true, func(p string) string {
		return `{"model":"auto","max_tokens":16,"stream":true,"messages":[{"role":"user","content":` + strconv.Quote(p) + `}]}`
	}, func(b string) bool {
		return strings.Count(b, "event: message_stop") == 1 && !strings.Contains(b, "event: error")
	}},
}

// victimPrompts: the sim's classifier labels the first simple and the
// second complex, so the victim's traffic splits about evenly.
var victimPrompts = []string{"What is the capital of Portugal?", "Prove step by step that the algorithm terminates."}

// victimRun is what a victim phase saw.
type victimRun struct {
	lost      []string
	latencies []time.Duration
	big, all  int
	ids       []string
	reqs      []victimReq
}

// victimReq is one answered victim request.
type victimReq struct {
	kind, id, pool string
	latency        time.Duration
	i              int // its place in the run
}

// victimPaced sends n requests from w workers with the victim's key, on
// c, cycling through the kinds and prompts, at rate requests a second (0:
// as fast as they are answered); a request's latency counts from when it
// was due, so a stall delays the ones behind it too (no coordinated
// omission).
func victimPaced(c *http.Client, addr string, n, w int, rate float64) victimRun {
	var mu sync.Mutex
	var run victimRun
	type due struct {
		i  int
		at time.Time
	}
	next := make(chan due)
	go func() {
		begin := time.Now()
		for i := range n {
			at := time.Now()
			if rate > 0 {
				at = begin.Add(time.Duration(float64(i) / rate * float64(time.Second)))
				time.Sleep(time.Until(at))
			}
			next <- due{i, at}
		}
		close(next)
	}()
	var wg sync.WaitGroup
	for range w {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for d := range next {
				i := d.i
				k := victimKinds[i%len(victimKinds)]
				prompt := victimPrompts[(i/len(victimKinds))%2]
				req, _ := http.NewRequest("POST", "http://"+addr+k.path, strings.NewReader(k.body(prompt)))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer victim-key-0123456789")
				start := d.at
				resp, err := c.Do(req)
				var body []byte
				if err == nil {
					body, err = io.ReadAll(resp.Body)
					resp.Body.Close()
				}
				el := time.Since(start)
				mu.Lock()
				switch {
				case err != nil:
					run.lost = append(run.lost, fmt.Sprintf("%s: %v", k.name, err))
				case resp.StatusCode != 200 || !k.done(string(body)):
					run.lost = append(run.lost, fmt.Sprintf("%s: %d %.300s", k.name, resp.StatusCode, body))
				default:
					run.latencies = append(run.latencies, el)
					run.reqs = append(run.reqs, victimReq{kind: k.name, id: resp.Header.Get("X-Request-Id"), pool: resp.Header.Get("X-Switchyard-Pool"), latency: el, i: i})
					run.all++
					if resp.Header.Get("X-Switchyard-Pool") == "big" {
						run.big++
					}
					if k.name == "responses" {
						run.ids = append(run.ids, gjson.GetBytes(body, "id").Str)
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return run
}

func (r victimRun) p99() time.Duration {
	s := slices.Clone(r.latencies)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[min(len(s)-1, len(s)*99/100)]
}

func (r victimRun) median() time.Duration {
	s := slices.Clone(r.latencies)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

// slowest are the run's k slowest requests, slowest first.
func (r victimRun) slowest(k int) []victimReq {
	s := slices.Clone(r.reqs)
	slices.SortFunc(s, func(a, b victimReq) int { return int(b.latency - a.latency) })
	return s[:min(k, len(s))]
}

// accessLine is the gateway's access line for request id, as logged ("" if
// none).
func (p *proc) accessLine(id string) string {
	if id == "" {
		return ""
	}
	for line := range strings.Lines(p.logs.String()) {
		if strings.Contains(line, `"msg":"request"`) && strings.Contains(line, `"request_id":"`+id+`"`) {
			return strings.TrimSpace(line)
		}
	}
	return ""
}

func (r victimRun) bigShare() float64 { return float64(r.big) / float64(max(1, r.all)) }

// rss is the process's resident memory in bytes.
func (p *proc) rss(t testing.TB) int64 { return p.status(t, "VmRSS:") }

// cpu is the CPU time the process used so far (user and system).
func (p *proc) cpu(t testing.TB) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		t.Skipf("cannot read the gateway's CPU time: %v", err)
	}
	// The fields after the command's closing parenthesis: utime and
	// stime are the 12th and 13th, in clock ticks (100 a second).
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 13 {
		t.Skipf("short /proc/PID/stat: %q", b)
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+s) * 10 * time.Millisecond
}

// machineBusy is the machine's CPU time not idle so far, over all cores
// (from /proc/stat), or 0 when it cannot be read.
func machineBusy() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal
	var busy int64
	for i, v := range f[1:] {
		n, _ := strconv.ParseInt(v, 10, 64)
		if i != 3 && i != 4 && i < 8 {
			busy += n
		}
	}
	return time.Duration(busy) * 10 * time.Millisecond
}

// status reads one of /proc/PID/status's sizes (in kB there) in bytes.
func (p *proc) status(t testing.TB, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		t.Skipf("cannot read the gateway's memory: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == field {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	t.Skipf("no %s in /proc/PID/status", field)
	return 0
}

// attackCounts is what an attack sent (see attack), as the attacker
// process reports it.
type attackCounts struct {
	Hoarded, Breaker, Poison, Flood, ForeignIDs, ForeignFound, Idle, ClsHog, HogRefused, ClsHeavy int64
	// Defaults: the attack on a gateway with no isolation knob set.
	Defaults bool
}

func (a *attack) counts() attackCounts {
	return attackCounts{Hoarded: a.hoarded.Load(), Breaker: a.breaker.Load(), Poison: a.poison.Load(), Flood: a.flood.Load(),
		ForeignIDs: a.foreignIDs.Load(), ForeignFound: a.foreignFound.Load(), Idle: a.idle.Load(), ClsHog: a.clsHog.Load(),
		HogRefused: a.hogRefused.Load(), ClsHeavy: a.clsHeavy.Load(), Defaults: a.defaults}
}

// attackerEnv names, for the attacker process, the gateway's address; its
// presence makes the test binary an attacker (see TestMain).
// attackDefaultsEnv set: the attack on a gateway with default settings
// (see attack).
const attackerEnv, victimIDsEnv, attackDefaultsEnv = "SWITCHYARD_CHAOS_ATTACKER", "SWITCHYARD_CHAOS_VICTIM_IDS", "SWITCHYARD_CHAOS_DEFAULTS"

// attackStormEnv set: the held connections are reopened at once when the
// gateway closes them (see attack.storm).
const attackStormEnv = "SWITCHYARD_CHAOS_STORM"

// runAttacker is the test binary run as the attacker: it attacks addr
// until its stdin closes, then writes its counts to stdout as JSON.
func runAttacker(addr string) int {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	ids := strings.Split(os.Getenv(victimIDsEnv), ",")
	a := attack{defaults: os.Getenv(attackDefaultsEnv) != "", storm: os.Getenv(attackStormEnv) != ""}
	go func() {
		// "running" once every attack has run: the victim's phase starts
		// then, however slowly a loaded machine let the attack start.
		for ctx.Err() == nil && !a.counts().ran() {
			time.Sleep(20 * time.Millisecond)
		}
		fmt.Println("running")
	}()
	a.run(ctx, addr, func() []string { return ids })
	if err := json.NewEncoder(os.Stdout).Encode(a.counts()); err != nil {
		return 1
	}
	return 0
}

// ran reports whether every attack has run (the test's minimum counts).
func (c attackCounts) ran() bool {
	if c.Defaults {
		return c.Hoarded >= 200 && c.Breaker >= 8 && c.Poison >= 1 && c.Flood >= 16 && c.ForeignIDs >= 1 &&
			c.Idle >= 128 && c.ClsHog >= 16 && c.ClsHeavy >= 64
	}
	return c.Hoarded >= 150 && c.Breaker >= 8 && c.Poison >= 1 && c.Flood >= 48 && c.ForeignIDs >= 1 &&
		c.Idle >= 128 && c.ClsHog >= 16 && c.HogRefused >= 1
}

// startAttacker runs the attack from a process of its own, as a client on
// another machine would be: its goroutines do not share the victim
// client's scheduler. It returns once every attack has run; the returned
// func ends it and reports its counts.
func startAttacker(t testing.TB, addr string, victimIDs []string, defaults, storm bool) func() attackCounts {
	t.Helper()
	// At the lowest CPU priority: on one machine the attacker's own
	// work would otherwise take the CPU the victim's client and the
	// gateway need (measured: the machine 99% busy with the gateway at
	// under half a core); its connections and requests still reach the
	// gateway as fast as the gateway takes them. On a machine busy with
	// other work it starts slowly: the victim waits until it runs.
	cmd := exec.Command("nice", "-n", "19", os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), attackerEnv+"="+addr, victimIDsEnv+"="+strings.Join(victimIDs, ","))
	if defaults {
		cmd.Env = append(cmd.Env, attackDefaultsEnv+"=1")
	}
	if storm {
		cmd.Env = append(cmd.Env, attackStormEnv+"=1")
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	running := make(chan struct{})
	lines := make(chan string, 2)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == "running" {
				close(running)
				continue
			}
			lines <- sc.Text()
		}
		close(lines)
	}()
	stop := func() attackCounts {
		stdin.Close()
		var c attackCounts
		last := ""
		for l := range lines {
			last = l
		}
		if err := cmd.Wait(); err != nil {
			t.Errorf("the attacker process: %v", err)
		}
		if err := json.Unmarshal([]byte(last), &c); err != nil {
			t.Errorf("the attacker's counts %q: %v", last, err)
		}
		return c
	}
	select {
	case <-running:
	case <-time.After(5 * time.Minute):
		c := stop()
		t.Fatalf("the attack did not get going in 5 minutes: %+v", c)
	}
	return stop
}

// attack runs every attack of one key at once until ctx ends, and counts
// what it sent.
type attack struct {
	hoarded, breaker, poison, flood, foreignIDs, foreignFound atomic.Int64
	// idle: keep-alive connections left idle; clsHog: requests straight
	// to the classifier's pool; hogRefused: the hog key's requests
	// refused at its max_inflight; clsHeavy: requests whose long prompts
	// each need a classifier call of their own.
	idle, clsHog, hogRefused, clsHeavy atomic.Int64
	// defaults: against a gateway with no isolation knob set, the hog's
	// flood is 16 long streams on both pools (no key cap to refuse it),
	// 200 connections hold half-sent bodies and 2,000 sit idle, and 64
	// requests at a time need a classification each.
	defaults bool
	// storm: a held connection the gateway closes is reopened at once,
	// not 100 ms later. The gateway refuses each at once (401 before the
	// body), so the 200 become a reconnect storm whose own cost, in this
	// process and the kernel, saturates a 2-core machine shared with the
	// gateway and the victim.
	storm bool
}

func (a *attack) run(ctx context.Context, addr string, victimIDs func() []string) {
	var wg sync.WaitGroup
	// The attacker is another client than the victim (127.0.0.1), from
	// two machines: its raw connections (held and idle ones) come from
	// 127.0.0.2, its requests from 127.0.0.3, so that each attack reaches
	// the gateway instead of the per-address connection cap stopping the
	// requests behind the connections.
	dialer := &net.Dialer{Timeout: time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
	reqDialer := &net.Dialer{Timeout: time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.3")}}
	c := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64, DialContext: reqDialer.DialContext}}
	defer c.CloseIdleConnections()
	sendAs := func(key, path, body string) (int, []byte) {
		req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+addr+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := c.Do(req)
		if err != nil {
			return 0, nil
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	send := func(path, body string) (int, []byte) { return sendAs("attacker-key-0123456789", path, body) }
	loop := func(pause time.Duration, f func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				f()
				select {
				case <-ctx.Done():
				case <-time.After(pause):
				}
			}
		}()
	}
	// Connections that announce a body and never send it, no key needed:
	// 150 (200) held at a time, each replaced 100 ms after the gateway
	// closes it (at once with storm).
	hoard, idle := 150, 512
	if a.defaults {
		hoard, idle = 200, 2000
	}
	reopen := 100 * time.Millisecond
	if a.storm {
		reopen = 0
	}
	for range hoard {
		loop(reopen, func() {
			conn, err := dialer.Dial("tcp", addr)
			if err != nil {
				return
			}
			defer conn.Close()
			a.hoarded.Add(1)
			fmt.Fprintf(conn, "GET /v1/models HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n")
			_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
			_, _ = io.Copy(io.Discard, conn)
		})
	}
	// Breaker-tripping requests: tool names of 20 KB, and turns too long
	// for the classifier's model, in bursts of 8.
	var tools []string
	for i := range 3 {
		tools = append(tools, fmt.Sprintf(`{"type":"function","function":{"name":"t%d%s"}}`, i, strings.Repeat("x", 20<<10)))
	}
	longTurn := strings.Repeat("word ", 4000)
	loop(300*time.Millisecond, func() {
		var bw sync.WaitGroup
		for i := range 8 {
			bw.Add(1)
			go func() {
				defer bw.Done()
				a.breaker.Add(1)
				if i%2 == 0 {
					send("/v1/chat/completions", `{"model":"auto","max_tokens":4,"messages":[{"role":"user","content":"hi"}],"tools":[`+strings.Join(tools, ",")+`]}`)
				} else {
					send("/v1/chat/completions", `{"model":"auto","max_tokens":4,"messages":[{"role":"user","content":"`+longTurn+`"}]}`)
				}
			}()
		}
		bw.Wait()
	})
	// Poison requests: every replica answers them 500.
	loop(50*time.Millisecond, func() {
		a.poison.Add(1)
		send("/v1/chat/completions", `{"model":"auto","messages":[{"role":"user","content":"POISON-INPUT"}]}`)
	})
	if a.defaults {
		// Long streams on both pools from a key with no cap: 16 at a
		// time, 2,000 tokens each (5 s at the replicas' speed).
		for i := range 16 {
			prompt := victimPrompts[i%2]
			loop(0, func() {
				a.flood.Add(1)
				sendAs("hog-key-0123456789", "/v1/chat/completions", `{"model":"auto","stream":true,"max_tokens":2000,"messages":[{"role":"user","content":`+strconv.Quote(prompt)+`}]}`)
			})
		}
		// Classification for every request: 64 at a time, each a long
		// prompt of its own (no shared call, no cache).
		var n atomic.Int64
		for range 64 {
			loop(0, func() {
				a.clsHeavy.Add(1)
				prompt := fmt.Sprintf("%d %s", n.Add(1), strings.Repeat("ponder this ", 500))
				send("/v1/chat/completions", `{"model":"auto","max_tokens":4,"messages":[{"role":"user","content":`+strconv.Quote(prompt)+`}]}`)
			})
		}
	} else {
		// A queue flood and slot hog: 48 requests at a time on pools of
		// 4 slots a replica, from a key capped at 6 in flight.
		for range 48 {
			loop(0, func() {
				a.flood.Add(1)
				status, _ := sendAs("hog-key-0123456789", "/v1/chat/completions", `{"model":"auto","messages":[{"role":"user","content":"flood"}]}`)
				if status == http.StatusTooManyRequests {
					a.hogRefused.Add(1)
					time.Sleep(20 * time.Millisecond)
				}
			})
		}
	}
	// Idle keep-alive connections, as many as the listener's cap (2,000
	// with the default cap), each replaced when the gateway closes it.
	for range idle {
		loop(100*time.Millisecond, func() {
			conn, err := dialer.Dial("tcp", addr)
			if err != nil {
				return
			}
			defer conn.Close()
			fmt.Fprintf(conn, "GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer attacker-key-0123456789\r\n\r\n")
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			a.idle.Add(1)
			_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
			_, _ = io.Copy(io.Discard, br) // until the gateway closes it
		})
	}
	// The classifier's pool, taken straight by its model name: 16
	// requests at a time on 2 slots (one reserved for the classifier).
	for range 16 {
		loop(0, func() {
			a.clsHog.Add(1)
			send("/v1/chat/completions", `{"model":"cls","max_tokens":8,"messages":[{"role":"user","content":"hold the slot"}]}`)
		})
	}
	// The victim's stored responses, by their ids.
	loop(100*time.Millisecond, func() {
		for _, id := range victimIDs() {
			req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/v1/responses/"+id, nil)
			req.Header.Set("Authorization", "Bearer attacker-key-0123456789")
			resp, err := c.Do(req)
			if err != nil {
				continue
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			// Only a lookup the gateway answered counts: its connections
			// share one address's cap with the held ones, so some are
			// refused with 503 before any key is read.
			if resp.StatusCode == http.StatusServiceUnavailable {
				continue
			}
			a.foreignIDs.Add(1)
			if resp.StatusCode != http.StatusNotFound {
				a.foreignFound.Add(1)
			}
		}
	})
	wg.Wait()
}

// TestAdversarialTenant: one key runs every attack of the isolation issues
// at once (hoarded connections, idle keep-alive connections as many as the
// cap from one address, breaker-tripping and poison requests, a queue
// flood and slot hog from a key with max_inflight, the classifier's pool
// taken straight by its model name, the other key's stored-response ids)
// from a process of its own (as a client on another machine: its
// goroutines do not share the victim client's scheduler), while a second
// key sends a steady mixed load (chat, Responses, Messages, stream and not).
// Against the same load with no attack, the victim loses no request and
// keeps its pool split within 2 points, no replica is ejected, the
// breaker stays closed, no foreign id is found, and the gateway's memory
// stays bounded. Latencies are logged (a loaded 2-core machine's timing
// is no test); docs/benchmarks.md has measured figures.
func TestAdversarialTenant(t *testing.T) {
	gw, _, _ := adversarial(t, false, false)
	if v := gw.metric(t, "switchyard_connections_evicted_total"); v < 1 {
		t.Errorf("no idle connection was closed to make room: the idle flood did not fill the cap")
	}
}

// TestAdversarialTenantDefaults: the same on a gateway with no isolation
// knob set (no key cap, no reserved classifier slot, the default breaker
// and connection cap), and the attack of issue 42 at once: another key's
// 16 long streams on both pools, 64 requests at a time that each need a
// classification, 2,000 idle and 200 slow connections. The victim loses
// nothing and its split holds; its p99 against calm is logged here and
// bounded by BenchmarkAdversarialTenantDefaults (before issue 42: 603 ->
// 3,183 ms, 5.3x, its queue time held by the other key's long streams).
func TestAdversarialTenantDefaults(t *testing.T) {
	adversarial(t, true, false)
}

// BenchmarkAdversarialTenantDefaults reports the victim's p99 under the
// attack of TestAdversarialTenantDefaults against calm, measured in the
// same run (p99-ratio; issue 42 asks for at most 2): go test ./chaos/
// -run '^$' -bench AdversarialTenantDefaults/slow -benchtime 1x. storm
// is the same with the held connections reopened at once (see
// attack.storm): on one 2-core machine it measures the attacker's own
// CPU as much as the gateway.
func BenchmarkAdversarialTenantDefaults(b *testing.B) {
	for _, storm := range []bool{false, true} {
		name := "slow"
		if storm {
			name = "storm"
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				_, quiet, attacked := adversarial(b, true, storm)
				b.ReportMetric(float64(quiet.p99().Milliseconds()), "calm-p99-ms")
				b.ReportMetric(float64(attacked.p99().Milliseconds()), "attacked-p99-ms")
				b.ReportMetric(float64(attacked.p99())/float64(max(1, quiet.p99())), "p99-ratio")
			}
		})
	}
}

// adversarial runs the victim's load calm, then under the attack
// (defaults: on a gateway with no isolation knob set), checks what must
// hold whatever the timing, and returns the gateway and both runs.
func adversarial(t testing.TB, defaults, storm bool) (*proc, victimRun, victimRun) {
	a, b, c := sim(t, "--poison-text", "POISON-INPUT"), sim(t, "--poison-text", "POISON-INPUT"), sim(t, "--poison-text", "POISON-INPUT")
	cls := start(t, "sim", "--listen", "127.0.0.1:0", "--model", "cls", "--max-model-len", "2048", "--decode-tps", "400", "--max-tokens", "8")
	gw := startEnv(t, []string{"VICTIM_KEY=victim-key-0123456789", "ATTACKER_KEY=attacker-key-0123456789", "HOG_KEY=hog-key-0123456789"},
		isolationConfig(a.addr, b.addr, c.addr, cls.addr, defaults))
	const n = 240
	// The victim is one steady client: its keep-alive connections, opened
	// in the warm-up, carry both phases (a client that reconnected when
	// the attack began would measure the kernel's accept queue under a
	// connection flood, not the gateway). With caps set it sends from 4
	// workers as fast as it is answered; on default settings it is the
	// steady load of issue 42's reproduction, 20 requests a second (a
	// closed loop would measure its share of the slots shrinking from all
	// to a third, not isolation).
	workers, rate := 4, 0.0
	if defaults {
		workers, rate = 16, 20
	}
	vc := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: workers}}
	defer vc.CloseIdleConnections()
	load := func(n int) victimRun { return victimPaced(vc, gw.addr, n, workers, rate) }
	load(24) // warm-up
	cpu0, busy0, t0 := gw.cpu(t), machineBusy(), time.Now()
	quiet := load(n)
	cpu1, busy1, t1 := gw.cpu(t), machineBusy(), time.Now()
	if len(quiet.lost) != 0 {
		t.Fatalf("without an attack the victim lost %d requests; first: %s", len(quiet.lost), quiet.lost[0])
	}
	rssBefore := gw.rss(t)

	// The victim's load is steady: it goes on, unmeasured, while the
	// attack gets going (on a loaded machine that can take a while), and
	// what it sends then must not be lost either.
	bridge, endBridge := context.WithCancel(context.Background())
	bridged := make(chan []string, 1)
	go func() {
		var lost []string
		for bridge.Err() == nil {
			lost = append(lost, load(2*len(victimKinds)).lost...) // both prompts: both pools
		}
		bridged <- lost
	}()
	stop := startAttacker(t, gw.addr, quiet.ids, defaults, storm)
	endBridge()
	if lost := <-bridged; len(lost) != 0 {
		t.Errorf("while the attack started the victim lost %d requests; first: %s", len(lost), lost[0])
	}
	var peakRSS atomic.Int64
	watch := make(chan struct{})
	go func() {
		for {
			select {
			case <-watch:
				return
			case <-time.After(100 * time.Millisecond):
				if r := gw.rss(t); r > peakRSS.Load() {
					peakRSS.Store(r)
				}
			}
		}
	}()
	cpu2, busy2, t2 := gw.cpu(t), machineBusy(), time.Now()
	attacked := load(n)
	cpu3, busy3, t3 := gw.cpu(t), machineBusy(), time.Now()
	close(watch)
	atk := stop()

	t.Logf("attack: %d hoarded connections, %d breaker-tripping, %d poison, %d flood requests (%d refused at the key's max_inflight), %d foreign id lookups, %d idle keep-alive connections, %d requests to the classifier's pool, %d needing a classification each",
		atk.Hoarded, atk.Breaker, atk.Poison, atk.Flood, atk.HogRefused, atk.ForeignIDs, atk.Idle, atk.ClsHog, atk.ClsHeavy)
	t.Logf("connections: %v idle ones closed to make room, %v refused", gw.metric(t, "switchyard_connections_evicted_total"), gw.metric(t, "switchyard_connections_refused_total"))
	t.Logf("victim without attack: median %v p99 %v big share %.3f; under attack: median %v p99 %v (%.2fx) big share %.3f",
		quiet.median(), quiet.p99(), quiet.bigShare(), attacked.median(), attacked.p99(),
		float64(attacked.p99())/float64(max(1, quiet.p99())), attacked.bigShare())
	cores := func(d time.Duration, over time.Duration) float64 { return d.Seconds() / over.Seconds() }
	t.Logf("CPU in cores: the gateway %.2f calm, %.2f attacked; the machine %.2f calm, %.2f attacked",
		cores(cpu1-cpu0, t1.Sub(t0)), cores(cpu3-cpu2, t3.Sub(t2)), cores(busy1-busy0, t1.Sub(t0)), cores(busy3-busy2, t3.Sub(t2)))
	t.Logf("gateway RSS: %d MiB at rest, peak %d MiB under attack", rssBefore>>20, peakRSS.Load()>>20)
	for _, l := range strings.Split(gw.logs.String(), "\n") {
		if strings.Contains(l, "healthy") || strings.Contains(l, "eject") {
			t.Logf("gateway: %.300s", l)
		}
	}
	// Where the tail went: the gateway's own account of the slowest
	// victim requests (duration_ms against the client's latency, and of
	// it queue_ms and classify_ms).
	for _, r := range attacked.slowest(6) {
		line := gw.accessLine(r.id)
		t.Logf("slow victim request #%d: %v %s on %s: %s%s%s%s", r.i, r.latency, r.kind, r.pool,
			gjson.Get(line, "duration_ms").Raw+" ms in the gateway, ", gjson.Get(line, "queue_ms").Raw+" ms queued, ",
			gjson.Get(line, "classify_ms").Raw+" ms classifying, ttft ", gjson.Get(line, "ttft_ms").Raw)
	}
	if len(attacked.lost) != 0 {
		t.Errorf("under attack the victim lost %d of %d requests; first: %s", len(attacked.lost), n, attacked.lost[0])
	}
	if d := attacked.bigShare() - quiet.bigShare(); d > 0.02 || d < -0.02 {
		t.Errorf("the victim's share on the big pool moved from %.3f to %.3f", quiet.bigShare(), attacked.bigShare())
	}
	if !atk.ran() {
		t.Errorf("an attack did not run: %d hoarded, %d breaker, %d poison, %d flood (%d refused), %d ids, %d idle, %d classifier-pool",
			atk.Hoarded, atk.Breaker, atk.Poison, atk.Flood, atk.HogRefused, atk.ForeignIDs, atk.Idle, atk.ClsHog)
	}
	if f := atk.ForeignFound; f != 0 {
		t.Errorf("the attacker's key found %d of the victim's stored responses", f)
	}
	if v := gw.metric(t, "switchyard_replica_ejections_total"); v != 0 {
		t.Errorf("%v replica ejections", v)
	}
	if v := gw.metric(t, "switchyard_classifier_circuit_open"); v != 0 {
		t.Errorf("the classifier's breaker opened")
	}
	// Poison is recognised when two replicas of a pool answer it 500; on
	// default settings the attacker's own classifications may time out
	// (their fair share is bounded), sending its poison to the one-replica
	// pool, where it is not.
	if v := gw.metric(t, "switchyard_poison_requests_total"); v < 1 && !defaults {
		t.Errorf("no poison request was recognised")
	}
	if p := peakRSS.Load(); p > rssBefore+256<<20 {
		t.Errorf("gateway RSS grew from %d MiB to %d MiB", rssBefore>>20, p>>20)
	}
	return gw, quiet, attacked
}
