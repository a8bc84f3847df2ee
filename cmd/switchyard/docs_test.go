package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// repoRoot is the repository, seen from this package's directory.
const repoRoot = "../.."

// Docs and code must stand on their own: every Markdown document they
// name is one of the repository's, and no relative path climbs out of it.
var (
	mdNameRE = regexp.MustCompile(`[A-Za-z0-9_./-]*[A-Za-z0-9_-]\.md\b`)
	upPathRE = regexp.MustCompile(`(?:\.\./)+[A-Za-z0-9_.-]*`)
)

// outsideRefs lists what text, found in file from, refers to outside the
// repository: a Markdown document the repository does not have (by path
// from the file or the root, or by name anywhere in it), or a relative
// path that leaves the repository or names nothing in it. mds are the repository's Markdown
// files.
func outsideRefs(from, text string, mds []string) []string {
	var out []string
	for _, name := range mdNameRE.FindAllString(text, -1) {
		if !knownDoc(from, name, mds) {
			out = append(out, name)
		}
	}
	for _, up := range upPathRE.FindAllString(text, -1) {
		path := filepath.Join(filepath.Dir(from), filepath.FromSlash(up))
		rel, err := filepath.Rel(repoRoot, path)
		if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			out = append(out, up)
		} else if _, err := os.Stat(path); err != nil {
			out = append(out, up) // inside, but not the repository's
		}
	}
	return out
}

func knownDoc(from, name string, mds []string) bool {
	for _, p := range []string{filepath.Join(filepath.Dir(from), name), filepath.Join(repoRoot, name)} {
		if _, err := os.Stat(p); err == nil {
			return true
		}
	}
	for _, md := range mds {
		if filepath.Base(md) == filepath.Base(name) {
			return true
		}
	}
	return false
}

// repoFiles lists the repository's files whose name ends in ext, skipping
// hidden directories and installed packages (testdata/sdk/node_modules).
func repoFiles(t *testing.T, ext string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != repoRoot && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ext) {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestDocs: every Markdown file closes its code fences, links only to files
// that exist inside the repository, and names no document outside it.
func TestDocs(t *testing.T) {
	files := repoFiles(t, ".md")
	if len(files) < 4 {
		t.Fatalf("found only %d Markdown files: %v", len(files), files)
	}
	for _, path := range files {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		text := string(data)
		if err := checkFences(text); err != nil {
			t.Errorf("%s: %v", path, err)
		}
		for _, target := range links(text) {
			if err := checkLink(path, target); err != nil {
				t.Errorf("%s: link %q: %v", path, target, err)
			}
		}
		for _, ref := range outsideRefs(path, text, files) {
			t.Errorf("%s: refers to %q, which is not in the repository", path, ref)
		}
	}
}

// TestCodeCommentsSelfContained: no Go file refers to a document outside
// the repository.
func TestCodeCommentsSelfContained(t *testing.T) {
	mds := repoFiles(t, ".md")
	for _, path := range repoFiles(t, ".go") {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(data), "\n") {
			for _, ref := range outsideRefs(path, line, mds) {
				t.Errorf("%s:%d: refers to %q, which is not in the repository", path, i+1, ref)
			}
		}
	}
}

// TestOutsideRefs: the check finds a document the repository lacks and a
// path out of it, and passes the repository's own.
func TestOutsideRefs(t *testing.T) {
	mds := []string{filepath.Join(repoRoot, "docs", "config.md")}
	from := filepath.Join(repoRoot, "docs", "agents.md")
	// The fixtures are spelt apart: this file is checked too.
	missing, up := "ELSEWHERE"+".md", ".."+"/"
	for text, want := range map[string]string{
		"see config.md and docs/config.md": "",
		"see " + missing:                   missing,
		"see " + up + up + "elsewhere/x":   up + up + "elsewhere",
		"see " + up + up + up + "outside":  up + up + up + "outside",
		"see " + up + "deploy/kustomize":   "",
	} {
		if got := strings.Join(outsideRefs(from, text, mds), ","); got != want {
			t.Errorf("outsideRefs(%q) = %q, want %q", text, got, want)
		}
	}
}

var fenceRE = regexp.MustCompile("^ *(```+|~~~+)(.*)$")

// fences tracks fenced code blocks line by line. A fence closes on a line of
// the same character, at least as long, with nothing after it (CommonMark);
// "``` text" inside a block does not close it.
type fences struct {
	open     string // the opening marker; "" outside a block
	openLine int
}

// next reads line n and reports whether it is code or a fence line.
func (f *fences) next(n int, line string) bool {
	m := fenceRE.FindStringSubmatch(strings.TrimRight(line, " \t\r"))
	switch {
	case m == nil:
		return f.open != ""
	case f.open == "":
		f.open, f.openLine = m[1], n
	case m[1][0] == f.open[0] && len(m[1]) >= len(f.open) && m[2] == "":
		f.open = ""
	}
	return true
}

// checkFences reports a code fence that is never closed.
func checkFences(text string) error {
	var f fences
	for i, line := range strings.Split(text, "\n") {
		f.next(i+1, line)
	}
	if f.open != "" {
		return fmt.Errorf("code fence opened at line %d is never closed", f.openLine)
	}
	return nil
}

var (
	inlineLinkRE = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	refLinkRE    = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s+(\S+)`)
	codeSpanRE   = regexp.MustCompile("`[^`]*`")
)

// links returns the targets of inline and reference links outside code.
func links(text string) []string {
	var out []string
	var f fences
	for i, line := range strings.Split(text, "\n") {
		if f.next(i+1, line) {
			continue
		}
		line = codeSpanRE.ReplaceAllString(line, "")
		for _, m := range inlineLinkRE.FindAllStringSubmatch(line, -1) {
			out = append(out, m[1])
		}
		if m := refLinkRE.FindStringSubmatch(line); m != nil {
			out = append(out, m[1])
		}
	}
	return out
}

// checkLink: a relative link names a file or directory inside the repository.
func checkLink(from, target string) error {
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") || strings.HasPrefix(target, "#") {
		return nil
	}
	target, _, _ = strings.Cut(target, "#")
	path := filepath.Join(filepath.Dir(from), filepath.FromSlash(target))
	rel, err := filepath.Rel(repoRoot, path)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return fmt.Errorf("points outside the repository")
	}
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("no such file in the repository")
	}
	return nil
}

func TestCheckFences(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		ok         bool
	}{
		{"closed", "a\n```yaml\nx: 1\n```\nb\n", true},
		{"tilde", "~~~\n```\n~~~\n", true},
		{"longer closer", "````\n```\n`````\n", true},
		{"text after the closer", "```yaml\nx: 1\n``` Secrets are never inline\n", false},
		{"never closed", "```\ncode\n", false},
		{"other character", "```\n~~~\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := checkFences(tc.text); (err == nil) != tc.ok {
				t.Errorf("checkFences: %v, want ok=%v", err, tc.ok)
			}
		})
	}
}
