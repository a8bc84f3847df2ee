package deploy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/polltest"
)

// A policy whose only route is called name.
const reloadPolicy = `version: 1
pools:
  p:
    model: org/model
    health: {disabled: true}
    replicas:
      - {name: a, url: "http://127.0.0.1:9"}
routes:
  - name: %s
    to: p
`

// writeConfigMapVersion lays out a ConfigMap volume as the kubelet's
// atomic writer does (pkg/volume/util/atomic_writer.go): the files in a
// directory of their own, a ..data symlink to it swapped in by renaming a
// ..data_tmp symlink over it, and each file a symlink through ..data.
func writeConfigMapVersion(t *testing.T, dir string, version int, text string) {
	t.Helper()
	ts := fmt.Sprintf("..2026_01_01_00_00_%02d.%09d", version, version)
	if err := os.Mkdir(filepath.Join(dir, ts), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ts, "switchyard.yaml"), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	old, _ := os.Readlink(filepath.Join(dir, "..data"))
	if err := os.Symlink(ts, filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "switchyard.yaml")); os.IsNotExist(err) {
		if err := os.Symlink(filepath.Join("..data", "switchyard.yaml"), filepath.Join(dir, "switchyard.yaml")); err != nil {
			t.Fatal(err)
		}
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(dir, old)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestConfigMapSwapReloads runs `switchyard serve` on a config laid out as
// a ConfigMap volume mounted as a directory (as the manifests mount it),
// swaps a new version in as the kubelet does, and waits for the running
// config to become the new one: the live reload the manifests rely on.
func TestConfigMapSwapReloads(t *testing.T) {
	bin := staticBinary(t)
	dir := t.TempDir()
	writeConfigMapVersion(t, dir, 1, fmt.Sprintf(reloadPolicy, "first"))

	cmd := exec.Command(bin, "serve", "--config", filepath.Join(dir, "switchyard.yaml"),
		"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	// The JSON log names the bound addresses; the rest of it is drained
	// so that the process never blocks on a full pipe.
	admin := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var line struct {
				Msg         string `json:"msg"`
				AdminListen string `json:"admin_listen"`
			}
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "switchyard serving" {
				admin <- line.AdminListen
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	var addr string
	select {
	case addr = <-admin:
	case <-time.After(30 * time.Second):
		t.Fatal("switchyard serve did not start within 30s")
	}

	config := func() (generation, body string) {
		resp, err := http.Get("http://" + addr + "/admin/config")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.Header.Get("X-Switchyard-Generation"), string(b)
	}
	if gen, body := config(); gen != "1" || !strings.Contains(body, "name: first") {
		t.Fatalf("before the swap: generation %q, config:\n%s", gen, body)
	}

	writeConfigMapVersion(t, dir, 2, fmt.Sprintf(reloadPolicy, "second"))
	var gen, body string
	polltest.Eventually(t, 10*time.Second, "the swapped config to be served", func() bool {
		gen, body = config()
		return gen == "2" && strings.Contains(body, "name: second")
	}, func() string { return fmt.Sprintf("generation %q, config:\n%s", gen, body) })
}
