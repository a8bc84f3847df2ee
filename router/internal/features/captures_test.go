package features

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/switchyard/switchyard/classifier"
	"github.com/switchyard/switchyard/router/internal/wire"
	"github.com/switchyard/switchyard/vllmsim"
)

const sessionsDir = "../../../testdata/agents/sessions"

// captured is one request of a captured session.
type captured struct {
	Path    string            `json:"path"`
	Headers map[string]string `json:"headers"`
	Body    json.RawMessage   `json:"body"`
}

func endpointOf(path string) wire.Endpoint {
	switch path {
	case "/v1/messages":
		return wire.Messages
	case "/v1/responses":
		return wire.Responses
	}
	return wire.Chat
}

// readCaptures reads a capture file: one request a line.
func readCaptures(t testing.TB, file string) []captured {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []captured
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var c captured
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatalf("%s:%d: %v", file, len(out)+1, err)
		}
		out = append(out, c)
	}
	return out
}

func readTurn(t testing.TB, c captured, limit int) Turn {
	t.Helper()
	info, err := wire.Parse(c.Body, endpointOf(c.Path), 64)
	if err != nil {
		t.Fatal(err)
	}
	return Read(info, limit)
}

// TestCapturedSessionKeys: the implicit session key survives the agents'
// own edits of their opening: Qwen Code -c resends its first message
// without the date reminder (and with a new folder listing), pi over the
// Messages API moves cache_control to the newest block. Every request of
// each capture but a side request keeps one key.
func TestCapturedSessionKeys(t *testing.T) {
	for _, tc := range []struct {
		file string
		side map[int]bool // lines (from 1) of side requests: their own key
	}{
		{"trajectories/qwen-code-continue.jsonl", nil},
		{"trajectories/pi-messages.jsonl", nil},
		{"trajectories/pi-continue.jsonl", nil},
		{"trajectories/pi-long.jsonl", nil},
		{"trajectories/claude-code-continue.jsonl", nil},
		{"trajectories/qwen-code-debug.jsonl", nil},
		{"trajectories/cline-debug.jsonl", nil},
		{"qwen-code.jsonl", nil},
		{"pi.jsonl", nil},
		{"cline.jsonl", nil},
	} {
		t.Run(tc.file, func(t *testing.T) {
			reqs := readCaptures(t, filepath.Join(sessionsDir, tc.file))
			var first [16]byte
			for i, c := range reqs {
				if tc.side[i+1] {
					continue
				}
				k := readTurn(t, c, 4000).OpeningKey()
				if i == 0 {
					first = k
				} else if k != first {
					t.Errorf("line %d opens another session", i+1)
				}
			}
		})
	}
}

// labelledTurn is one line of testdata/agents/turns.jsonl.
type labelledTurn struct {
	File   string `json:"file"`
	Line   int    `json:"line"`
	Agent  string `json:"agent"`
	Label  string `json:"label"`
	Side   bool   `json:"side"`
	Reason string `json:"reason"`
}

// TestSimulatorAgreesWithLabels: the simulator's classifier
// (vllmsim.DefaultChooser), reading what the gateway sends it of each
// hand-labelled agent turn (testdata/agents/turns.jsonl: the labels were
// written from the requests, not from the chooser), agrees with the
// labels on at least 90% of the turns and catches at least 80% of the
// complex ones.
func TestSimulatorAgreesWithLabels(t *testing.T) {
	data, err := os.ReadFile("../../../testdata/agents/turns.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]captured{}
	agree, total, complexTotal, complexCaught := 0, 0, 0, 0
	var misses []string
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var lt labelledTurn
		if err := json.Unmarshal([]byte(line), &lt); err != nil {
			t.Fatal(err)
		}
		reqs, ok := files[lt.File]
		if !ok {
			reqs = readCaptures(t, findCapture(t, lt.File))
			files[lt.File] = reqs
		}
		in := readTurn(t, reqs[lt.Line-1], 4000).Input
		label, _ := vllmsim.DefaultChooser(vllmsim.ChoiceRequest{
			Choices:  []string{"simple", "complex"},
			Messages: []vllmsim.Message{{Role: "system", Content: "classify"}, {Role: "user", Content: classifier.Summary(in, 4000)}},
		})
		total++
		if label == lt.Label {
			agree++
		} else {
			misses = append(misses, lt.File+":"+itoa(lt.Line)+" labelled "+lt.Label+" ("+lt.Reason+")")
		}
		if lt.Label == "complex" {
			complexTotal++
			if label == "complex" {
				complexCaught++
			}
		}
	}
	t.Logf("agreement %d of %d; complex caught %d of %d", agree, total, complexCaught, complexTotal)
	for _, m := range misses {
		t.Logf("miss: %s", m)
	}
	if total < 60 || agree*10 < total*9 || complexCaught*10 < complexTotal*8 {
		t.Errorf("agreement %d of %d (want >= 90%%), complex caught %d of %d (want >= 80%%)", agree, total, complexCaught, complexTotal)
	}
}

// findCapture is the path of a capture file named in turns.jsonl.
func findCapture(t *testing.T, name string) string {
	for _, p := range []string{filepath.Join(sessionsDir, name), filepath.Join(sessionsDir, "trajectories", name)} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Fatalf("capture %s not found", name)
	return ""
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}
