package tools_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/lifecycle"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
)

// A valid one-tool file; the error cases below change one line of it.
const validFile = `tools:
  - id: child.argv
    version: 1.0.0
    description: prints its arguments
    command: CHILD
    argv: [argv, "{a}", "{n}", "--", "{b}", "{list}"]
    input_schema:
      $schema: https://json-schema.org/draft/2020-12/schema
      type: object
      properties:
        a: {type: string, description: placed before --}
        b: {type: string, description: placed after --}
        n: {type: integer, description: a number}
        list: {type: array, description: one argument each, items: {type: string}}
      required: []
      additionalProperties: false
    limits: {max_execution_time: 10s}
`

func withChild(t *testing.T, file string) string {
	return strings.ReplaceAll(file, "CHILD", childBinary(t))
}

// Loading fails closed with the file, the line and the reason.
func TestParseRegistryFile_Errors(t *testing.T) {
	for _, tc := range []struct {
		name, old, new string
		line           int
		reason         string
	}{
		{"unknown field", "    command: CHILD\n", "    command: CHILD\n    shell: true\n", 6, `unknown field "shell"`},
		{"unknown limit", "limits: {max_execution_time: 10s}", "limits: {max_execution_time: 10s, max_cpu: 3}", 17, `unknown field "max_cpu"`},
		{"missing description (RFC 6.3)", "a: {type: string, description: placed before --}", "a: {type: string}", 11, "every property must have a description"},
		{"missing $schema (RFC 6.3)", "      $schema: https://json-schema.org/draft/2020-12/schema\n", "", 7, "$schema"},
		{"input not an object", "      type: object\n", "      type: string\n", 9, `must be of type "object"`},
		{"duplicate id@version", "", "  - id: child.argv\n    version: 1.0.0\n    description: again\n    command: \"true\"\n    argv: []\n    input_schema: {$schema: https://json-schema.org/draft/2020-12/schema, type: object}\n    limits: {max_execution_time: 1s}\n", 18, "duplicate tool child.argv@1.0.0 (first declared at line 2)"},
		{"unknown field in template", `"{list}"]`, `"{lst}"]`, 6, `"lst", which is not a property`},
		{"spliced reference", `"{a}", "{n}"`, `"--out={a}", "{n}"`, 6, "splices a field reference"},
		{"unpaired brace", `"{a}", "{n}"`, `"{a}", "x}"`, 6, "unpaired"},
		{"boolean field placed", "n: {type: integer, description: a number}", "n: {type: boolean, description: a flag}", 6, "only string, number"},
		{"relative command", "command: CHILD", "command: bin/tool", 5, "bare name"},
		{"input capability of no property", "    command: CHILD\n", "    command: CHILD\n    capabilities: [\"filesystem.read:{nope}\"]\n", 6, `refers to "nope"`},
		{"input capability spliced", "    command: CHILD\n", "    command: CHILD\n    capabilities: [\"filesystem.read:{a}/x\"]\n", 6, "whole field reference"},
		{"bad capability", "    command: CHILD\n", "    command: CHILD\n    capabilities: [\"Bad Cap\"]\n", 6, "capabilities[0]"},
		{"bad version", "version: 1.0.0", "version: v1", 3, "semantic version"},
		{"bad duration", "max_execution_time: 10s", "max_execution_time: ten", 17, "not a positive duration"},
		{"relative search path", "    command: CHILD\n", "    command: CHILD\n    search_path: .:/usr/bin\n", 6, "not absolute"},
		{"PATH in env", "    command: CHILD\n", "    command: CHILD\n    env: {PATH: /tmp}\n", 6, "set search_path"},
		{"alias", "    command: CHILD\n", "    command: &c CHILD\n", 5, "anchors and aliases"},
		{"YAML syntax", "    version: 1.0.0\n", "    version: 1.0.0\n\tname: tabbed\n", 4, "tab character"}, // go.yaml.in says line 3
		{"key given twice", "    version: 1.0.0\n", "    version: 1.0.0\n    version: 2.0.0\n", 4, `field "version" given twice`},
		{"missing limits", "    limits: {max_execution_time: 10s}\n", "", 2, "missing limits"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := validFile
			if tc.old == "" {
				src += tc.new
			} else {
				if !strings.Contains(src, tc.old) {
					t.Fatalf("test case: %q not in the file", tc.old)
				}
				src = strings.Replace(src, tc.old, tc.new, 1)
			}
			reg, err := tools.ParseRegistryFile("reg.yaml", []byte(src), tools.Builtins()...)
			var fe *tools.RegistryFileError
			if !errors.As(err, &fe) || !errors.Is(err, tools.ErrRegistryFile) || reg != nil {
				t.Fatalf("err = %v; want a *RegistryFileError and no registry", err)
			}
			if fe.File != "reg.yaml" || fe.Line != tc.line || !strings.Contains(fe.Reason, tc.reason) {
				t.Errorf("got %s:%d %q; want line %d, reason containing %q", fe.File, fe.Line, fe.Reason, tc.line, tc.reason)
			}
			if !strings.HasPrefix(err.Error(), "tools: registry file reg.yaml:") {
				t.Errorf("message %q does not name file:line", err)
			}
		})
	}
	// An id@version a built-in already has.
	src := strings.Replace(validFile, "id: child.argv", "id: exec", 1)
	_, err := tools.ParseRegistryFile("reg.yaml", []byte(src), tools.Builtins()...)
	var fe *tools.RegistryFileError
	if !errors.As(err, &fe) || fe.Line != 2 || !errors.Is(err, tools.ErrDuplicate) {
		t.Errorf("duplicate of a built-in: %v", err)
	}
	if _, err := tools.LoadRegistryFile(filepath.Join(t.TempDir(), "missing.yaml")); !errors.Is(err, tools.ErrRegistryFile) {
		t.Errorf("missing file: %v", err)
	}
}

// The registry a file loads into is frozen: nothing can be added.
func TestParseRegistryFile_ReadOnly(t *testing.T) {
	reg, err := tools.ParseRegistryFile("reg.json", []byte(`{"tools": []}`), tools.Builtins()...)
	if err != nil {
		t.Fatal(err)
	}
	if !reg.Frozen() || !errors.Is(reg.Register(tools.FileRead()), tools.ErrFrozen) {
		t.Error("the loaded registry is not read-only")
	}
	if _, err := reg.Lookup(tools.ExecCaptureID, ""); err != nil {
		t.Error(err)
	}
}

// requires_approval makes a registry-file tool run only as an approved
// intent (Declaration.RequiresApproval), as a Go tool can; idempotent and
// deterministic are read the same way. Through the runtime, the tool is
// DENIED without an intent, whatever the grants, and runs once approved.
func TestParseRegistryFile_RequiresApproval(t *testing.T) {
	src := strings.Replace(withChild(t, validFile), "    limits:", "    requires_approval: true\n    idempotent: true\n    deterministic: true\n    limits:", 1)
	reg, err := tools.ParseRegistryFile("reg.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	e, err := reg.Lookup("child.argv", "")
	if err != nil {
		t.Fatal(err)
	}
	if d := e.Declaration(); !d.RequiresApproval || !d.Idempotent || !d.Deterministic {
		t.Fatalf("declaration %+v; want requires_approval, idempotent and deterministic", d)
	}
	reg, err = tools.ParseRegistryFile("reg.yaml", []byte(withChild(t, validFile)))
	if err != nil {
		t.Fatal(err)
	}
	if e, _ := reg.Lookup("child.argv", ""); e.Declaration().RequiresApproval {
		t.Fatal("requires_approval is true by default")
	}
	_, err = tools.ParseRegistryFile("reg.yaml", []byte(strings.Replace(src, "requires_approval: true", "requires_approval: yes please", 1)))
	var fe *tools.RegistryFileError
	if !errors.As(err, &fe) || fe.Line != 17 || !strings.Contains(fe.Reason, "requires_approval must be true or false") {
		t.Fatalf("a value that is not a boolean: %v", err)
	}

	t.Run("runtime", func(t *testing.T) {
		rt := openFileRuntime(t, src, "process.exec:"+childBinary(t))
		in := json.RawMessage(`{"a":"x"}`)
		res, err := rt.Execute(context.Background(), tgruntime.Invocation{Tool: "child.argv", Input: in, Principal: "tester"})
		var ae *tgruntime.AuthorizationError
		if !errors.As(err, &ae) || res.State != lifecycle.Denied || !strings.Contains(ae.Reason, "requires an approved intent") {
			t.Fatalf("without an intent: %v, state %s; want DENIED for want of an approved intent", err, res.State)
		}
		intent, err := rt.Propose(context.Background(), tgruntime.Invocation{Tool: "child.argv", Input: in, Principal: "tester"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rt.Approve(context.Background(), intent.ID, "alice"); err != nil {
			t.Fatal(err)
		}
		res, err = rt.Execute(context.Background(), tgruntime.Invocation{IntentID: intent.ID, IntentHash: intent.Hash, Principal: "tester"})
		if err != nil || res.State != lifecycle.Completed {
			t.Fatalf("approved intent: %v", err)
		}
	})
}

func openFileRuntime(t *testing.T, src string, grants ...string) *tgruntime.Runtime {
	t.Helper()
	reg, err := tools.ParseRegistryFile("reg.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	rt, err := tgruntime.Open(filepath.Join(t.TempDir(), "toolgate.db"), &tgruntime.Options{
		Registry: reg, NoSync: true,
		Grants: map[string][]capability.Capability{"tester": caps(t, grants...)},
		Retry:  tgruntime.RetryPolicy{MaxRetries: -1},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close(context.Background()) })
	return rt
}

// Template values are placed as whole arguments: shell metacharacters and
// newlines arrive verbatim; a value that would read as an option is
// refused before "--" and placed after it; NUL is refused; nothing runs
// when anything is refused.
func TestRegistryFile_ArgvInjection(t *testing.T) {
	exe := childBinary(t)
	rt := openFileRuntime(t, withChild(t, validFile), "process.exec:"+exe)
	for _, tc := range []struct {
		name  string
		input map[string]any
		want  []string // nil: refused
		field string
	}{
		{"metacharacters", map[string]any{"a": "$(touch /tmp/x); rm -rf / | cat `id` && \n x", "b": "*"}, []string{"argv", "$(touch /tmp/x); rm -rf / | cat `id` && \n x", "--", "*"}, ""},
		{"option after --", map[string]any{"b": "-rf", "list": []string{"--output=/etc/x", "-"}}, []string{"argv", "--", "-rf", "--output=/etc/x", "-"}, ""},
		{"absent fields give no argument", map[string]any{}, []string{"argv", "--"}, ""},
		{"number", map[string]any{"n": 42}, []string{"argv", "42", "--"}, ""},
		{"option before --", map[string]any{"a": "-rf"}, nil, "a"},
		{"long option before --", map[string]any{"a": "--output=/etc/x"}, nil, "a"},
		{"negative number before --", map[string]any{"n": -1}, nil, "n"},
		{"NUL", map[string]any{"b": "a\x00b"}, nil, "b"},
		{"NUL in a list", map[string]any{"list": []string{"ok", "a\x00b"}}, nil, "list[1]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := execute(t, rt, "child.argv", tc.input)
			if tc.want == nil {
				var ae *tools.ArgumentError
				if !errors.As(err, &ae) || ae.Field != tc.field || res.Error.Code != "invalid_argument" || res.State != lifecycle.RolledBack {
					t.Fatalf("err = %v; want invalid_argument for %s", err, tc.field)
				}
				if len(res.Output) != 0 {
					t.Error("a refused call has output")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var r tools.ExecResult
			json.Unmarshal(res.Output, &r)
			var got []string
			if err := json.Unmarshal([]byte(*r.Stdout), &got); err != nil {
				t.Fatalf("stdout %q: %v", *r.Stdout, err)
			}
			if strings.Join(got, "\x00") != strings.Join(tc.want[1:], "\x00") || strings.Join(r.Args, "\x00") != strings.Join(tc.want, "\x00") {
				t.Errorf("argv %q (result args %q); want %q", got, r.Args, tc.want)
			}
			if !r.Success || r.Operation != "child.argv" || r.Command != exe {
				t.Errorf("result %+v", r)
			}
		})
	}
	// The tool requires process.exec:<its command>.
	d := func() tools.Declaration {
		reg, _ := tools.ParseRegistryFile("reg.yaml", []byte(withChild(t, validFile)))
		e, _ := reg.Lookup("child.argv", "")
		return e.Declaration()
	}()
	if got := capability.Strings(d.RequiredCapabilities); len(got) != 1 || got[0] != "process.exec:"+exe {
		t.Errorf("capabilities %v", got)
	}
}

// The environment of a file tool: PATH, the inherited variables that are
// set, the fixed ones; nothing else.
func TestRegistryFile_Env(t *testing.T) {
	t.Setenv("TOOLGATE_TEST_INHERIT", "yes")
	t.Setenv("TOOLGATE_TEST_SECRET", "no")
	os.Unsetenv("TOOLGATE_TEST_UNSET")
	src := strings.Replace(withChild(t, validFile), `argv: [argv, "{a}", "{n}", "--", "{b}", "{list}"]`,
		"argv: [env]\n    env: {Z: last, A: first}\n    env_inherit: [TOOLGATE_TEST_INHERIT, TOOLGATE_TEST_UNSET]\n    search_path: /opt/none:/usr/bin", 1)
	rt := openFileRuntime(t, src, "process.exec:"+childBinary(t))
	out := completed(t, rt, "child.argv", map[string]any{})
	want := "A=first\nPATH=/opt/none:/usr/bin\nTOOLGATE_TEST_INHERIT=yes\nZ=last\n"
	if out["stdout"] != want {
		t.Errorf("environment:\n%s\nwant:\n%s", out["stdout"], want)
	}
}

// examples/registry.yaml loads, and its tools run for real.
func TestRegistryFile_Example(t *testing.T) {
	reg, err := tools.LoadRegistryFile("../examples/registry.yaml", tools.Builtins()...)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"git.status", "go.version", "file.sha256"} {
		if _, err := reg.Lookup(id, ""); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	rt, err := tgruntime.Open(filepath.Join(t.TempDir(), "toolgate.db"), &tgruntime.Options{
		Registry: reg, NoSync: true,
		Grants: map[string][]capability.Capability{"tester": caps(t, "process.exec:go", "process.exec:sha256sum", "process.exec:git", "filesystem.read:"+dir)},
		Retry:  tgruntime.RetryPolicy{MaxRetries: -1},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())

	t.Run("go.version", func(t *testing.T) {
		if !commandIn("go", "/usr/local/go/bin:"+tools.DefaultSearchPath) {
			t.Skip("go.version: no go command in the example's search path on this machine")
		}
		out := completed(t, rt, "go.version", map[string]any{})
		if out["success"] != true || !strings.HasPrefix(out["stdout"].(string), "go version go1.") {
			t.Errorf("go.version: %v", out)
		}
	})
	t.Run("file.sha256", func(t *testing.T) {
		if !commandIn("sha256sum", tools.DefaultSearchPath) {
			t.Skip("file.sha256: no sha256sum command on this machine")
		}
		data := []byte("toolgate\n")
		os.WriteFile(filepath.Join(dir, "-rf"), data, 0o644)
		sum := sha256.Sum256(data)
		// A file named like an option is safe: the template puts it after "--".
		out := completed(t, rt, "file.sha256", map[string]any{"path": "-rf", "cwd": dir})
		if out["success"] != true || out["stdout"] != hex.EncodeToString(sum[:])+"  -rf\n" {
			t.Errorf("file.sha256: %v", out)
		}
		out = completed(t, rt, "file.sha256", map[string]any{"path": "missing", "cwd": dir})
		if out["success"] != false || out["exit_code"] != 1.0 || !strings.Contains(out["stderr"].(string), "missing") {
			t.Errorf("file.sha256 of a missing file: %v", out)
		}
	})
	t.Run("git.status", func(t *testing.T) {
		if !commandIn("git", tools.DefaultSearchPath) {
			t.Skip("git.status: no git command on this machine")
		}
		repo := filepath.Join(dir, "repo")
		if out, err := exec.Command("git", "init", "-q", "-b", "main", repo).CombinedOutput(); err != nil {
			t.Skipf("git init: %v %s", err, out)
		}
		os.WriteFile(filepath.Join(repo, "new.txt"), nil, 0o644)
		out := completed(t, rt, "git.status", map[string]any{"cwd": repo})
		if out["success"] != true || !strings.Contains(out["stdout"].(string), "?? new.txt") {
			t.Errorf("git.status: %v", out)
		}
	})
}

func commandIn(name, path string) bool {
	for _, dir := range filepath.SplitList(path) {
		if fi, err := os.Stat(filepath.Join(dir, name)); err == nil && fi.Mode()&0o111 != 0 {
			return true
		}
	}
	return false
}

// FuzzArgvTemplate: whatever the template and the values, an expanded
// argv is the template's literals (braces unescaped) and the values, each
// a whole argument, in order; no value before "--" starts with "-"; no
// argument holds NUL. There is no shell, so a metacharacter is only ever a
// byte of an argument.
func FuzzArgvTemplate(f *testing.F) {
	f.Add("argv\x00{a}\x00--\x00{b}", "-rf", "--output=/etc/x")
	f.Add("{a}\x00{{x}}", "$(id)", "a; b")
	f.Add("--\x00{a}\x00{b}", "\n", "\x00")
	f.Add("x={a}", "y", "z")
	f.Add("{a}{b}", "1", "2")
	f.Fuzz(func(t *testing.T, tmpl, a, b string) {
		elems := strings.Split(tmpl, "\x00")
		tp, err := tools.ParseArgvTemplate(elems)
		if err != nil {
			var te *tools.TemplateError
			if !errors.As(err, &te) {
				t.Fatalf("error %T", err)
			}
			return
		}
		input := map[string]any{"a": a, "b": []any{b, a}}
		args, err := tp.Expand(input)
		if err != nil {
			var ae *tools.ArgumentError
			if !errors.As(err, &ae) {
				t.Fatalf("error %T", err)
			}
			return
		}
		// Rebuild what the expansion must be.
		var want []string
		afterDD := false
		for _, e := range elems {
			switch e {
			case "{a}":
				if !afterDD && strings.HasPrefix(a, "-") || strings.ContainsRune(a, 0) {
					t.Fatalf("value %q placed at %q", a, e)
				}
				want = append(want, a)
				continue
			case "{b}":
				for _, v := range []string{b, a} {
					if !afterDD && strings.HasPrefix(v, "-") || strings.ContainsRune(v, 0) {
						t.Fatalf("value %q placed at %q", v, e)
					}
				}
				want = append(want, b, a)
				continue
			}
			if len(e) > 2 && e[0] == '{' && e[len(e)-1] == '}' && !strings.Contains(e[1:len(e)-1], "{") && !strings.Contains(e[1:len(e)-1], "}") && isIdent(e[1:len(e)-1]) {
				continue // a reference to a field the input does not have
			}
			lit := strings.NewReplacer("{{", "{", "}}", "}").Replace(e)
			if lit == "--" {
				afterDD = true
			}
			want = append(want, lit)
		}
		if strings.Join(args, "\x00") != strings.Join(want, "\x00") || len(args) != len(want) {
			t.Fatalf("template %q with a=%q b=%q: got %q, want %q", elems, a, b, args, want)
		}
	})
}

func isIdent(s string) bool {
	for i, c := range s {
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return s != ""
}

// FuzzParseRegistryFile: any bytes either load or fail with a
// *RegistryFileError; never a panic, never another error.
func FuzzParseRegistryFile(f *testing.F) {
	f.Add([]byte(validFile))
	f.Add([]byte(`{"tools": []}`))
	f.Add([]byte("tools:\n  - id: &a x\n    version: *a\n"))
	if b, err := os.ReadFile("../examples/registry.yaml"); err == nil {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		reg, err := tools.ParseRegistryFile("fuzz.yaml", data)
		if err != nil {
			var fe *tools.RegistryFileError
			if !errors.As(err, &fe) || reg != nil {
				t.Fatalf("%T %v", err, err)
			}
			return
		}
		if !reg.Frozen() {
			t.Fatal("not frozen")
		}
	})
}

// A registry file tool with a cwd requires filesystem.read covering it
// only when the call gives one (the cwd brings filesystem.read:{cwd});
// "name:{field}" in capabilities is an input capability too.
func TestRegistryFile_InputCapabilities(t *testing.T) {
	exe := childBinary(t)
	dir := t.TempDir()
	src := withChild(t, `tools:
  - id: child.pwd
    version: 1.0.0
    description: prints its working directory
    command: CHILD
    argv: [pwd]
    cwd: "{cwd}"
    capabilities: ["state.read:{ns}"]
    input_schema:
      $schema: https://json-schema.org/draft/2020-12/schema
      type: object
      properties:
        cwd: {type: string, description: the working directory}
        ns: {type: string, description: a namespace}
      required: []
      additionalProperties: false
    limits: {max_execution_time: 10s}
`)
	reg, err := tools.ParseRegistryFile("reg.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	e, _ := reg.Lookup("child.pwd", "")
	d := e.Declaration()
	if got := capability.Strings(d.RequiredCapabilities); len(got) != 1 || got[0] != "process.exec:"+exe {
		t.Errorf("required: %q; want only process.exec", got)
	}
	if got := d.InputCapabilities; len(got) != 2 || got[0].String() != "state.read:{ns}" || got[1].String() != "filesystem.read:{cwd}" {
		t.Errorf("input capabilities: %v", got)
	}

	rt := openFileRuntime(t, src, "process.exec:"+exe)
	if out := completed(t, rt, "child.pwd", map[string]any{}); out["success"] != true {
		t.Errorf("no cwd: %v", out)
	}
	for _, in := range []map[string]any{{"cwd": dir}, {"ns": "orders"}} {
		res, err := execute(t, rt, "child.pwd", in)
		if !errors.Is(err, tgruntime.ErrAuthorization) || res.State != lifecycle.Denied {
			t.Errorf("%v without the grant: %v, state %s; want DENIED", in, err, res.State)
		}
	}
	rt = openFileRuntime(t, src, "process.exec:"+exe, "filesystem.read:"+dir)
	if out := completed(t, rt, "child.pwd", map[string]any{"cwd": dir}); out["success"] != true || out["cwd"] != dir {
		t.Errorf("cwd granted: %v", out)
	}
}
