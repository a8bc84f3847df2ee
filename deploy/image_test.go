package deploy

import (
	"bytes"
	"debug/elf"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"

	"github.com/switchyard/switchyard/deploy/imagebuild"
)

// The image is checked without a container engine: the Dockerfile's COPY
// sources exist in the build context and survive .dockerignore, every file
// the binary is built from survives it too, and the binary builds static
// with CGO_ENABLED=0, as the Dockerfile builds it.

const (
	repoRoot       = ".."
	dockerfilePath = "../Dockerfile"
	dockerignore   = "../.dockerignore"
)

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	line int
	cmd  string // upper case: FROM, COPY, RUN, …
	args string
}

// parseDockerfile splits a Dockerfile into instructions: comments and
// parser directives are dropped, lines ending in a backslash continue.
// Heredocs are not supported (the Dockerfile has none; a test fails if one
// appears).
func parseDockerfile(t *testing.T, text string) []instruction {
	t.Helper()
	var out []instruction
	var cur strings.Builder
	start := 0
	for i, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if cur.Len() == 0 {
			start = i + 1
		}
		if strings.HasPrefix(trimmed, "#") {
			continue // a comment inside a continued instruction
		}
		if strings.HasSuffix(trimmed, "\\") {
			cur.WriteString(strings.TrimSuffix(trimmed, "\\") + " ")
			continue
		}
		cur.WriteString(trimmed)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		if strings.Contains(args, "<<") {
			t.Fatalf("%s:%d: heredocs are not supported by this test", dockerfilePath, start)
		}
		out = append(out, instruction{line: start, cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)})
		cur.Reset()
	}
	return out
}

// copyArgs splits a COPY or ADD instruction's arguments into its flags
// (--from=build → from: build), sources and destination, in shell or JSON
// form.
func copyArgs(t *testing.T, in instruction) (flags map[string]string, srcs []string, dst string) {
	t.Helper()
	var words []string
	if strings.HasPrefix(in.args, "[") {
		if err := json.Unmarshal([]byte(in.args), &words); err != nil {
			t.Fatalf("%s:%d: %s %s: %v", dockerfilePath, in.line, in.cmd, in.args, err)
		}
	} else {
		words = strings.Fields(in.args)
	}
	flags = map[string]string{}
	for len(words) > 0 && strings.HasPrefix(words[0], "--") {
		k, v, _ := strings.Cut(strings.TrimPrefix(words[0], "--"), "=")
		flags[k] = v
		words = words[1:]
	}
	if len(words) < 2 {
		t.Fatalf("%s:%d: %s %s: want sources and a destination", dockerfilePath, in.line, in.cmd, in.args)
	}
	return flags, words[:len(words)-1], words[len(words)-1]
}

func ignorePatterns(t *testing.T) *patternmatcher.PatternMatcher {
	t.Helper()
	f, err := os.Open(dockerignore)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	patterns, err := ignorefile.ReadAll(f)
	if err != nil {
		t.Fatalf("%s: %v", dockerignore, err)
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		t.Fatalf("%s: %v", dockerignore, err)
	}
	return pm
}

// ignored reports whether .dockerignore leaves the file rel (a slash path
// relative to the repository root) out of the build context.
func ignored(t *testing.T, pm *patternmatcher.PatternMatcher, rel string) bool {
	t.Helper()
	ok, err := pm.MatchesOrParentMatches(filepath.FromSlash(rel))
	if err != nil {
		t.Fatalf("%s: matching %s: %v", dockerignore, rel, err)
	}
	return ok
}

// TestDockerfile checks the Dockerfile's stages against the repository:
// every COPY from the build context names files that exist and that
// .dockerignore keeps; every COPY --from names an earlier stage and a file
// that stage builds; the entry point and the default config are files the
// image receives.
func TestDockerfile(t *testing.T) {
	pm := ignorePatterns(t)
	ins := parseDockerfile(t, string(readFile(t, dockerfilePath)))
	stages := map[string][]instruction{} // stage name → its instructions
	var stage string
	copied := map[string]bool{} // destinations in the final stage
	var entrypoint, configEnv string
	contextCopies := 0
	for _, in := range ins {
		switch in.cmd {
		case "FROM":
			words := strings.Fields(in.args)
			stage = ""
			if len(words) == 3 && strings.EqualFold(words[1], "AS") {
				stage = words[2]
				if _, dup := stages[stage]; dup {
					t.Errorf("%s:%d: stage %q named twice", dockerfilePath, in.line, stage)
				}
			}
			stages[stage] = nil
			clear(copied)
			continue
		case "ADD", "COPY":
			flags, srcs, dst := copyArgs(t, in)
			if from, ok := flags["from"]; ok {
				built, known := stages[from]
				if !known {
					t.Errorf("%s:%d: COPY --from=%s: no earlier stage of that name", dockerfilePath, in.line, from)
				}
				for _, src := range srcs {
					// The file must be an output (-o) of that stage.
					found := false
					for _, b := range built {
						found = found || b.cmd == "RUN" && strings.Contains(b.args, "-o "+src)
					}
					if !found {
						t.Errorf("%s:%d: COPY --from=%s %s: no RUN of that stage writes it (-o %s)", dockerfilePath, in.line, from, src, src)
					}
				}
			} else {
				for _, src := range srcs {
					contextCopies++
					checkContextSource(t, pm, in, src)
				}
			}
			for _, src := range srcs {
				if strings.HasSuffix(dst, "/") {
					copied[path.Join(dst, path.Base(src))] = true
				} else {
					copied[dst] = true
				}
			}
		case "ENTRYPOINT":
			var words []string
			if err := json.Unmarshal([]byte(in.args), &words); err != nil || len(words) == 0 {
				t.Errorf("%s:%d: ENTRYPOINT %s: want the exec (JSON) form", dockerfilePath, in.line, in.args)
			} else {
				entrypoint = words[0]
			}
		case "ENV":
			if v, ok := strings.CutPrefix(in.args, "SWITCHYARD_CONFIG="); ok {
				configEnv = v
			}
		case "RUN":
			// The build must name a package that exists.
			if _, after, ok := strings.Cut(in.args, "go build"); ok {
				fields := strings.Fields(after)
				pkg := fields[len(fields)-1]
				if st, err := os.Stat(filepath.Join(repoRoot, pkg)); err != nil || !st.IsDir() {
					t.Errorf("%s:%d: go build %s: no such package directory", dockerfilePath, in.line, pkg)
				}
			}
		}
		stages[stage] = append(stages[stage], in)
	}
	if contextCopies == 0 {
		t.Errorf("%s: no COPY from the build context", dockerfilePath)
	}
	if entrypoint == "" || !copied[entrypoint] {
		t.Errorf("%s: the entry point %q is not a file the final stage copies in (%v)", dockerfilePath, entrypoint, copied)
	}
	if configEnv != "" && !copied[configEnv] {
		t.Errorf("%s: SWITCHYARD_CONFIG=%s is not a file the final stage copies in", dockerfilePath, configEnv)
	}
}

// checkContextSource checks that src, a COPY source from the build context,
// names files that exist and that .dockerignore keeps.
func checkContextSource(t *testing.T, pm *patternmatcher.PatternMatcher, in instruction, src string) {
	t.Helper()
	if strings.Contains(src, "://") {
		return // ADD of a URL
	}
	matches, err := filepath.Glob(filepath.Join(repoRoot, filepath.FromSlash(src)))
	if err != nil || len(matches) == 0 {
		t.Errorf("%s:%d: %s %s: no such file in the repository", dockerfilePath, in.line, in.cmd, src)
		return
	}
	for _, m := range matches {
		rel, err := filepath.Rel(repoRoot, m)
		if err != nil {
			t.Fatal(err)
		}
		if rel == "." {
			continue // the whole context: TestDockerignore checks what it keeps
		}
		if ignored(t, pm, filepath.ToSlash(rel)) {
			t.Errorf("%s:%d: %s %s: %s is excluded by %s", dockerfilePath, in.line, in.cmd, src, rel, dockerignore)
		}
	}
}

// TestDockerignore checks that .dockerignore keeps every file the binary is
// built from (the Go files and embedded files of the module's packages that
// cmd/switchyard imports, go.mod and go.sum) and leaves out what the image
// never needs.
func TestDockerignore(t *testing.T) {
	pm := ignorePatterns(t)
	cmd := exec.Command("go", "list", "-deps", "-json=Dir,GoFiles,EmbedFiles,Module", "./cmd/switchyard")
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	needed := []string{"go.mod", "go.sum"}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			Dir        string
			GoFiles    []string
			EmbedFiles []string
			Module     *struct{ Main bool }
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if p.Module == nil || !p.Module.Main {
			continue
		}
		dir, err := filepath.Rel(root, p.Dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range append(p.GoFiles, p.EmbedFiles...) {
			needed = append(needed, path.Join(filepath.ToSlash(dir), f))
		}
	}
	if !slices.Contains(needed, "cmd/switchyard/main.go") {
		t.Fatalf("go list found no files of cmd/switchyard: %v", needed)
	}
	for _, f := range needed {
		if ignored(t, pm, f) {
			t.Errorf("%s excludes %s, which the binary is built from", dockerignore, f)
		}
	}
	for _, f := range []string{
		".git/HEAD", "testdata/sdk/node_modules/openai/package.json", "bench/results/capacity.json",
		"switchyard", "router.test", "cpu.prof", "router/cover.out",
	} {
		if !ignored(t, pm, f) {
			t.Errorf("%s keeps %s in the build context", dockerignore, f)
		}
	}
}

var (
	buildOnce sync.Once
	binDir    string
	built     imagebuild.Result
	buildErr  error

	shortSkipsMu sync.Mutex
	shortSkips   []string // the tests -short skipped
)

// TestMain removes the binary staticBinary built, and says which tests
// -short skipped. (go test shows this line, like a t.Skip message, only
// with -v, on a failure, or run in this directory without package
// arguments: `go test -short ./...` prints only "ok" for a passing package.)
func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	if len(shortSkips) > 0 {
		fmt.Fprintf(os.Stderr, "deploy: -short skipped %s: they run the switchyard binary, which -short does not build\n",
			strings.Join(shortSkips, ", "))
	}
	os.Exit(code)
}

// staticBinary builds cmd/switchyard once, as the Dockerfile does
// (imagebuild: CGO_ENABLED=0, -trimpath, its -ldflags), and returns its
// path.
func staticBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		shortSkipsMu.Lock()
		shortSkips = append(shortSkips, t.Name())
		shortSkipsMu.Unlock()
		t.Skip("-short: not building the binary")
	}
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "switchyard-deploy-")
		if buildErr == nil {
			built, buildErr = imagebuild.Build(repoRoot, binDir)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	t.Logf("switchyard: %v", built)
	return built.Path
}

// TestImageBuildIsTheDockerfiles: the binary the tests run (imagebuild's)
// is built as the Dockerfile's RUN line builds it, its ARG defaults filled
// in.
func TestImageBuildIsTheDockerfiles(t *testing.T) {
	args := map[string]string{}
	var runs []instruction
	for _, in := range parseDockerfile(t, string(readFile(t, dockerfilePath))) {
		switch in.cmd {
		case "ARG":
			if k, v, ok := strings.Cut(in.args, "="); ok {
				args[k] = v
			}
		case "RUN":
			if strings.Contains(in.args, "go build") {
				runs = append(runs, in)
			}
		}
	}
	if len(runs) != 1 {
		t.Fatalf("%s: %d RUN lines with go build, want 1", dockerfilePath, len(runs))
	}
	got := os.Expand(runs[0].args, func(k string) string { return args[k] })
	var flags []string
	for _, f := range imagebuild.Flags {
		if strings.Contains(f, " ") {
			f = `"` + f + `"`
		}
		flags = append(flags, f)
	}
	want := fmt.Sprintf("%s go build %s -o ", strings.Join(imagebuild.Env, " "), strings.Join(flags, " "))
	if !strings.HasPrefix(got, want) || !strings.HasSuffix(got, " "+imagebuild.Package) {
		t.Errorf("%s:%d: RUN %s\nwant the build the tests run: %s... %s", dockerfilePath, runs[0].line, got, want, imagebuild.Package)
	}
}

// TestImageKeepsDeadMethodsOut: the image's binary links no package that
// looks methods up by name at run time. One reachable call of
// reflect.Value.MethodByName with a name not known to the compiler (text/
// template's executor, behind html/template and golang.org/x/net/trace's
// debug pages, which grpc links unless built with grpcnotrace) makes the
// linker keep every exported method of every type that may be boxed in an
// interface: with Kubernetes' API types that was 7 MB of binary (42.8 MB,
// against 35.7 MB without) and 3 MB of idle memory.
func TestImageKeepsDeadMethodsOut(t *testing.T) {
	args := append(append([]string{"list", "-deps"}, imagebuild.Flags...), imagebuild.Package)
	cmd := exec.Command("go", args...)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), imagebuild.Env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	deps := strings.Fields(string(out))
	if !slices.Contains(deps, "google.golang.org/grpc") {
		t.Logf("grpc is no longer linked: grpcnotrace in the Dockerfile and imagebuild.Flags can go")
	}
	for _, p := range []string{"text/template", "html/template", "golang.org/x/net/trace"} {
		if slices.Contains(deps, p) {
			t.Errorf("the image's binary links %s: its executor looks methods up by name, so the linker keeps every method of every type", p)
		}
	}
}

// TestStaticBuild builds the binary as the Dockerfile does, checks that it
// is static (no ELF interpreter, no shared library), runs it, and has it
// validate deploy/'s policies.
func TestStaticBuild(t *testing.T) {
	bin := staticBinary(t)
	if runtime.GOOS == "linux" {
		f, err := elf.Open(bin)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("%s has an ELF interpreter: it is not static", bin)
			}
		}
		if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
			t.Errorf("%s imports shared libraries %v (%v): it is not static", bin, libs, err)
		}
	}
	// Issue 40's bound on the binary, far above what it is (22 MB).
	if st, err := os.Stat(bin); err != nil {
		t.Error(err)
	} else if st.Size() > 50<<20 {
		t.Errorf("%s: %d bytes, want at most 50 MiB", bin, st.Size())
	}
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "switchyard ") {
		t.Errorf("switchyard version: %v\n%s", err, out)
	}
	validate := exec.Command(bin, "validate", filepath.Join(basePath, "switchyard.yaml"), filepath.Join(overlayPath, "switchyard.yaml"))
	if out, err := validate.CombinedOutput(); err != nil {
		t.Errorf("switchyard validate: %v\n%s", err, out)
	}
}
