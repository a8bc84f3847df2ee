package admin

import (
	"io/fs"
	"regexp"
	"strings"
	"testing"
)

// TestPageExplainsItsMarks: the status page explains, under the replicas
// table, every state it paints red (status.js's DOWN) and the dash it shows
// for a value it does not have, and says why per cell.
func TestPageExplainsItsMarks(t *testing.T) {
	page, err := fs.ReadFile(files, "statuspage/index.html")
	if err != nil {
		t.Fatal(err)
	}
	script, err := fs.ReadFile(files, "statuspage/status.js")
	if err != nil {
		t.Fatal(err)
	}
	note := regexp.MustCompile(`(?s)<p id="replicas-note"[^>]*>(.*?)</p>`).FindSubmatch(page)
	if note == nil {
		t.Fatal("index.html has no replicas-note under the replicas table")
	}
	text := string(note[1])
	down := regexp.MustCompile(`const DOWN = \{([^}]*)\}`).FindSubmatch(script)
	if down == nil {
		t.Fatal("status.js has no DOWN states")
	}
	for _, kv := range strings.Split(string(down[1]), ",") {
		state, _, _ := strings.Cut(strings.TrimSpace(kv), ":")
		if state != "" && !strings.Contains(text, "<b>"+state+"</b>") {
			t.Errorf("the note does not explain the red state %q: %s", state, text)
		}
	}
	for _, want := range []string{"(–) is no value", "vLLM queue and KV cache", "kv_aware", "p2c"} {
		if !strings.Contains(text, want) {
			t.Errorf("the note lacks %q: %s", want, text)
		}
	}
	if !strings.Contains(string(script), "q.title = unscraped") || !strings.Contains(string(script), "kv.title = unscraped") {
		t.Error("status.js does not say why a queue or KV-cache cell has no value")
	}
}
