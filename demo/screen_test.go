package demo

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/policy"
	"github.com/switchyard/switchyard/router"
)

func testGateway(t *testing.T) *router.Gateway {
	t.Helper()
	cfg, err := policy.Load("t.yaml", []byte(`version: 1
pools:
  p: {model: m, health: {disabled: true}, replicas: [{name: r1, url: "http://127.0.0.1:1"}]}
routes:
  - {name: d, to: p}
`), router.LoadOptions())
	if err != nil {
		t.Fatal(err)
	}
	g, err := router.New(cfg, router.Options{Passive: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	return g
}

// TestScreenRedrawsInPlace: on a terminal the table is redrawn over the
// last one (cursor up by exactly its line count, every line cut to the
// width, so wrapping cannot leave stale rows), and a failed request shows
// as an event naming its API and why.
func TestScreenRedrawsInPlace(t *testing.T) {
	var out bytes.Buffer
	rec := NewRecorder()
	s := &screen{w: &out, terminal: true, width: 60, rec: rec, g: testGateway(t)}
	now := rec.started.Add(3 * time.Second)
	rec.Add(Result{API: "chat", Kind: "short", Pool: "p", Status: 200, At: now.Add(-time.Second), Latency: time.Millisecond})
	rec.Add(Result{API: "responses", Kind: "tool", Stream: true, Pool: "p", Status: 200, Err: "the stream was interrupted", At: now.Add(-time.Second)})
	s.tick(now)
	first := out.String()
	lines := strings.Count(first, "\n")
	if strings.Contains(first, "\x1b[") || lines < 8 {
		t.Fatalf("first draw:\n%s", first)
	}
	for _, l := range strings.Split(first, "\n") {
		if n := len([]rune(l)); n > 59 {
			t.Errorf("a line of %d runes on a 60-column terminal: %q", n, l)
		}
	}
	if !strings.Contains(first, "failed: responses tool stream (pool p): the\n") || !strings.Contains(first, " stream was interrupted\n") {
		t.Errorf("the failure is not an event:\n%s", first)
	}
	out.Reset()
	s.tick(now.Add(time.Second))
	if want := "\r\x1b[" + strconv.Itoa(lines) + "A\x1b[J"; !strings.HasPrefix(out.String(), want) {
		t.Errorf("the redraw starts %q, want %q", out.String()[:min(12, out.Len())], want)
	}
}

// TestScreenRedrawAfterCtrlC: the terminal echoes "^C" where the cursor
// is, under the table, before the last redraw; the redraw still starts at
// the table's first column and leaves no trace of the echo (it once began
// "t=t=1m21s", the cursor up from column 3).
func TestScreenRedrawAfterCtrlC(t *testing.T) {
	var term vt
	rec := NewRecorder()
	s := &screen{w: &term, terminal: true, width: 80, rec: rec, g: testGateway(t)}
	now := rec.started.Add(81 * time.Second)
	rec.Add(Result{API: "chat", Kind: "short", Pool: "p", Status: 200, At: now.Add(-time.Second), Latency: time.Millisecond})
	s.tick(now)
	want := term.String()
	term.Write([]byte("^C")) // the tty's echo of the interrupt
	s.tick(now)
	if got := term.String(); got != want {
		t.Errorf("after ^C the screen reads\n%s\nwant\n%s", got, want)
	}
}

// vt is the little of a terminal the live view uses: printable text,
// \r, \n, cursor up (CSI n A) and clear to the end of the screen (CSI J).
type vt struct {
	rows     [][]rune
	row, col int
}

func (v *vt) Write(p []byte) (int, error) {
	rs := []rune(string(p))
	for i := 0; i < len(rs); i++ {
		switch r := rs[i]; {
		case r == '\r':
			v.col = 0
		case r == '\n':
			v.row, v.col = v.row+1, 0
		case r == '\x1b' && i+1 < len(rs) && rs[i+1] == '[':
			j, n := i+2, 0
			for ; j < len(rs) && rs[j] >= '0' && rs[j] <= '9'; j++ {
				n = n*10 + int(rs[j]-'0')
			}
			if j == len(rs) {
				return 0, fmt.Errorf("unfinished escape %q", string(rs[i:]))
			}
			switch rs[j] {
			case 'A':
				v.row = max(0, v.row-max(n, 1))
			case 'J':
				if v.row < len(v.rows) {
					v.rows[v.row] = v.rows[v.row][:min(v.col, len(v.rows[v.row]))]
					v.rows = v.rows[:v.row+1]
				}
			default:
				return 0, fmt.Errorf("escape %q not handled", string(rs[i:j+1]))
			}
			i = j
		default:
			for len(v.rows) <= v.row {
				v.rows = append(v.rows, nil)
			}
			line := v.rows[v.row]
			for len(line) <= v.col {
				line = append(line, ' ')
			}
			line[v.col] = r
			v.rows[v.row], v.col = line, v.col+1
		}
	}
	return len(p), nil
}

// String is the screen's text, one line a row, trailing blanks dropped.
func (v *vt) String() string {
	var b strings.Builder
	for _, l := range v.rows {
		b.WriteString(strings.TrimRight(string(l), " "))
		b.WriteByte('\n')
	}
	return strings.TrimRight(b.String(), "\n")
}

// TestScreenWithoutTerminal: without a terminal there is no cursor
// movement, one line every few seconds, and events as lines of their own.
func TestScreenWithoutTerminal(t *testing.T) {
	var out bytes.Buffer
	rec := NewRecorder()
	s := &screen{w: &out, rec: rec, g: testGateway(t), lastLine: rec.started}
	for i := 1; i <= 12; i++ {
		s.tick(rec.started.Add(time.Duration(i) * time.Second))
	}
	if strings.Contains(out.String(), "\x1b[") || strings.Count(out.String(), "req/s") != 2 {
		t.Errorf("12 s without a terminal:\n%s", out.String())
	}
	s.event(4*time.Second, "killed r1")
	if !strings.HasSuffix(out.String(), "   4s  killed r1\n") {
		t.Errorf("event line: %q", out.String())
	}
}

// TestScreenWrapsEvents: on an 80-column terminal an event longer than a
// line is wrapped under its text, never cut, so every word of it can be
// read (issue 43: the kill event ended "one c…").
func TestScreenWrapsEvents(t *testing.T) {
	var out bytes.Buffer
	rec := NewRecorder()
	s := &screen{w: &out, terminal: true, width: 80, rec: rec, g: testGateway(t)}
	const msg = "killed qwen-b: its requests are retried and its streams (chat, Responses, Messages) resume elsewhere; one cut inside a tool call ends with an error event"
	s.event(5*time.Second, msg)
	s.tick(rec.started.Add(6 * time.Second))
	text := out.String()
	if strings.Contains(text, "…") {
		t.Errorf("a line is cut:\n%s", text)
	}
	_, events, ok := strings.Cut(text, "  events\n")
	if !ok {
		t.Fatalf("no events:\n%s", text)
	}
	lines := strings.Split(strings.TrimSuffix(events, "\n"), "\n")
	if len(lines) < 2 {
		t.Errorf("the event is not wrapped:\n%s", events)
	}
	var words []string
	for i, l := range lines {
		if n := len([]rune(l)); n > 79 {
			t.Errorf("a line of %d runes on an 80-column terminal: %q", n, l)
		}
		// The first line starts with the time; the others hang under the text.
		indent := "           "
		if i == 0 {
			indent = "       5s  "
		}
		rest, ok := strings.CutPrefix(l, indent)
		if !ok || strings.HasPrefix(rest, " ") {
			t.Errorf("line %d is not indented as %q: %q", i, indent, l)
		}
		words = append(words, strings.Fields(rest)...)
	}
	if got := strings.Join(words, " "); got != msg {
		t.Errorf("the wrapped event reads\n%q\nwant\n%q", got, msg)
	}
}

func TestWrap(t *testing.T) {
	for _, tc := range []struct {
		name  string
		parts []string
		sep   string
		width int
		want  string
	}{
		{"fits", []string{"a 1", "b 2"}, " │ ", 20, "xx: a 1 │ b 2\n"},
		{"breaks between parts", []string{"aaaa 1", "bbbb 2", "cccc 3"}, " │ ", 20, "xx: aaaa 1 │ bbbb 2\n    cccc 3\n"},
		{"a part too long stays whole", []string{"short", "a-very-long-word-indeed"}, " ", 12, "xx: short\n    a-very-long-word-indeed\n"},
		{"nothing", nil, " ", 10, "xx: \n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := wrap("xx: ", tc.parts, tc.sep, tc.width); got != tc.want {
				t.Errorf("wrap: %q, want %q", got, tc.want)
			}
		})
	}
}

// TestStateLegend: the table explains each state it shows but "up", once.
func TestStateLegend(t *testing.T) {
	for _, tc := range []struct {
		name string
		reps []replicaLine
		want string
	}{
		{"all up", []replicaLine{{"a", "up", 0}}, ""},
		{"down twice and ejected", []replicaLine{{"a", "DOWN", 0}, {"b", "EJECTED", 0}, {"c", "DOWN", 0}},
			"(EJECTED: out of rotation after repeated errors, until its ejection ends; DOWN: failing its health probes (or refusing the pool's key or model), no requests until they pass)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := stateLegend(tc.reps); got != tc.want {
				t.Errorf("legend %q, want %q", got, tc.want)
			}
		})
	}
}
