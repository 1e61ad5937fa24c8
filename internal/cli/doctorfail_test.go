package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/txn"
)

// Each check doctor can fail says why in the user's terms (issue 17 §5):
// the toolgate helper scans every line for Go internals (checkUserTerms),
// and each failing line says what it says, once, naming the user's paths
// (never the name of doctor's own probe file). Text and --json alike.
func TestDoctor_FailuresInUserTerms(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, dir string) []string // the doctor flags
		check string
		want  []string
	}{
		{"database under a file", func(t *testing.T, dir string) []string {
			t.Setenv("TOOLGATE_DB", filepath.Join(dir, "hello.txt", "state", "toolgate.db"))
			return nil
		}, "database", []string{"cannot open " + "DIR/hello.txt/state/toolgate.db: not a directory"}},
		{"database in a directory where nothing can be created", func(t *testing.T, dir string) []string {
			t.Setenv("TOOLGATE_DB", "/proc/no-such-dir/toolgate.db") // /proc takes no new files, whoever asks
			return nil
		}, "database", []string{"/proc/no-such-dir/toolgate.db does not exist and cannot be created: no file can be created in /proc: "}},
		{"database not a database", func(t *testing.T, dir string) []string {
			t.Setenv("TOOLGATE_DB", filepath.Join(dir, "hello.txt"))
			return nil
		}, "database", []string{"DIR/hello.txt"}},
		{"database locked", func(t *testing.T, dir string) []string {
			bboltOnly(t, whyLock)
			if r := toolgate(t, "", "run", "file.read", "--allow", "filesystem.read:.", "--input", `{"path":"hello.txt"}`); r.code != 0 {
				t.Fatalf("run: exit %d\n%s", r.code, r.stderr)
			}
			store, err := txn.Open(os.Getenv("TOOLGATE_DB"), nil)
			must(t, err)
			t.Cleanup(func() { store.Close() })
			return nil
		}, "database", []string{"locked by another process"}},
		{"policy missing", func(t *testing.T, dir string) []string {
			return []string{"--policy", "nope.json"}
		}, "policy", []string{"--policy: invalid policy: cannot open nope.json: no such file or directory"}},
		{"policy a directory", func(t *testing.T, dir string) []string {
			return []string{"--policy", "sub"}
		}, "policy", []string{"--policy: invalid policy: cannot read sub: is a directory"}},
		{"policy not JSON", func(t *testing.T, dir string) []string {
			must(t, os.WriteFile("policy.json", []byte("{"), 0o600))
			return []string{"--policy", "policy.json"}
		}, "policy", []string{"policy.json", "every capability is denied"}},
		{"registry missing", func(t *testing.T, dir string) []string {
			return []string{"--registry", "nope.yaml"}
		}, "registry", []string{"cannot open nope.yaml: no such file or directory"}},
		{"registry a directory", func(t *testing.T, dir string) []string {
			t.Setenv("TOOLGATE_REGISTRY", "sub")
			return nil
		}, "registry", []string{"cannot read sub: is a directory"}},
		{"registry invalid", func(t *testing.T, dir string) []string {
			must(t, os.WriteFile("registry.yaml", []byte("tools:\n  - id: x\n"), 0o600))
			return []string{"--registry", "registry.yaml"}
		}, "registry", []string{"registry.yaml:2", "no command can run a tool"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := workdir(t)
			flags := tc.setup(t, dir)
			rep, r := doctor(t, flags...)
			if r.code != ExitInternal || rep.OK {
				t.Fatalf("exit %d, ok %v, want a failure:\n%s", r.code, rep.OK, r.stdout)
			}
			var line *check
			for i, c := range rep.Checks {
				if c.Name == tc.check {
					line = &rep.Checks[i]
				} else if c.Status == checkFailed {
					t.Errorf("%s failed too: %s", c.Name, c.Detail)
				}
			}
			if line == nil || line.Status != checkFailed {
				t.Fatalf("the %s check did not fail: %+v", tc.check, line)
			}
			for _, w := range tc.want {
				if w = strings.ReplaceAll(w, "DIR", dir); !strings.Contains(line.Detail, w) {
					t.Errorf("%s: %q\ndoes not say %q", tc.check, line.Detail, w)
				}
			}
			if strings.Contains(line.Detail, "cannot cannot") || strings.Contains(line.Detail, ".toolgate-doctor-") {
				t.Errorf("%s: %q", tc.check, line.Detail)
			}
			if p := strings.Index(line.Detail, ": cannot "); p > 0 && strings.Contains(line.Detail[:p], "open ") && !strings.Contains(line.Detail[:p], "cannot open ") {
				t.Errorf("%s says its file error twice: %q", tc.check, line.Detail)
			}
			text := toolgate(t, "", append([]string{"doctor"}, flags...)...) // scanned as text too
			if !strings.Contains(text.stdout, line.Detail) {
				t.Errorf("the text report lacks the line %q:\n%s", line.Detail, text.stdout)
			}
		})
	}
}
