package policy_test

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/switchyard/switchyard/policy"
)

func FuzzZZHang(f *testing.F) {
	files, _ := filepath.Glob("../testdata/*.yaml")
	for _, file := range files {
		data, _ := os.ReadFile(file)
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		timer := time.AfterFunc(3*time.Second, func() {
			os.WriteFile(fmt.Sprintf("/tmp/hang-%d.yaml", time.Now().UnixNano()), data, 0o644)
			buf := make([]byte, 1<<20)
			n := runtime.Stack(buf, true)
			os.WriteFile(fmt.Sprintf("/tmp/hang-%d.stack", time.Now().UnixNano()), buf[:n], 0o644)
			os.Exit(3)
		})
		defer timer.Stop()
		policy.Load("fuzz.yaml", data, testRegistry)
	})
}
