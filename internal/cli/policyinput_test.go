package cli

import (
	"encoding/json"
	"fmt"
	"github.com/toolgate/toolgate/internal/explain"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/testchild"
)

// policy check decides with the call's input (--input, as run takes it:
// JSON, @FILE, - for stdin) exactly as run decides at AUTHORIZED: a
// capability scoped by an input field (a process tool's cwd requires
// filesystem.read covering it) is required when the input gives the
// field, and the exit code is run's. Without --input it lists such
// capabilities as also required when their field is given.
func TestPolicyCheck_Input(t *testing.T) {
	exe := testchild.Path(t) // built from the module, before leaving it
	dir := workdir(t)
	exec := []string{"--allow", "process.exec:" + exe}
	withCwd := fmt.Sprintf(`{"command":%q,"args":["exit","0"],"cwd":"sub"}`, exe)
	noCwd := fmt.Sprintf(`{"command":%q,"args":["exit","0"]}`, exe)
	must(t, os.WriteFile("input.json", []byte(withCwd), 0o600))
	type view struct {
		checkView
		Missing []string `json:"missing"`
	}
	check := func(t *testing.T, stdin string, args ...string) (view, run) {
		t.Helper()
		r := toolgate(t, stdin, append([]string{"policy", "check", "exec_status", "--json"}, args...)...)
		var v view
		if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
			t.Fatalf("%q: exit %d, not a decision: %v\n%s%s", args, r.code, err, r.stdout, r.stderr)
		}
		return v, r
	}

	t.Run("without input", func(t *testing.T) {
		v, r := check(t, "", exec...)
		if r.code != ExitCompleted || !v.Allowed || len(v.AlsoRequired) != 1 || v.AlsoRequired[0] != (explain.AlsoRequired{Capability: "filesystem.read:{cwd}", Field: "cwd"}) {
			t.Fatalf("exit %d, %+v\n%s", r.code, v, r.stdout)
		}
		text := toolgate(t, "", append([]string{"policy", "check", "exec_status"}, exec...)...)
		if !strings.Contains(text.stdout, "filesystem.read:{cwd}") || !strings.Contains(text.stdout, "also required when cwd is given") {
			t.Errorf("the text does not list the input's capability:\n%s", text.stdout)
		}
	})
	cwdScope := "filesystem.read:" + filepath.Join(dir, "sub")
	for _, tc := range []struct {
		name, stdin string
		args        []string
		code        int
		missing     []string
		effective   []string
	}{
		{"cwd, not granted", "", append([]string{"--input", withCwd}, exec...), ExitDenied, []string{cwdScope}, nil},
		{"cwd, not granted, from stdin", withCwd, append([]string{"--input", "-"}, exec...), ExitDenied, []string{cwdScope}, nil},
		{"cwd, not granted, from a file", "", append([]string{"--input", "@input.json"}, exec...), ExitDenied, []string{cwdScope}, nil},
		{"cwd, granted", "", append([]string{"--input", withCwd, "--allow", "filesystem.read:."}, exec...), ExitCompleted, nil,
			[]string{"process.exec:" + exe, "filesystem.read:" + dir}},
		{"no cwd", "", append([]string{"--input", noCwd}, exec...), ExitCompleted, nil, []string{"process.exec:" + exe}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, r := check(t, tc.stdin, tc.args...)
			if r.code != tc.code || !slices.Equal(v.Missing, tc.missing) || len(v.AlsoRequired) != 0 ||
				(tc.effective != nil && !slices.Equal(v.Effective, tc.effective)) {
				t.Fatalf("exit %d, want %d; missing %q, want %q; effective %q, want %q; also %v\n%s%s",
					r.code, tc.code, v.Missing, tc.missing, v.Effective, tc.effective, v.AlsoRequired, r.stdout, r.stderr)
			}
			// run decides the same, with the same input.
			args := append([]string{"run", "exec_status"}, tc.args...)
			if rr := toolgate(t, tc.stdin, args...); rr.code != tc.code {
				t.Fatalf("run exits %d, policy check %d:\n%s", rr.code, tc.code, rr.stderr)
			}
		})
	}
	t.Run("invalid input", func(t *testing.T) {
		r := toolgate(t, "", append([]string{"policy", "check", "exec_status", "--input", `{"command":7}`}, exec...)...)
		rr := toolgate(t, "", append([]string{"run", "exec_status", "--input", `{"command":7}`}, exec...)...)
		if r.code != ExitFailed || rr.code != ExitFailed || !strings.Contains(r.stderr, "/command") {
			t.Fatalf("policy check exits %d, run %d, want %d:\n%s", r.code, rr.code, ExitFailed, r.stderr)
		}
	})
}

// examples/registry.yaml's git.status requires what it needs and no more:
// process.exec:git for every call, and filesystem.read covering the cwd it
// is given (not an unscoped filesystem.read besides); policy check shows
// both, and decides a call in a granted directory as allowed.
func TestPolicyCheck_ExampleRegistry(t *testing.T) {
	reg, err := filepath.Abs("../../examples/registry.yaml")
	must(t, err)
	dir := workdir(t)
	r := toolgate(t, "", "policy", "check", "--registry", reg, "git.status", "--json")
	var v checkView
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || !slices.Equal(v.Required, []string{"process.exec:git"}) ||
		len(v.AlsoRequired) != 1 || v.AlsoRequired[0] != (explain.AlsoRequired{Capability: "filesystem.read:{cwd}", Field: "cwd"}) {
		t.Fatalf("exit %d, required %q, also %v (%v)\n%s%s", r.code, v.Required, v.AlsoRequired, err, r.stdout, r.stderr)
	}
	r = toolgate(t, "", "policy", "check", "--registry", reg, "git.status", "--json", "--input", `{"cwd":"sub"}`,
		"--allow", "process.exec:git", "--allow", "filesystem.read:sub")
	v = checkView{}
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || r.code != ExitCompleted ||
		!slices.Equal(v.Required, []string{"process.exec:git", "filesystem.read:" + filepath.Join(dir, "sub")}) {
		t.Fatalf("exit %d, required %q (%v)\n%s%s", r.code, v.Required, err, r.stdout, r.stderr)
	}
}
