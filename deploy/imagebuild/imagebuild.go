// Package imagebuild builds the switchyard binary as the repository's
// Dockerfile builds it, for the test suites that run the real binary:
// deploy's image and reload tests and the chaos suite.
//
// On an empty build cache that build compiles several hundred packages, the
// slowest step of those suites, and `go test ./...` runs the suites at the
// same time. So every build on the machine takes its turn under one file
// lock: the first compiles, the next finds every package in the go
// command's build cache and only links. Each caller gets its own copy, which
// a later build (of edited sources, say) never replaces under it.
package imagebuild

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// The Dockerfile's build of the binary, which deploy's TestDockerfile checks
// against the Dockerfile's RUN line (with its ARG VERSION's default, dev).
var (
	Env   = []string{"CGO_ENABLED=0"}
	Flags = []string{"-tags", "grpcnotrace", "-trimpath", "-ldflags", "-s -w -X main.version=dev"}
)

// Package is the package the binary is built from, relative to the module
// root.
const Package = "./cmd/switchyard"

// lockName is the lock file, in os.TempDir, that the builds take turns on.
const lockName = "switchyard-imagebuild.lock"

// Result says where a build put the binary and what it cost.
type Result struct {
	Path   string
	Waited time.Duration // for the lock: another test process building
	Took   time.Duration // the build itself
}

func (r Result) String() string {
	return fmt.Sprintf("%s (built in %v after waiting %v for another build)",
		r.Path, r.Took.Round(time.Millisecond), r.Waited.Round(time.Millisecond))
}

// Build builds Package of the module at root, with Env and Flags, into
// dir/switchyard. The error carries the go command's output.
func Build(root, dir string) (Result, error) {
	res := Result{Path: filepath.Join(dir, "switchyard")}
	start := time.Now()
	unlock, err := lock(filepath.Join(os.TempDir(), lockName))
	if err != nil {
		return res, fmt.Errorf("imagebuild: %w", err)
	}
	defer unlock()
	res.Waited = time.Since(start)

	args := append(append([]string{"build"}, Flags...), "-o", res.Path, Package)
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), Env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	res.Took = time.Since(start) - res.Waited
	if err != nil {
		return res, fmt.Errorf("%s go %s: %w\n%s", strings.Join(Env, " "), strings.Join(args, " "), err, out.Bytes())
	}
	return res, nil
}
