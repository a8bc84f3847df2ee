package policy_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/switchyard/switchyard/policy"
	"github.com/switchyard/switchyard/policy/internal/policytest"
	"github.com/switchyard/switchyard/policy/routing"
)

// FuzzLoad: Load never panics, and answers with either a config that
// compiles into a deciding policy or a policy.Errors whose every entry points
// into the file.
func FuzzLoad(f *testing.F) {
	files, err := filepath.Glob("../testdata/*.yaml")
	if err != nil {
		f.Fatal(err)
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := policy.Load("fuzz.yaml", data, policytest.LoadOptions)
		if err != nil {
			var es policy.Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("Load error is %T %q, want a non-empty policy.Errors", err, err)
			}
			for _, e := range es {
				if e.Line < 1 || e.Col < 1 || e.File != "fuzz.yaml" || e.Msg == "" {
					t.Errorf("error %q: want File fuzz.yaml, Line and Col >= 1 and a message", e)
				}
			}
			return
		}
		if cfg == nil {
			t.Fatal("Load returned neither a config nor an error")
		}
		// A validated config always has a catch-all route, so Decide never
		// reaches its "not validated" panic.
		d := routing.New(cfg).Decide(&routing.Request{}, func() routing.Classification {
			return routing.Classification{Label: "simple"}
		}, true)
		if len(d.Pools) == 0 {
			t.Fatalf("Decide = %+v, want a pool", d)
		}
	})
}
