package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/polltest"
)

// TestSimScenario: --scenario scripts the simulator's turns; a bad file is
// a usage error naming its place.
func TestSimScenario(t *testing.T) {
	code, _, errs := runCLI(t, "sim", "--model", "m", "--scenario", "../../vllmsim/testdata/scenarios/invalid.bad.yaml")
	if code != exitUsage || !strings.Contains(errs, "invalid.bad.yaml:3:5: turns[0]: has both text and calls") {
		t.Errorf("bad scenario: exit %d, stderr %s", code, errs)
	}
	if code, _, errs := runCLI(t, "sim", "--model", "m", "--scenario", "/nonexistent/scenario.yaml"); code != exitUsage || !strings.Contains(errs, "read scenario") {
		t.Errorf("missing scenario: exit %d, stderr %s", code, errs)
	}

	ctx, cancel := context.WithCancel(context.Background())
	var stderr syncWriter
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"sim", "--model", "m", "--listen", "127.0.0.1:0", "--scenario", "../../examples/scenarios/write-a-file.yaml"}, io.Discard, &stderr)
	}()
	defer func() {
		cancel()
		if code := <-done; code != exitOK {
			t.Errorf("sim exited %d: %s", code, stderr.String())
		}
	}()
	var addr string
	polltest.Eventually(t, 10*time.Second, "the sim to start", func() bool {
		var line struct{ Listen string }
		_ = json.Unmarshal([]byte(strings.SplitN(stderr.String(), "\n", 2)[0]), &line)
		addr = line.Listen
		return addr != ""
	}, stderr.String)
	resp, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"messages":[{"role":"user","content":"summarize the notes"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var answer struct {
		Choices []struct {
			Message struct {
				ToolCalls []struct {
					Function struct{ Name, Arguments string }
				} `json:"tool_calls"`
			}
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil || len(answer.Choices) != 1 || len(answer.Choices[0].Message.ToolCalls) != 1 ||
		answer.Choices[0].Message.ToolCalls[0].Function.Name != "Read" ||
		answer.Choices[0].Message.ToolCalls[0].Function.Arguments != `{"file_path":"/tmp/switchyard-demo/notes.txt"}` {
		t.Errorf("turn 1: %+v (%v), want the scenario's Read call", answer, err)
	}
}
