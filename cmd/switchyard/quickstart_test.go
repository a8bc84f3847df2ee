package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/polltest"
)

// quickstartSection is the README's "## Quick start" section.
func quickstartSection(t *testing.T) string {
	t.Helper()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(readme)
	start := strings.Index(text, "\n## Quick start")
	if start < 0 {
		t.Fatal("README.md has no ## Quick start section")
	}
	section := text[start+1:]
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	return section
}

// TestQuickstart follows the README's quick start: the sims it starts,
// on the addresses it gives them, under the config it names, and its
// request, which the gateway routes. The addresses are replaced by free
// ones, in the config too, so that the test never needs fixed ports.
func TestQuickstart(t *testing.T) {
	section := quickstartSection(t)
	if !strings.Contains(section, "export PATH=$(go env GOPATH)/bin:$PATH") {
		t.Error("the quick start does not put $(go env GOPATH)/bin on PATH")
	}
	sims := regexp.MustCompile(`switchyard sim --preset (\S+) --listen (\S+)`).FindAllStringSubmatch(section, -1)
	if len(sims) != 2 {
		t.Fatalf("the quick start starts %d sims, want 2", len(sims))
	}
	serve := regexp.MustCompile(`switchyard serve --config (\S+)`).FindStringSubmatch(section)
	if serve == nil || serve[1] != quickstartConfig {
		t.Fatalf("the quick start serves %v, want --config %s (the file serve's error names)", serve, quickstartConfig)
	}
	curl := regexp.MustCompile(`(?s)curl -si (\S+) \\\n\s+-d '([^']+)'\n# (.*?)\n`).FindStringSubmatch(section)
	if curl == nil {
		t.Fatal("the quick start has no curl request")
	}
	config, err := os.ReadFile(filepath.Join("../..", quickstartConfig))
	if err != nil {
		t.Fatal(err)
	}
	conf := string(config)

	ctx, stop := context.WithCancel(context.Background())
	var done []chan int
	defer func() {
		stop()
		for _, d := range done {
			<-d
		}
	}()
	start := func(args ...string) {
		d := make(chan int, 1)
		done = append(done, d)
		go func() { d <- run(ctx, args, io.Discard, io.Discard) }()
	}
	for _, sim := range sims {
		addr := freeAddr(t)
		if !strings.Contains(conf, "http://"+sim[2]) {
			t.Fatalf("%s has no replica at the sim's address %s", quickstartConfig, sim[2])
		}
		conf = strings.ReplaceAll(conf, "http://"+sim[2], "http://"+addr)
		start("sim", "--preset", sim[1], "--listen", addr)
		polltest.Eventually(t, 10*time.Second, "sim "+sim[1], func() bool {
			return getBody("http://"+addr+"/v1/models") != ""
		})
	}
	path := filepath.Join(t.TempDir(), "quickstart.yaml")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	api, admin := freeAddr(t), freeAddr(t)
	start("serve", "--config", path, "--listen", api, "--admin-listen", admin, "--no-watch")
	polltest.Eventually(t, 10*time.Second, "the gateway to be ready", func() bool { return strings.Contains(getBody("http://"+api+"/readyz"), `"ready"`) })

	url := strings.Replace(curl[1], "127.0.0.1:8080", api, 1)
	resp, err := http.Post(url, "application/json", strings.NewReader(curl[2]))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	// The comment under the request names the headers it gets.
	for _, kv := range strings.Split(strings.TrimSuffix(curl[3], ", ..."), ", ") {
		name, want, _ := strings.Cut(kv, ": ")
		if got := resp.Header.Get(name); got != want {
			t.Errorf("%s: %q, the README says %q", name, got, want)
		}
	}
}

// TestServeWithoutConfig: serve with no config file says which file it
// looked for, why that one, and which example to copy, which exists.
func TestServeWithoutConfig(t *testing.T) {
	if _, err := os.Stat(filepath.Join("../..", quickstartConfig)); err != nil {
		t.Fatalf("the example serve's error names: %v", err)
	}
	dir := t.TempDir()
	t.Chdir(dir)
	for _, tc := range []struct {
		name, env string
		args      []string
		want      []string
	}{
		{"default", "", nil, []string{
			"switchyard serve: no config file at " + filepath.Join(dir, "switchyard.yaml") + " (the default, as neither --config nor $SWITCHYARD_CONFIG names a file)\n",
			"  cp examples/quickstart.yaml switchyard.yaml\n",
			"examples/policies/",
		}},
		{"env", "gone.yaml", nil, []string{
			"no config file at " + filepath.Join(dir, "gone.yaml") + " (named by $SWITCHYARD_CONFIG)\n",
		}},
		{"flag", "gone.yaml", []string{"--config", "/nonexistent/x.yaml"}, []string{
			"no config file at /nonexistent/x.yaml (named by --config)\n",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("SWITCHYARD_CONFIG", tc.env)
			code, _, errs := runCLI(t, append([]string{"serve"}, tc.args...)...)
			if code != exitInvalid {
				t.Errorf("exit %d, want %d", code, exitInvalid)
			}
			for _, w := range tc.want {
				if !strings.Contains(errs, w) {
					t.Errorf("stderr lacks %q:\n%s", w, errs)
				}
			}
		})
	}
}
