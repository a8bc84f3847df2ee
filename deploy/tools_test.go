package deploy

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// The tools that render the manifests, at pinned versions. They run with
// `go run MODULE@VERSION`, so they are no dependency of the module: the go
// command fetches them from the module proxy on first use and keeps the
// built binaries in its build cache (a cold Helm build takes minutes, a warm
// run under a second). Bump them here and in docs/deploy.md together.
const (
	kustomizeTool = "sigs.k8s.io/kustomize/kustomize/v5@v5.8.2"
	helmTool      = "helm.sh/helm/v3/cmd/helm@v3.22.0"
)

// toolRun is one finished `go run`, kept so that every test asking for the
// same rendering shares one run.
type toolRun struct {
	stdout []byte
	err    error
	took   time.Duration
}

var (
	toolRunsMu sync.Mutex
	toolRuns   = map[string]*toolRun{}
)

// goRun runs `go run tool args...` in this directory and returns its
// standard output, or an error carrying its standard error. The test is
// skipped in -short mode, and when the go command cannot download the tool
// (no module proxy), except under CI=true, where that fails the test: CI
// has the module proxy.
func goRun(t *testing.T, tool string, args ...string) ([]byte, error) {
	t.Helper()
	if testing.Short() {
		t.Skipf("-short: not building %s", tool)
	}
	key := tool + "\x00" + strings.Join(args, "\x00")
	toolRunsMu.Lock()
	defer toolRunsMu.Unlock()
	run, ok := toolRuns[key]
	if !ok {
		run = runTool(tool, args)
		toolRuns[key] = run
		if run.err == nil {
			t.Logf("go run %s %s: %v", tool, strings.Join(args, " "), run.took)
		}
	}
	var dl *downloadError
	if errors.As(run.err, &dl) {
		if os.Getenv("CI") == "true" {
			t.Fatalf("go run %s: cannot download the tool, and CI must have the module proxy: %v", tool, dl)
		}
		t.Skipf("go run %s: cannot download the tool (no module proxy?): %v", tool, dl)
	}
	return run.stdout, run.err
}

// mustGoRun is goRun for a run that must succeed.
func mustGoRun(t *testing.T, tool string, args ...string) []byte {
	t.Helper()
	out, err := goRun(t, tool, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func runTool(tool string, args []string) *toolRun {
	start := time.Now()
	cmd := exec.Command("go", append([]string{"run", tool}, args...)...)
	// GOFLAGS meant for this module (-mod=vendor, say) do not apply to a
	// tool built at its own version; GOWORK likewise.
	cmd.Env = append(os.Environ(), "GOFLAGS=", "GOWORK=off")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	took := time.Since(start).Round(time.Millisecond)
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if line := downloadFailure(msg); line != "" {
			return &toolRun{err: &downloadError{line: line}}
		}
		return &toolRun{err: fmt.Errorf("go run %s %s (%v): %w\n%s", tool, strings.Join(args, " "), took, err, msg)}
	}
	return &toolRun{stdout: stdout.Bytes(), took: took}
}

// downloadError says that the go command could not fetch a module.
type downloadError struct{ line string }

func (e *downloadError) Error() string { return e.line }

// downloadFailure returns the go command's line saying that it could not
// reach the module proxy, or "". Only the go command's own lines ("go: …")
// count, so a tool's error that mentions a refused connection is not taken
// for one.
func downloadFailure(stderr string) string {
	for _, line := range strings.Split(stderr, "\n") {
		if !strings.HasPrefix(line, "go: ") {
			continue
		}
		for _, s := range []string{
			"dial tcp", "no such host", "GOPROXY=off", "module lookup disabled",
			"i/o timeout", "proxyconnect", "TLS handshake timeout", "network is unreachable",
			"connection refused",
		} {
			if strings.Contains(line, s) {
				return line
			}
		}
	}
	return ""
}

// TestCIPrebuildsTheTools: .ci/run builds the very tool versions these
// tests run, so that CI finds them in the build cache.
func TestCIPrebuildsTheTools(t *testing.T) {
	ci, err := os.ReadFile("../.ci/run")
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range []string{kustomizeTool, helmTool} {
		if !strings.Contains(string(ci), tool) {
			t.Errorf(".ci/run does not prebuild %s", tool)
		}
	}
}
