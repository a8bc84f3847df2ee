package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// testdata/mixed.jsonl is `go test -json ./...` (Go 1.26) over the module
// that TestLiveGoTest writes: a package that passes with a skipped test and
// a skipped subtest, one with a failing subtest, one without tests.
func TestSummary(t *testing.T) {
	f, err := os.Open("testdata/mixed.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out strings.Builder
	s := newSummary(&out, "example.com/tsx")
	if err := s.read(f); err != nil {
		t.Fatal(err)
	}
	s.report("go test ./...")
	want := `ok  	example.com/tsx/a	0.044s
?   	example.com/tsx/c	[no test files]
    b_test.go:3: before
    b_test.go:3: boom
--- FAIL: TestFail/inner (0.00s)
--- FAIL: TestFail (0.00s)
FAIL
FAIL	example.com/tsx/b	0.002s

== summary of go test ./...
ok    ./a  3 passed, 2 skipped
FAIL  ./b  1 passed, 2 failed
(1 package has no test files)
skipped, each with what enables it:
  ./a TestSkip: needs foo: run bash .ci/install
  ./a TestSub/two: sub 2
(bash .ci/install, as root, installs every tool a suite needs)
tests: 4 passed, 2 failed, 2 skipped
`
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
}

// A line that is not an event (the go command's own words) passes through.
func TestSummaryPlainLines(t *testing.T) {
	var out strings.Builder
	s := newSummary(&out, "m")
	in := "go: warning: something\n" +
		`{"Action":"build-output","ImportPath":"m/x [m/x.test]","Output":"x/x.go:3:1: syntax error\n"}` + "\n" +
		`{"Action":"output","Package":"m/x","Output":"FAIL\tm/x [build failed]\n"}` + "\n" +
		`{"Action":"fail","Package":"m/x"}` + "\n"
	if err := s.read(strings.NewReader(in)); err != nil {
		t.Fatal(err)
	}
	s.report("go test ./...")
	want := "go: warning: something\n" +
		"x/x.go:3:1: syntax error\n" +
		"FAIL\tm/x [build failed]\n" +
		"\n== summary of go test ./...\n" +
		"FAIL  ./x  0 passed\n" +
		"tests: 0 passed, 0 failed, 0 skipped\n"
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
}

// The go command installed here still writes the events the summary
// reads: the module of testdata/mixed.jsonl, tested for real.
func TestLiveGoTest(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: not running go test")
	}
	dir := t.TempDir()
	files := map[string]string{
		"go.mod": "module example.com/tsx\n\ngo 1.26\n",
		"a/a_test.go": `package a
import "testing"
func TestPass(t *testing.T) { t.Log("hidden") }
func TestSkip(t *testing.T) { t.Skip("needs foo: run bash .ci/install") }
func TestSub(t *testing.T) { t.Run("one", func(t *testing.T){}); t.Run("two", func(t *testing.T){ t.Skipf("sub %d", 2) }) }
`,
		"b/b_test.go": `package b
import "testing"
func TestFail(t *testing.T) { t.Log("before"); t.Run("inner", func(t *testing.T){ t.Error("boom") }) }
func TestOK(t *testing.T) {}
`,
		"c/c.go": "package c\n",
	}
	for name, body := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("go", "test", "-json", "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=", "GOWORK=off")
	raw, _ := cmd.Output() // exit status 1: package b fails
	var out strings.Builder
	s := newSummary(&out, "example.com/tsx")
	if err := s.read(strings.NewReader(string(raw))); err != nil {
		t.Fatal(err)
	}
	s.report("go test ./...")
	got := out.String()
	if !strings.HasSuffix(got, "tests: 4 passed, 2 failed, 2 skipped\n") {
		t.Errorf("last line of\n%s\nwant tests: 4 passed, 2 failed, 2 skipped", got)
	}
	for _, want := range []string{"  ./a TestSkip: needs foo: run bash .ci/install\n", "FAIL  ./b  1 passed, 2 failed\n", "--- FAIL: TestFail (", "    b_test.go:3: boom\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "hidden") {
		t.Errorf("a passing test's log is shown:\n%s", got)
	}
}
