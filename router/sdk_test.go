package router_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/vllmsim"
	"github.com/tidwall/gjson"
)

// sdkResult is one line of testdata/sdk/clients.mjs.
type sdkResult struct {
	SDK   string `json:"sdk"`
	OK    bool   `json:"ok"`
	Text  string `json:"text"`
	Error string `json:"error"`
}

// runSDKs runs the Node client SDKs of testdata/sdk against baseURL. It
// skips the test when Node or the SDKs are not installed (.ci/run installs
// them with npm ci).
func runSDKs(t *testing.T, baseURL string, stream bool) map[string]sdkResult {
	t.Helper()
	dir, err := filepath.Abs("../testdata/sdk")
	if err != nil {
		t.Fatal(err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed: run bash .ci/install (as root)")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules")); err != nil {
		t.Skip("the SDKs are not installed: run npm ci --prefix testdata/sdk (bash .ci/install does)")
	}
	args := []string{filepath.Join(dir, "clients.mjs"), baseURL}
	if stream {
		args = append(args, "stream")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, stderr.String())
	}
	res := map[string]sdkResult{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var r sdkResult
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("bad line %q: %v", sc.Text(), err)
		}
		res[r.SDK] = r
	}
	if len(res) != 4 {
		t.Fatalf("results %v; stderr %s", res, stderr.String())
	}
	return res
}

// TestSDKsSurfaceCutStreams: with the real OpenAI Node SDK, both Vercel AI
// SDK providers and LangChain, a stream the replica cuts raises an error
// carrying the gateway's message (not a silent truncation, not a generic
// "Failed to process successful response"); a healthy stream and a plain
// request succeed in each.
func TestSDKsSurfaceCutStreams(t *testing.T) {
	good := startReplica(t, fast("m"))
	gw := oneReplicaGateway(t, good.Srv.URL, "", "")
	for _, stream := range []bool{false, true} {
		for sdk, r := range runSDKs(t, gw.API.URL+"/v1", stream) {
			if !r.OK || r.Text == "" {
				t.Errorf("%s (stream %t) against a healthy replica: %+v", sdk, stream, r)
			}
		}
	}

	// With resume on, the same cut is invisible: each SDK sees one normal
	// completion with the whole answer.
	gw3, _, _ := resumeGateway(t, 5, "")
	want := uncut(t, `{"model":"auto","stream":true,"messages":[{"role":"user","content":"hello"}]}`)
	for sdk, r := range runSDKs(t, gw3.API.URL+"/v1", true) {
		if !r.OK || r.Text != want {
			t.Errorf("%s on a resumed stream: %+v; want the whole answer %q", sdk, r, want)
		}
	}
	// round_robin also advances on each continuation's replica, so every
	// SDK's request starts on the replica that cuts: all four resumed.
	if got := gw3.MetricValue(t, "switchyard_stream_resumes_total", map[string]string{"result": "resumed"}); got != 4 {
		t.Errorf("%v streams resumed, want all 4", got)
	}

	cut := startReplica(t, fast("m"))
	cut.Sim.SetFaults(vllmsim.Faults{CutAfterChunks: 3})
	gw2 := oneReplicaGateway(t, cut.Srv.URL, "", "")
	for sdk, r := range runSDKs(t, gw2.API.URL+"/v1", true) {
		if r.OK || !strings.Contains(r.Error, "stream was interrupted") {
			t.Errorf("%s on a cut stream: %+v; want an error with the gateway's message", sdk, r)
		}
	}
}

// TestOpenAIAgentsSDK: the OpenAI Agents SDK (JS), pointed at the gateway,
// completes a task over the Responses API: the model calls a tool, the
// SDK runs it and sends the result back, and the model answers; plain and
// streaming.
func TestOpenAIAgentsSDK(t *testing.T) {
	node, dir := agentsSDK(t)
	e := startAgents(t, 1)
	for _, mode := range []string{"plain", "stream"} {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		out, err := exec.CommandContext(ctx, node, filepath.Join(dir, "agents.mjs"), e.gws[0].API.URL+"/v1", mode).Output()
		cancel()
		if err != nil {
			t.Fatalf("%s: node: %v", mode, err)
		}
		var r struct {
			OK    bool     `json:"ok"`
			Items []string `json:"items"`
			Text  string   `json:"text"`
			Error string   `json:"error"`
		}
		if err := json.Unmarshal(bytes.TrimSpace(out), &r); err != nil {
			t.Fatalf("%s: %q: %v", mode, out, err)
		}
		if !r.OK || strings.Join(r.Items, ",") != "tool_call_item,tool_call_output_item,message_output_item" || r.Text == "" {
			t.Errorf("%s: %+v, want a tool call, its output and an answer", mode, r)
		}
	}
}

// TestOpenAIAgentsSDKResume: the OpenAI Agents SDK (JS) streams a tool
// task over the Responses API while both replicas cut every stream after
// 20 events: the tool call's turn is shorter and completes, the answer's
// turn is cut and resumed on the other replica, and the SDK finishes the
// run with the whole answer and no error.
func TestOpenAIAgentsSDKResume(t *testing.T) {
	node, dir := agentsSDK(t)
	prof := vllmsim.Profile{Model: "m", DefaultMaxTokens: 30}
	a, b := startReplica(t, prof), startReplica(t, prof)
	for _, r := range []*replica{a, b} {
		r.Sim.SetFaults(vllmsim.Faults{CutAfterChunks: 20})
	}
	gw := startGateway(t, resumeConfig(t, a.Srv.URL, b.Srv.URL, ""))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, node, filepath.Join(dir, "agents.mjs"), gw.API.URL+"/v1", "stream").Output()
	if err != nil {
		t.Fatalf("node: %v", err)
	}
	var r struct {
		OK    bool     `json:"ok"`
		Items []string `json:"items"`
		Text  string   `json:"text"`
		Error string   `json:"error"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(out), &r); err != nil {
		t.Fatalf("%q: %v", out, err)
	}
	if !r.OK || strings.Join(r.Items, ",") != "tool_call_item,tool_call_output_item,message_output_item" {
		t.Fatalf("%+v, want a tool call, its output and an answer", r)
	}
	// The answer's turn, asked again of a replica that does not cut, is
	// the text the SDK got.
	var turn []byte
	for _, rep := range []*replica{a, b} {
		for _, body := range rep.Bodies() {
			if gjson.GetBytes(body, `input.#(type=="function_call_output")`).Exists() {
				turn = body
			}
		}
	}
	if turn == nil {
		t.Fatal("no replica got the answer's turn")
	}
	ref := startReplica(t, prof)
	resp, err := http.Post(ref.Srv.URL+"/v1/responses", "application/json", strings.NewReader(strings.Replace(string(turn), `"stream":true`, `"stream":false`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	full, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := gjson.GetBytes(full, `output.#(type=="message").content.0.text`).Str; r.Text != want || want == "" {
		t.Errorf("the SDK's answer %q\nwant the uncut answer %q", r.Text, want)
	}
	if got := gw.MetricValue(t, "switchyard_stream_resumes_total", map[string]string{"result": "resumed"}); got != 1 {
		t.Errorf("%v streams resumed, want the answer's", got)
	}
}

// agentsSDK is node and testdata/sdk with the OpenAI Agents SDK installed,
// or skips the test saying what is missing.
func agentsSDK(t *testing.T) (node, dir string) {
	t.Helper()
	dir, err := filepath.Abs("../testdata/sdk")
	if err != nil {
		t.Fatal(err)
	}
	if node, err = exec.LookPath("node"); err != nil {
		t.Skip("node is not installed: run bash .ci/install (as root)")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@openai", "agents")); err != nil {
		t.Skip("the SDKs are not installed: run npm ci --prefix testdata/sdk (bash .ci/install does)")
	}
	return node, dir
}
