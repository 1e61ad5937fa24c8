package cli

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func exampleRegistry(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs("../../examples/registry.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// --registry (or $TOOLGATE_REGISTRY) adds the file's tools to the built-in
// ones for tools, describe, run and policy check.
func TestRegistryFlag(t *testing.T) {
	reg := exampleRegistry(t)
	workdir(t)
	r := toolgate(t, "", "--registry", reg, "tools")
	for _, want := range []string{"file.read", "exec_capture", "git.status", "go.version", "file.sha256", "process.exec:sha256sum,filesystem.read"} {
		if r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Fatalf("tools --registry: exit %d, no %s:\n%s%s", r.code, want, r.stdout, r.stderr)
		}
	}
	t.Setenv("TOOLGATE_REGISTRY", reg)
	r = toolgate(t, "", "describe", "go.version")
	if r.code != 0 || !strings.Contains(r.stdout, "go.version@1.0.0") || !strings.Contains(r.stdout, "process.exec:go") {
		t.Fatalf("describe with TOOLGATE_REGISTRY: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = toolgate(t, "", "policy", "check", "--allow", "process.exec:sha256sum", "file.sha256")
	if r.code != ExitDenied || !strings.Contains(r.stdout+r.stderr, "filesystem.read") {
		t.Fatalf("policy check file.sha256 without filesystem.read: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if _, err := exec.LookPath("sha256sum"); err != nil {
		t.Skip("no sha256sum on this machine")
	}
	r = toolgate(t, "", "run", "file.sha256", "--allow", "process.exec:sha256sum", "--allow", "filesystem.read:.",
		"--input", `{"path":"hello.txt","cwd":"."}`)
	var out struct {
		Success bool   `json:"success"`
		Stdout  string `json:"stdout"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); r.code != 0 || err != nil || !out.Success ||
		out.Stdout != "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03  hello.txt\n" {
		t.Fatalf("run file.sha256: exit %d %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}
}

// A registry file that does not load is a usage error naming file:line,
// and nothing runs.
func TestRegistryFlag_BadFile(t *testing.T) {
	dir := workdir(t)
	bad := filepath.Join(dir, "bad.yaml")
	must(t, os.WriteFile(bad, []byte("tools:\n  - id: x\n    shell: true\n"), 0o600))
	for _, args := range [][]string{{"tools"}, {"describe", "file.read"}, {"run", "file.read", "--allow", "filesystem.read:.", "--input", `{"path":"hello.txt"}`}} {
		r := toolgate(t, "", append([]string{"--registry", bad}, args...)...)
		if r.code != ExitUsage || !strings.Contains(r.stderr, "bad.yaml:3: unknown field \"shell\"") || r.stdout != "" {
			t.Errorf("%v: exit %d\n%s%s", args, r.code, r.stdout, r.stderr)
		}
	}
	r := toolgate(t, "", "--registry", filepath.Join(dir, "missing.yaml"), "tools")
	if r.code != ExitUsage || !strings.Contains(r.stderr, "missing.yaml") {
		t.Errorf("missing file: exit %d\n%s", r.code, r.stderr)
	}
}

// The README's exec_capture command: a process tool through the CLI.
func TestRun_ExecCapture(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git on this machine")
	}
	workdir(t)
	r := toolgate(t, "", "run", "exec_capture", "--allow", "process.exec:git", "--allow", "filesystem.read:.",
		"--input", `{"command":"git","args":["--version"],"cwd":"."}`)
	if r.code != 0 || !strings.Contains(r.stdout, `"stdout": "git version`) || !strings.Contains(r.stdout, `"success": true`) {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// process.exec:true meets the tool's unscoped process.exec
	// requirement, but the handle refuses git itself: a recorded denial
	// and a rollback, exit 4 (an authorization failure) with the --allow
	// that grants it.
	r = toolgate(t, "", "run", "exec_capture", "--allow", "process.exec:true", "--allow", "filesystem.read:.",
		"--input", `{"command":"git","args":["--version"]}`)
	if r.code != ExitDenied || !strings.Contains(r.stderr, "capability_boundary") || !strings.Contains(r.stderr, "--allow process.exec:git") {
		t.Fatalf("git not granted: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
