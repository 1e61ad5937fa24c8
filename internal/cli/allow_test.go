package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// --allow mistakes are refused before anything is recorded (unknown names,
// listing the known ones; '*'; ~user), ~ is expanded, and an unscoped
// filesystem or process grant is warned about; run and policy check parse
// --allow the same way.
func TestAllow_Mistakes(t *testing.T) {
	dir := workdir(t)
	t.Setenv("HOME", dir)
	db := os.Getenv("TOOLGATE_DB")
	read := []string{"run", "file.read", "--input", `{"path":"hello.txt"}`}
	for _, c := range []struct {
		allow string
		want  []string
	}{
		{"filesystem.raed:.", []string{`unknown capability "filesystem.raed"`, "filesystem.read", "filesystem.write", "process.exec", "idempotency.bypass"}},
		{"filesystem.raed", []string{`unknown capability "filesystem.raed"`}},
		{"*", []string{"'*' is not a wildcard"}},
		{"filesystem.read:*", []string{"'*' is not a wildcard"}},
		{"filesystem.read:" + dir + "/*", []string{"'*' is not a wildcard"}},
		{"filesystem.read:~bob", []string{"only ~ and ~/... are expanded"}},
	} {
		for _, args := range [][]string{append(read, "--allow", c.allow), {"policy", "check", "--allow", c.allow, "file.read"}} {
			r := toolgate(t, "", args...)
			if r.code != ExitUsage {
				t.Errorf("%v: exit %d, want 2\n%s", args, r.code, r.stderr)
			}
			for _, w := range c.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("%v: stderr lacks %q:\n%s", args, w, r.stderr)
				}
			}
		}
	}
	if dbCreated(t, db) {
		t.Fatal("a refused --allow created the database")
	}

	// ~ is the home directory.
	abs := `{"path":"` + filepath.Join(dir, "hello.txt") + `"}`
	for _, allow := range []string{"filesystem.read:~", "filesystem.read:~/"} {
		if r := toolgate(t, "", "run", "file.read", "--input", abs, "--allow", allow); r.code != 0 || strings.Contains(r.stderr, "warning") {
			t.Errorf("--allow %s: exit %d\n%s", allow, r.code, r.stderr)
		}
	}
	if r := toolgate(t, "", "policy", "check", "--allow", "filesystem.read:~", "file.read", "--json"); r.code != 0 || !strings.Contains(r.stdout, dir) {
		t.Errorf("policy check --allow filesystem.read:~: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// Unscoped: allowed, with a warning on stderr.
	for _, args := range [][]string{append(read, "--allow", "filesystem.read"), {"policy", "check", "--allow", "filesystem.read", "file.read"}} {
		if r := toolgate(t, "", args...); r.code != 0 || !strings.Contains(r.stderr, "warning: --allow filesystem.read has no scope") {
			t.Errorf("%v: exit %d, want 0 and a warning\n%s", args, r.code, r.stderr)
		}
	}
	if r := toolgate(t, "", "policy", "check", "--allow", "process.exec", "--allow", "filesystem.read:.", "exec_capture"); !strings.Contains(r.stderr, "warning: --allow process.exec has no scope") {
		t.Errorf("unscoped process.exec: exit %d, no warning\n%s", r.code, r.stderr)
	}
}
