package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json's TestEvent, and
// the go command's build events).
type event struct {
	Action     string
	Package    string
	Test       string
	Output     string
	ImportPath string
}

// skip is one skipped test and the message it skipped with.
type skip struct {
	pkg, test, msg string
}

// pkgResult is one package's outcome.
type pkgResult struct {
	name                    string
	ok                      bool
	passed, failed, skipped int
}

// pkgState is what a package has printed so far: the package's own lines,
// each top-level test's lines (with its subtests'), each test's own lines.
type pkgState struct {
	lines    []string
	top      map[string][]string
	own      map[string][]string
	topOrder []string
	res      pkgResult
}

// summary reads go test's events, writes what plain go test would write to
// out, and keeps the counts and skips for report.
type summary struct {
	out    io.Writer
	module string
	pkgs   map[string]*pkgState

	results                 []pkgResult
	noTests                 int
	passed, failed, skipped int
	skips                   []skip
}

func newSummary(out io.Writer, module string) *summary {
	return &summary{out: out, module: module, pkgs: map[string]*pkgState{}}
}

// read consumes go test -json output until EOF. A line that is not an
// event (go test's own words) is written through unchanged.
func (s *summary) read(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			fmt.Fprintf(s.out, "%s\n", line)
			continue
		}
		s.event(e)
	}
	return sc.Err()
}

func (s *summary) state(pkg string) *pkgState {
	p := s.pkgs[pkg]
	if p == nil {
		p = &pkgState{top: map[string][]string{}, own: map[string][]string{}, res: pkgResult{name: s.short(pkg)}}
		s.pkgs[pkg] = p
	}
	return p
}

func (s *summary) event(e event) {
	switch e.Action {
	case "build-output":
		io.WriteString(s.out, e.Output)
		return
	case "build-fail", "start", "run", "pause", "cont", "bench":
		return
	}
	p := s.state(e.Package)
	if e.Test == "" {
		s.packageEvent(e, p)
		return
	}
	top, _, _ := strings.Cut(e.Test, "/")
	switch e.Action {
	case "output":
		if _, seen := p.top[top]; !seen {
			p.topOrder = append(p.topOrder, top)
		}
		p.top[top] = append(p.top[top], e.Output)
		p.own[e.Test] = append(p.own[e.Test], e.Output)
	case "pass":
		s.passed++
		p.res.passed++
	case "skip":
		s.skipped++
		p.res.skipped++
		s.skips = append(s.skips, skip{pkg: p.res.name, test: e.Test, msg: skipMessage(p.own[e.Test])})
	case "fail":
		s.failed++
		p.res.failed++
		if e.Test == top {
			s.writeTest(p.top[top])
		}
	}
	if e.Action != "output" {
		delete(p.own, e.Test)
		if e.Test == top {
			delete(p.top, top)
		}
	}
}

func (s *summary) packageEvent(e event, p *pkgState) {
	switch e.Action {
	case "output":
		p.lines = append(p.lines, e.Output)
		return
	case "pass":
		// Plain go test prints a passing package's "ok" line only.
		for _, l := range p.lines {
			if strings.HasPrefix(l, "ok ") {
				io.WriteString(s.out, l)
			}
		}
		p.res.ok = true
		s.results = append(s.results, p.res)
	case "skip":
		// No test files: go test's "?" line.
		for _, l := range p.lines {
			io.WriteString(s.out, l)
		}
		s.noTests++
	case "fail":
		// Tests still running when the binary died (a panic, a timeout)
		// have no fail event of their own: show what they printed.
		for _, top := range p.topOrder {
			if lines, ok := p.top[top]; ok {
				s.writeTest(lines)
			}
		}
		for _, l := range p.lines {
			io.WriteString(s.out, l)
		}
		s.results = append(s.results, p.res)
	default:
		return
	}
	delete(s.pkgs, e.Package)
}

// writeTest writes a failed test's output as plain go test does, without
// -v's "=== RUN" framing lines.
func (s *summary) writeTest(lines []string) {
	for _, l := range lines {
		if strings.HasPrefix(l, "=== ") {
			continue
		}
		io.WriteString(s.out, l)
	}
}

var logPrefix = regexp.MustCompile(`^\S+\.go:\d+: `)

// skipMessage is what a skipped test printed, without the framing lines
// and the file:line prefix of t.Skip.
func skipMessage(lines []string) string {
	var msg []string
	for _, l := range lines {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "=== ") || strings.HasPrefix(l, "--- SKIP") {
			continue
		}
		msg = append(msg, logPrefix.ReplaceAllString(l, ""))
	}
	if len(msg) == 0 {
		return "(no message)"
	}
	return strings.Join(msg, " ")
}

// short names a package as a path to type: ./pools for MODULE/pools.
func (s *summary) short(pkg string) string {
	if s.module == "" {
		return pkg
	}
	if pkg == s.module {
		return "."
	}
	if rest, ok := strings.CutPrefix(pkg, s.module+"/"); ok {
		return "./" + rest
	}
	return pkg
}

// report writes the summary; its last line is the one CI's runner reads.
func (s *summary) report(command string) {
	w := s.out
	fmt.Fprintf(w, "\n== summary of %s\n", command)
	res := append([]pkgResult(nil), s.results...)
	sort.Slice(res, func(i, j int) bool { return res[i].name < res[j].name })
	width := 0
	for _, r := range res {
		width = max(width, len(r.name))
	}
	for _, r := range res {
		verdict := "ok  "
		if !r.ok {
			verdict = "FAIL"
		}
		line := fmt.Sprintf("%s  %-*s  %d passed", verdict, width, r.name, r.passed)
		if r.failed > 0 {
			line += fmt.Sprintf(", %d failed", r.failed)
		}
		if r.skipped > 0 {
			line += fmt.Sprintf(", %d skipped", r.skipped)
		}
		fmt.Fprintln(w, line)
	}
	switch {
	case s.noTests == 1:
		fmt.Fprintf(w, "(1 package has no test files)\n")
	case s.noTests > 1:
		fmt.Fprintf(w, "(%d packages have no test files)\n", s.noTests)
	}
	if len(s.skips) > 0 {
		fmt.Fprintf(w, "skipped, each with what enables it:\n")
		for _, sk := range s.skips {
			fmt.Fprintf(w, "  %s %s: %s\n", sk.pkg, sk.test, sk.msg)
		}
		fmt.Fprintf(w, "(bash .ci/install, as root, installs every tool a suite needs)\n")
	}
	fmt.Fprintf(w, "tests: %d passed, %d failed, %d skipped\n", s.passed, s.failed, s.skipped)
}
