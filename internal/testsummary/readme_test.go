package main

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The README's set-up section holds exactly two commands for a fresh
// machine with Go, the demo and this test command, and CI runs the same
// test command the README gives.
func TestREADMETestCommand(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(readme)
	start := strings.Index(text, "\n## Set up")
	if start < 0 {
		t.Fatal("README.md has no ## Set up section")
	}
	section := text[start+1:]
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	var got []string
	for _, m := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(section, -1) {
		for _, line := range strings.Split(strings.TrimSpace(m[1]), "\n") {
			got = append(got, strings.TrimSpace(line))
		}
	}
	want := []string{"go run ./cmd/switchyard demo", "go run ./internal/testsummary"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the set-up section's commands (-want +got):\n%s", diff)
	}

	ci, err := os.ReadFile("../../.ci/run")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^go run \./internal/testsummary$`).Match(ci) {
		t.Errorf(".ci/run does not run the README's test command %q", want[1])
	}
}
