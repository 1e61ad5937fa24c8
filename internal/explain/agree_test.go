package explain_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/internal/explain"
	"github.com/toolgate/toolgate/lifecycle"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
)

// agreeTree makes, in a new directory, the granted directory grant (a.txt,
// sub/, a link out of it to a directory, one to a file, a relative link
// inside, an absolute link inside, a dangling link) and the directory
// outside it holds (secret).
func agreeTree(t *testing.T) (grant, outside string) {
	t.Helper()
	// Not t.TempDir: its name holds the test's, and file.read@1.0.0
	// takes appendix A's names only.
	base, err := os.MkdirTemp("", "toolgate-agree-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	grant, outside = filepath.Join(base, "grant"), filepath.Join(base, "outside")
	for _, d := range []string{filepath.Join(grant, "sub"), outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for p, content := range map[string]string{filepath.Join(grant, "a.txt"): "a\n", filepath.Join(outside, "secret"): "s\n"} {
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{
		"out":      outside,
		"outfile":  filepath.Join(outside, "secret"),
		"rellink":  "a.txt",
		"relout":   "../outside/secret",
		"abslink":  filepath.Join(grant, "a.txt"),
		"dangling": filepath.Join(base, "nowhere", "x"),
	} {
		if err := os.Symlink(target, filepath.Join(grant, link)); err != nil {
			t.Fatal(err)
		}
	}
	return grant, outside
}

// The explanation (explain.Call: `policy check --input` and the web UI's
// intent page), the runtime's own check (Runtime.Decide: the MCP server's)
// and the run agree, for every built-in tool, on inputs whose path escapes
// the grant by "..", as an absolute path, by a symbolic link (to a
// directory, to a file, relative, dangling), or names a missing place: a
// call explained as allowed is never DENIED, and one explained as denied
// is DENIED before it runs. Nothing is refused later by a handle (rule 7).
func TestExplainAgreesWithRun(t *testing.T) {
	type pathCase struct {
		name string
		path func(grant, outside string) string
		// allowed is what the decision must be (the agreement is checked
		// in any case; this pins the decision itself).
		allowed bool
	}
	cases := []pathCase{
		{"inside", func(g, o string) string { return filepath.Join(g, "a.txt") }, true},
		{"inside relative", func(g, o string) string { return "a.txt" }, true},
		{"inside directory", func(g, o string) string { return filepath.Join(g, "sub") }, true},
		{"dotdot", func(g, o string) string { return filepath.Join(g, "sub") + "/../../outside/secret" }, false},
		{"dotdot relative", func(g, o string) string { return "sub/../../outside/secret" }, false},
		{"absolute outside", func(g, o string) string { return filepath.Join(o, "secret") }, false},
		{"absolute system file", func(g, o string) string { return "/etc/shadow" }, false},
		{"symlink to a directory outside", func(g, o string) string { return filepath.Join(g, "out") }, false},
		{"through a symlink outside", func(g, o string) string { return filepath.Join(g, "out", "secret") }, false},
		{"symlink to a file outside", func(g, o string) string { return filepath.Join(g, "outfile") }, false},
		{"relative symlink outside", func(g, o string) string { return filepath.Join(g, "relout") }, false},
		{"relative symlink inside", func(g, o string) string { return filepath.Join(g, "rellink") }, true},
		{"absolute symlink inside", func(g, o string) string { return filepath.Join(g, "abslink") }, false},
		{"dangling symlink", func(g, o string) string { return filepath.Join(g, "dangling") }, false},
		{"missing inside", func(g, o string) string { return filepath.Join(g, "missing.txt") }, true},
		{"missing directory inside", func(g, o string) string { return filepath.Join(g, "nodir", "x.txt") }, true},
		{"missing outside", func(g, o string) string { return filepath.Join(o, "missing.txt") }, false},
	}
	for _, tl := range tools.Builtins() {
		decl := tl.Declaration()
		var props struct {
			Properties map[string]any `json:"properties"`
		}
		if err := json.Unmarshal(decl.InputSchema, &props); err != nil {
			t.Fatal(err)
		}
		field := ""
		for _, f := range []string{"path", "cwd"} {
			if _, ok := props.Properties[f]; ok {
				field = f
			}
		}
		t.Run(decl.Key(), func(t *testing.T) {
			if field == "" {
				// No input path (which_command): the explanation and the
				// run still agree.
				t.Run("no path", func(t *testing.T) {
					grant, _ := agreeTree(t)
					agreeIn(t, decl, grant, json.RawMessage(`{"command":"true"}`), true)
				})
				return
			}
			for _, c := range cases {
				agreeCase(t, decl, field, c.name, c.path, c.allowed)
			}
		})
	}
}

// agreeCase runs one case in a new tree.
func agreeCase(t *testing.T, decl tools.Declaration, field, name string, path func(grant, outside string) string, allowed bool) {
	t.Helper()
	t.Run(name, func(t *testing.T) {
		grant, outside := agreeTree(t)
		in := map[string]any{field: path(grant, outside)}
		switch {
		case decl.ID == "file.write":
			in["content"] = "x\n"
		case field == "cwd":
			in["command"] = "true"
			if decl.ID == tools.ExecWithInputID {
				in["stdin"] = ""
			}
		}
		raw, err := json.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		agreeIn(t, decl, grant, raw, allowed)
	})
}

// agreeIn explains the call of decl with raw for a principal granted
// grant (read and write) and true, then runs it, in the working directory
// grant.
func agreeIn(t *testing.T, decl tools.Declaration, grant string, raw json.RawMessage, allowed bool) {
	t.Helper()
	grants := []capability.Capability{
		capability.MustParse("filesystem.read:" + grant), capability.MustParse("filesystem.write:" + grant),
		capability.MustParse("process.exec:true"),
	}
	policy, err := capability.NewPolicy(map[string][]capability.Capability{"agent": grants})
	if err != nil {
		t.Fatal(err)
	}
	reg := tools.NewRegistry()
	for _, tl := range tools.Builtins() {
		if err := reg.Register(tl); err != nil {
			t.Fatal(err)
		}
	}
	reg.Freeze()
	e, err := reg.Lookup(decl.ID, decl.Version)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.ValidateInput(raw); err != nil {
		t.Fatalf("%s does not take %s: %v", decl.Key(), raw, err)
	}
	rt, err := tgruntime.Open(filepath.Join(t.TempDir(), "toolgate.db"), &tgruntime.Options{Registry: reg, Policy: policy, NoSync: true, WorkDir: grant})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())

	v := explain.Call(policy, "agent", decl, raw, nil, grant, time.Now(), tgruntime.Message)
	d := rt.Decide("agent", e, raw, nil)
	res, runErr := rt.Execute(context.Background(), tgruntime.Invocation{Tool: decl.ID, Version: decl.Version, Input: raw, Principal: "agent"})
	if res == nil {
		t.Fatalf("Execute(%s): %v", raw, runErr)
	}
	denied := res.State == lifecycle.Denied
	var ae *tgruntime.AuthorizationError
	errors.As(runErr, &ae)
	if v.Allowed == denied || d.Allowed() != v.Allowed {
		t.Fatalf("%s %s: explained allowed=%v (reason %q, missing %v), Runtime.Decide allowed=%v, the run %s: %v",
			decl.Key(), raw, v.Allowed, v.Reason, v.Missing, d.Allowed(), res.State, runErr)
	}
	if v.Allowed != allowed {
		t.Errorf("%s %s: allowed=%v (reason %q, missing %v), want %v", decl.Key(), raw, v.Allowed, v.Reason, v.Missing, allowed)
	}
	if ae != nil && !denied {
		t.Errorf("%s %s: refused by a handle during the run (%v), after the decision allowed it", decl.Key(), raw, runErr)
	}
	if !v.Allowed {
		// The explanation names the grant the path falls outside of, never
		// a grant of where it went.
		found := false
		for _, p := range v.Paths {
			if slices.Contains(p.Outside, "filesystem.read:"+grant) || slices.Contains(p.Outside, "filesystem.write:"+grant) {
				found = true
			}
		}
		if !found {
			t.Errorf("%s %s: denied, but no path names the grant it falls outside of: %+v", decl.Key(), raw, v.Paths)
		}
	}
}
