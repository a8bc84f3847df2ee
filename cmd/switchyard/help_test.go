package main

import (
	"flag"
	"os"
	"strings"
	"testing"
)

// commandFlags runs every command's --help and returns the FlagSet each one
// built, so that tests list flags from the FlagSets themselves.
func commandFlags(t *testing.T) map[string]*flag.FlagSet {
	t.Helper()
	sets := map[string]*flag.FlagSet{}
	newFlagsHook = func(name string, fs *flag.FlagSet) { sets[name] = fs }
	t.Cleanup(func() { newFlagsHook = nil })
	for _, c := range commands() {
		if code, _, errs := runCLI(t, c.name, "--help"); code != exitOK {
			t.Fatalf("%s --help: exit %d\n%s", c.name, code, errs)
		}
		if sets[c.name] == nil {
			t.Fatalf("%s --help built no FlagSet", c.name)
		}
	}
	return sets
}

// flagNames lists a FlagSet's flags.
func flagNames(fs *flag.FlagSet) []string {
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	return names
}

// TestHelp: each command's help is the same for --help, -h and 'help CMD',
// exits 0, and names every flag of the command's FlagSet both in the usage
// line and under Flags:; a command without flags has no Flags: section.
func TestHelp(t *testing.T) {
	sets := commandFlags(t)
	// The flags issue reports found missing from the usage lines.
	mustList := map[string][]string{
		"serve":   {"config", "listen", "admin-listen", "log-level", "no-watch"},
		"explain": {"config", "class", "header"},
		"demo":    {"duration", "listen", "admin-listen", "no-load", "speedup", "workers", "kill"},
		"sim":     {"listen", "preset", "model", "speedup", "fail-percent"},
	}
	for _, c := range commands() {
		t.Run(c.name, func(t *testing.T) {
			code, stdout, help := runCLI(t, c.name, "--help")
			if code != exitOK || stdout != "" {
				t.Fatalf("--help: exit %d, stdout %q", code, stdout)
			}
			for _, args := range [][]string{{c.name, "-h"}, {"help", c.name}} {
				code, _, got := runCLI(t, args...)
				if code != exitOK || got != help {
					t.Errorf("%q: exit %d, help differs from --help:\n%s", args, code, got)
				}
			}
			usageLine, rest, _ := strings.Cut(help, "\n\n")
			if !strings.HasPrefix(usageLine, "Usage: switchyard "+c.name) {
				t.Errorf("usage line %q", usageLine)
			}
			if !strings.Contains(rest, c.summary[1:]) {
				t.Errorf("help lacks the summary %q:\n%s", c.summary, help)
			}
			_, flagsSection, hasFlags := strings.Cut(help, "\nFlags:\n")
			names := flagNames(sets[c.name])
			if len(names) == 0 {
				if strings.Contains(help, "Flags:") {
					t.Errorf("a command without flags shows a Flags: section:\n%s", help)
				}
				return
			}
			if !hasFlags {
				t.Fatalf("no Flags: section:\n%s", help)
			}
			for _, name := range names {
				if !strings.Contains(usageLine, "[--"+name+"]") && !strings.Contains(usageLine, "[--"+name+" ") {
					t.Errorf("usage line lacks --%s:\n%s", name, usageLine)
				}
				if !strings.Contains("\n"+flagsSection, "\n  --"+name+"\n") && !strings.Contains("\n"+flagsSection, "\n  --"+name+" ") {
					t.Errorf("Flags: lacks --%s:\n%s", name, flagsSection)
				}
			}
			for _, name := range mustList[c.name] {
				if sets[c.name].Lookup(name) == nil {
					t.Errorf("no --%s flag", name)
				}
			}
		})
	}
}

// TestHelpCommand: 'switchyard help' is the top-level help; an unknown
// command or extra words are usage errors.
func TestHelpCommand(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"help", []string{"help"}, exitOK, "Commands:"},
		{"--help", []string{"--help"}, exitOK, "switchyard help <command>"},
		{"-h", []string{"-h"}, exitOK, "Commands:"},
		{"unknown", []string{"help", "frobnicate"}, exitUsage, `unknown command "frobnicate"`},
		{"two words", []string{"help", "serve", "demo"}, exitUsage, "Usage: switchyard help"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errs := runCLI(t, tc.args...)
			if code != tc.code || !strings.Contains(errs, tc.want) {
				t.Errorf("exit %d (want %d), stderr lacks %q:\n%s", code, tc.code, tc.want, errs)
			}
		})
	}
}

// TestVersionFlag: --version and -version print what 'version' prints.
func TestVersionFlag(t *testing.T) {
	code, want, _ := runCLI(t, "version")
	if code != exitOK || !strings.HasPrefix(want, "switchyard ") {
		t.Fatalf("version: exit %d %q", code, want)
	}
	for _, arg := range []string{"--version", "-version"} {
		if code, got, errs := runCLI(t, arg); code != exitOK || got != want {
			t.Errorf("%s: exit %d, stdout %q, want %q (stderr %s)", arg, code, got, want, errs)
		}
	}
	if code, _, _ := runCLI(t, "version", "extra"); code != exitUsage {
		t.Errorf("version extra: exit %d, want %d", code, exitUsage)
	}
}

// TestExplainConfigEnv: explain reads the file serve would read: --config,
// else $SWITCHYARD_CONFIG, else ./switchyard.yaml.
func TestExplainConfigEnv(t *testing.T) {
	const good = "../../examples/policies/dgx-spark-8node.yaml"
	const body = `{"model":"auto","messages":[{"role":"user","content":"hi"}]}`
	for _, tc := range []struct {
		name, env string
		args      []string
		code      int
		want      string // in stdout for exit 0, else in stderr
	}{
		{"env", good, []string{"--class", "complex", body}, exitOK, `"route": "complex"`},
		{"flag wins over env", "/nonexistent/env.yaml", []string{"--config", good, "--class", "complex", body}, exitOK, `"route": "complex"`},
		{"env names a missing file", "/nonexistent/env.yaml", []string{body}, exitInvalid, "/nonexistent/env.yaml"},
		{"neither: ./switchyard.yaml", "", []string{body}, exitInvalid, "switchyard.yaml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("SWITCHYARD_CONFIG", tc.env)
			code, out, errs := runCLI(t, append([]string{"explain"}, tc.args...)...)
			got := errs
			if tc.code == exitOK {
				got = out
			}
			if code != tc.code || !strings.Contains(got, tc.want) {
				t.Errorf("exit %d (want %d), output lacks %q:\nstdout %s\nstderr %s", code, tc.code, tc.want, out, errs)
			}
		})
	}
}

// TestREADMECommands: docs/reference.md's Commands table names every flag of every
// command in that command's row.
func TestREADMECommands(t *testing.T) {
	sets := commandFlags(t)
	readme, err := os.ReadFile("../../docs/reference.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	for _, line := range strings.Split(string(readme), "\n") {
		if rest, ok := strings.CutPrefix(line, "| `switchyard "); ok {
			name, _, _ := strings.Cut(rest, " ")
			name = strings.TrimSuffix(name, "`")
			rows[name] += line
		}
	}
	for _, c := range commands() {
		row, ok := rows[c.name]
		if !ok {
			t.Errorf("docs/reference.md's Commands table has no row for %s", c.name)
			continue
		}
		for _, name := range flagNames(sets[c.name]) {
			if !strings.Contains(row, "--"+name+"`") && !strings.Contains(row, "--"+name+" ") && !strings.Contains(row, "--"+name+"]") {
				t.Errorf("docs/reference.md's %s row lacks --%s", c.name, name)
			}
		}
	}
}
