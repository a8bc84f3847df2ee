package chaos_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/switchyard/switchyard/internal/polltest"
)

func threeReplicaConfig(a, b, c string, extra string) string {
	return fmt.Sprintf(`version: 1
server: {shutdown_grace: 10s, body_timeout: 1s, write_timeout: 1s, read_header_timeout: 1s}
pools:
  p:
    model: m
    balance: least_outstanding
    retries: 2
    health: {interval: 100ms, timeout: 1s, unhealthy_after: 2, healthy_after: 1}
%s    replicas: [{name: a, url: "http://%s"}, {name: b, url: "http://%s"}, {name: c, url: "http://%s"}]
routes:
  - name: default
    to: p
`, extra, a, b, c)
}

// TestKillReplicaUnderLoad: kill -9 one of three replicas in the middle of
// mixed stream and plain load. Expected: every plain request completes
// (retried on another replica before any byte reached the client); a
// stream completes or, if it was running on the killed replica, ends with
// an error event; none is lost.
func TestKillReplicaUnderLoad(t *testing.T) {
	a, b, c := sim(t), sim(t), sim(t)
	gw, _ := gateway(t, threeReplicaConfig(a.addr, b.addr, c.addr, ""))
	base := gw.baseline(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	done := make(chan [4]int, 1)
	var firstLost string
	go func() {
		counts, fl := load(ctx, gw.addr, "auto", 400, 8)
		firstLost = fl
		done <- counts
	}()
	time.Sleep(300 * time.Millisecond)
	_ = b.cmd.Process.Kill() // SIGKILL
	counts := <-done
	t.Logf("outcomes: %v", counts)
	if counts[lost] != 0 {
		t.Errorf("%d requests lost; first: %s", counts[lost], firstLost)
	}
	if counts[errorCode] != 0 {
		t.Errorf("%d requests got an error status", counts[errorCode])
	}
	if counts[complete] < 350 {
		t.Errorf("only %d of 400 completed", counts[complete])
	}
	gw.settles(t, base)
}

// TestReloadStormBySIGHUP: the config file alternates between two pool
// layouts with max_inflight while SIGHUPs arrive every few milliseconds
// under load. Expected: every request completes.
func TestReloadStormBySIGHUP(t *testing.T) {
	a, b, c := sim(t), sim(t), sim(t)
	gw, path := gateway(t, threeReplicaConfig(a.addr, b.addr, c.addr, "    max_inflight: 2\n    queue_timeout: 20s\n"))
	base := gw.baseline(t)
	layouts := []string{
		threeReplicaConfig(a.addr, b.addr, c.addr, "    max_inflight: 2\n    queue_timeout: 20s\n"),
		strings.Replace(threeReplicaConfig(a.addr, b.addr, c.addr, "    max_inflight: 1\n    queue_timeout: 30s\n"), `, {name: c, url: "http://`+c.addr+`"}`, "", 1),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	done := make(chan [4]int, 1)
	var firstLost string
	go func() {
		counts, fl := load(ctx, gw.addr, "auto", 300, 8)
		firstLost = fl
		done <- counts
	}()
	var counts [4]int
	for i := 0; ; i++ {
		select {
		case counts = <-done:
		default:
			if err := os.WriteFile(path, []byte(layouts[i%2]), 0o644); err != nil {
				t.Fatal(err)
			}
			signal(t, gw, syscall.SIGHUP)
			time.Sleep(15 * time.Millisecond)
			continue
		}
		break
	}
	t.Logf("outcomes: %v, generation %v", counts, gw.metric(t, "switchyard_config_generation"))
	if counts[complete] != 300 {
		t.Errorf("outcomes %v, want all 300 complete; first lost: %s", counts, firstLost)
	}
	if gen := gw.metric(t, "switchyard_config_generation"); gen < 10 {
		t.Errorf("only %v reloads happened", gen)
	}
	gw.settles(t, base)
}

// TestSlowAndVanishingClients: slowloris headers, slow bodies, clients
// that never read and clients that vanish mid-stream. Expected: each is
// cut off by its timeout, the replica's slots are freed, and the gateway
// serves normally throughout and afterwards.
func TestSlowAndVanishingClients(t *testing.T) {
	// Replicas that generate as fast as they can, so that a client that
	// does not read fills the socket buffers at once.
	a, b, c := sim(t, "--decode-tps", "0"), sim(t, "--decode-tps", "0"), sim(t, "--decode-tps", "0")
	gw, _ := gateway(t, threeReplicaConfig(a.addr, b.addr, c.addr, ""))
	base := gw.baseline(t)
	dial := func() net.Conn {
		conn, err := net.Dial("tcp", gw.addr)
		if err != nil {
			t.Fatal(err)
		}
		return conn
	}
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	// 50 slowloris connections: half a header line, then nothing.
	for range 50 {
		conn := dial()
		fmt.Fprint(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ")
		conns = append(conns, conn)
	}
	// 50 slow bodies: headers, then a trickle that never finishes.
	for range 50 {
		conn := dial()
		fmt.Fprint(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"model\"")
		conns = append(conns, conn)
	}
	// 20 clients that start a long stream and never read it.
	req := `{"model":"auto","stream":true,"max_tokens":100000,"messages":[{"role":"user","content":"tell me everything"}]}`
	for range 20 {
		conn := dial()
		fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(req), req)
		conns = append(conns, conn)
	}
	// 100 clients that start a stream and vanish.
	// Their streams are long, so a stream cut by its client leaves an
	// upstream connection that cannot be reused: it is closed, and the
	// gateway's idle pool holds no more connections than at the baseline.
	vanish := req
	var wg sync.WaitGroup
	for range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := net.Dial("tcp", gw.addr)
			if err != nil {
				return
			}
			fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(vanish), vanish)
			r := bufio.NewReader(conn)
			_, _ = r.ReadString('\n')
			conn.Close()
		}()
	}
	wg.Wait()
	// Meanwhile normal clients are served.
	counts, firstLost := load(context.Background(), gw.addr, "auto", 40, 4)
	if counts[complete] != 40 {
		t.Errorf("normal clients during the abuse: %v; first lost: %s", counts, firstLost)
	}
	// Slow headers are closed, slow bodies answered 408 and closed, once
	// their timeouts pass.
	var slowWG sync.WaitGroup
	var slowMu sync.Mutex
	bad := 0
	for i, conn := range conns[:100] {
		slowWG.Add(1)
		go func() {
			defer slowWG.Done()
			_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			got, err := io.ReadAll(conn)
			if err != nil || i >= 50 && !strings.Contains(string(got), " 408 ") || i < 50 && len(got) > 0 {
				slowMu.Lock()
				bad++
				if bad == 1 {
					t.Errorf("slow client %d: %v %q", i, err, got)
				}
				slowMu.Unlock()
			}
		}()
	}
	slowWG.Wait()
	polltest.Eventually(t, 20*time.Second, "every slot to be free", func() bool { return gw.metric(t, "switchyard_replica_inflight") == 0 })
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	gw.settles(t, base)
}

// misbehaving is a replica that does one wrong thing, named by the model
// it is asked for.
func misbehaving(t *testing.T) *httptest.Server {
	t.Helper()
	chunk := `data: {"choices":[{"index":0,"delta":{"content":"a"}}]}` + "\n\n"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			return // health probes
		}
		body, _ := io.ReadAll(r.Body)
		kind := ""
		for _, k := range []string{"garbage", "partial", "hugeline", "endless", "noheaders", "reset", "busy"} {
			if strings.Contains(string(body), `"`+k+`"`) {
				kind = k
			}
		}
		rc := http.NewResponseController(w)
		w.Header().Set("Content-Type", "text/event-stream")
		switch kind {
		case "garbage":
			_, _ = w.Write([]byte("\x00\xffnot an event stream at all"))
		case "partial":
			_, _ = io.WriteString(w, chunk+`data: {"choices":[{"ind`)
			_ = rc.Flush()
			panic(http.ErrAbortHandler)
		case "hugeline":
			_, _ = io.WriteString(w, `data: {"choices":[{"index":0,"delta":{"content":"`+strings.Repeat("x", 6<<20)+`"}}]}`+"\n\ndata: [DONE]\n\n")
		case "endless":
			for r.Context().Err() == nil {
				_, _ = io.WriteString(w, chunk)
				_ = rc.Flush()
				time.Sleep(10 * time.Millisecond)
			}
		case "noheaders":
			<-r.Context().Done()
		case "reset":
			_ = rc.Flush()
			conn, _, err := rc.Hijack()
			if err == nil {
				if tc, ok := conn.(*net.TCPConn); ok {
					_ = tc.SetLinger(0) // RST, not FIN
				}
				conn.Close()
			}
		case "busy":
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = io.WriteString(w, `{"error":{"message":"busy"}}`)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestMisbehavingReplicas: each wrong answer a replica can give ends in an
// explicit outcome for the client, never a hang, a silent truncation or a
// leak.
func TestMisbehavingReplicas(t *testing.T) {
	up := misbehaving(t)
	var pools strings.Builder
	kinds := []string{"garbage", "partial", "hugeline", "endless", "noheaders", "reset", "busy"}
	for _, k := range kinds {
		// The timeouts a kind is about are short, so its test ends soon; the
		// others are long, the slack a loaded machine gets to relay an answer
		// that does come (a 500 ms header timeout once turned a slow but
		// good answer into a 504).
		header, stream := "10s", "30s"
		switch k {
		case "noheaders":
			header = "500ms"
		case "endless":
			stream = "1s"
		}
		fmt.Fprintf(&pools, "  %s: {model: %s, retries: 0, response_header_timeout: %s, max_stream_duration: %s, health: {disabled: true}, replicas: [{name: r, url: %q}]}\n", k, k, header, stream, up.URL)
	}
	good := sim(t)
	fmt.Fprintf(&pools, "  good: {model: m, health: {disabled: true}, replicas: [{name: g, url: %q}]}\n", "http://"+good.addr)
	gw, _ := gateway(t, "version: 1\npools:\n"+pools.String()+"routes:\n  - name: default\n    to: good\n")
	base := gw.baseline(t)
	c := &http.Client{Timeout: 30 * time.Second}
	for _, tc := range []struct {
		kind   string
		stream bool
		want   outcome
		detail string
	}{
		{"garbage", true, errorEvent, "stream_interrupted"},
		{"partial", true, errorEvent, "stream_interrupted"},
		{"hugeline", true, complete, ""},
		{"endless", true, errorEvent, "max_stream_duration"},
		{"noheaders", false, errorCode, "504"},
		{"noheaders", true, errorCode, "504"},
		{"reset", true, errorEvent, "connection reset"},
		{"busy", false, errorCode, "429"},
	} {
		t.Run(fmt.Sprintf("%s stream=%t", tc.kind, tc.stream), func(t *testing.T) {
			got, why := call(context.Background(), c, gw.addr, tc.kind, tc.stream)
			if got != tc.want || !strings.Contains(why, tc.detail) {
				t.Errorf("got %s (%.300s), want %s with %q", outcomeNames[got], why, outcomeNames[tc.want], tc.detail)
			}
		})
	}
	// Retry-After passes through.
	resp, err := c.Post("http://"+gw.addr+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"busy","messages":[{"role":"user","content":"x"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Header.Get("Retry-After") != "7" {
		t.Errorf("Retry-After %q, want the replica's 7", resp.Header.Get("Retry-After"))
	}
	gw.settles(t, base)
}

// TestDrainWithOpenStreams: SIGTERM with streams open: the gateway keeps
// serving them to their end within the grace, then exits 0.
func TestDrainWithOpenStreams(t *testing.T) {
	// Streams of 4 s (80 tokens at 20 a second): all six must be open at
	// once, and a loaded machine may start them a second or more apart.
	a, b, c := sim(t, "--decode-tps", "20", "--max-tokens", "80"), sim(t, "--decode-tps", "20", "--max-tokens", "80"), sim(t, "--decode-tps", "20", "--max-tokens", "80")
	gw, _ := gateway(t, threeReplicaConfig(a.addr, b.addr, c.addr, ""))
	hc := &http.Client{Timeout: 30 * time.Second}
	results := make(chan outcome, 6)
	for range 6 {
		go func() {
			o, _ := call(context.Background(), hc, gw.addr, "auto", true)
			results <- o
		}()
	}
	polltest.Eventually(t, 10*time.Second, "the streams to be running", func() bool { return gw.metric(t, "switchyard_replica_inflight") == 6 })
	signal(t, gw, syscall.SIGTERM)
	for range 6 {
		if o := <-results; o != complete {
			t.Errorf("a stream open at SIGTERM ended as %s", outcomeNames[o])
		}
	}
	select {
	case <-gw.done:
		if code := gw.cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("exit code %d: %s", code, gw.logs.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the gateway did not exit after draining")
	}
}

// TestKillReplicaMidStreamResumes: with resume on, kill -9 a replica while
// streams of the three APIs run on it: every client stream completes in
// its own API (chat's [DONE]; one response.completed with sequence numbers
// without a gap; one message_stop), and its text is the whole answer (the
// prefix the dead replica sent plus the continuation of another), under
// one id throughout.
func TestKillReplicaMidStreamResumes(t *testing.T) {
	type api struct{ path, body string }
	apis := []api{
		{"/v1/chat/completions", `{"model":"auto","stream":true,"messages":[{"role":"user","content":"hello there"}]}`},
		{"/v1/responses", `{"model":"auto","stream":true,"input":"hello there"}`},
		{"/v1/messages", `{"model":"auto","stream":true,"max_tokens":150,"messages":[{"role":"user","content":"hello there"}]}`},
	}
	type res struct {
		text string
		ids  map[string]bool
		done bool
		err  error
	}
	read := func(gw *proc, x api) (r res) {
		resp, err := (&http.Client{Timeout: 30 * time.Second}).Post("http://"+gw.addr+x.path, "application/json", strings.NewReader(x.body))
		if err != nil {
			return res{err: err}
		}
		defer resp.Body.Close()
		r.ids = map[string]bool{}
		var sb strings.Builder
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		seq, terminals := int64(-1), 0
		for sc.Scan() {
			d, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			ev := gjson.Parse(d)
			switch typ := ev.Get("type").Str; {
			case d == "[DONE]":
				r.done = true
			case ev.Get("error").Exists() || typ == "error":
				r.err = fmt.Errorf("%s: error event: %s", x.path, d)
				return r
			case x.path == "/v1/chat/completions":
				r.ids[ev.Get("id").Str] = true
				sb.WriteString(ev.Get("choices.0.delta.content").Str)
			case x.path == "/v1/responses":
				if n := ev.Get("sequence_number").Int(); n != seq+1 {
					r.err = fmt.Errorf("responses: sequence_number %d after %d", n, seq)
				}
				seq = ev.Get("sequence_number").Int()
				if id := ev.Get("response.id"); id.Exists() {
					r.ids[id.Str] = true
				}
				switch typ {
				case "response.output_text.delta":
					sb.WriteString(ev.Get("delta").Str)
				case "response.completed":
					terminals++
					r.done = terminals == 1 && ev.Get("response.output.0.content.0.text").Str == sb.String()
				}
			default:
				switch typ {
				case "message_start":
					r.ids[ev.Get("message.id").Str] = true
				case "content_block_delta":
					sb.WriteString(ev.Get("delta.text").Str)
				case "message_stop":
					terminals++
					r.done = terminals == 1
				}
			}
		}
		r.text = sb.String()
		if r.err == nil {
			r.err = sc.Err()
		}
		return r
	}
	for _, x := range apis {
		t.Run(x.path, func(t *testing.T) {
			// Streams of 3 s (150 tokens at 50 a second): all nine must be
			// open at once and still running at the kill, and a loaded
			// machine may start them a second or more apart (at 0.3 s a
			// stream, the first could end before the last began).
			slow := []string{"--decode-tps", "50", "--max-tokens", "150"}
			a, b, c := sim(t, slow...), sim(t, slow...), sim(t, slow...)
			gw, _ := gateway(t, threeReplicaConfig(a.addr, b.addr, c.addr, "    resume: {enabled: true}\n"))
			want := read(gw, x)
			if want.err != nil || !want.done {
				t.Fatalf("before the kill: %+v", want)
			}
			const n = 9
			results := make(chan res, n)
			for range n {
				go func() { results <- read(gw, x) }()
			}
			polltest.Eventually(t, 10*time.Second, "streams to run on every replica", func() bool { return gw.metric(t, "switchyard_replica_inflight") >= n })
			time.Sleep(100 * time.Millisecond) // a few tokens into each stream
			_ = b.cmd.Process.Kill()
			for range n {
				r := <-results
				if r.err != nil || !r.done || r.text != want.text || len(r.ids) != 1 {
					t.Errorf("done %t, %d ids, err %v\n got %q\nwant %q", r.done, len(r.ids), r.err, r.text, want.text)
				}
			}
			if got := gw.metric(t, "switchyard_stream_resumes_total"); got < 1 {
				t.Errorf("no stream was resumed (%v); the kill came too late to test anything", got)
			}
		})
	}
}
