package tools_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/internal/testchild"
	"github.com/toolgate/toolgate/lifecycle"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
)

// childBinary is the test child program (see internal/testchild).
func childBinary(t testing.TB) string { return testchild.Path(t) }

func caps(t testing.TB, ss ...string) []capability.Capability {
	t.Helper()
	cs, err := capability.ParseList(ss)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// openExecRuntime opens a runtime with the built-in tools (and more) where
// the principal "tester" holds grants.
func openExecRuntime(t testing.TB, grants []capability.Capability, more ...tools.Tool) *tgruntime.Runtime {
	t.Helper()
	reg := tools.NewRegistry()
	for _, tl := range append(tools.Builtins(), more...) {
		if err := reg.Register(tl); err != nil {
			t.Fatal(err)
		}
	}
	reg.Freeze()
	rt, err := tgruntime.Open(filepath.Join(t.TempDir(), "toolgate.db"), &tgruntime.Options{
		Registry: reg, NoSync: true,
		Grants: map[string][]capability.Capability{"tester": grants},
		Retry:  tgruntime.RetryPolicy{MaxRetries: -1},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close(context.Background()) })
	return rt
}

func execute(t testing.TB, rt *tgruntime.Runtime, tool string, input any) (*tgruntime.Result, error) {
	t.Helper()
	in, err := json.Marshal(input)
	if err != nil {
		t.Fatal(err)
	}
	return rt.Execute(context.Background(), tgruntime.Invocation{Tool: tool, Input: in, Principal: "tester"})
}

// completed runs tool and decodes its result, failing unless the
// invocation COMPLETED.
func completed(t *testing.T, rt *tgruntime.Runtime, tool string, input any) map[string]any {
	t.Helper()
	res, err := execute(t, rt, tool, input)
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	if res.State != lifecycle.Completed {
		t.Fatalf("%s: state %s", tool, res.State)
	}
	var out map[string]any
	if err := json.Unmarshal(res.Output, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// Launch failures fail the attempt with the kind as the error code, for
// every exec tool; nothing is reported as a process result.
func TestExecTools_LaunchFailures(t *testing.T) {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "notexec")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\necho ran\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rt := openExecRuntime(t, caps(t, "process.exec", "filesystem.read:"+dir))
	for _, tc := range []struct {
		name, code string
		input      map[string]any
	}{
		{"absolute path not found", "not_found", map[string]any{"command": filepath.Join(dir, "nope")}},
		{"bare name not found", "not_found", map[string]any{"command": "toolgate-no-such-command"}},
		{"not executable", "not_executable", map[string]any{"command": notExec}},
		{"bad working directory", "bad_working_directory", map[string]any{"command": "true", "cwd": filepath.Join(dir, "missing")}},
		{"relative command path", "launch_failed", map[string]any{"command": "./true"}},
	} {
		for _, tool := range []string{tools.ExecStatusID, tools.ExecCaptureID, tools.ExecWithInputID, tools.ExecID} {
			t.Run(tc.name+"/"+tool, func(t *testing.T) {
				in := tc.input
				if tool == tools.ExecWithInputID {
					in = map[string]any{"stdin": ""}
					for k, v := range tc.input {
						in[k] = v
					}
				}
				res, err := execute(t, rt, tool, in)
				var ee *tgruntime.ExecutionError
				var pe *tools.ProcessError
				if !errors.As(err, &ee) || !errors.As(err, &pe) || res.Error.Code != tc.code {
					t.Fatalf("err = %v (code %q); want an ExecutionError with code %s", err, res.Error.Code, tc.code)
				}
				if res.State != lifecycle.RolledBack || len(res.Output) != 0 {
					t.Errorf("state %s, output %s", res.State, res.Output)
				}
			})
		}
	}
}

// A non-zero exit is data: COMPLETED, success false, the exit code and
// stderr.
func TestExecTools_NonZeroExit(t *testing.T) {
	exe := childBinary(t)
	rt := openExecRuntime(t, caps(t, "process.exec:"+exe, "filesystem.read"))
	out := completed(t, rt, tools.ExecStatusID, map[string]any{"command": exe, "args": []string{"exit", "3", "it broke"}})
	if out["success"] != false || out["exit_code"] != 3.0 || out["stderr"] != "it broke\n" || out["timed_out"] != false {
		t.Errorf("result %v", out)
	}
	if _, ok := out["stdout"]; ok {
		t.Error("exec_status returned stdout")
	}
	out = completed(t, rt, tools.ExecCaptureID, map[string]any{"command": exe, "args": []string{"exit", "0"}})
	if out["success"] != true || out["exit_code"] != 0.0 || out["resolved_path"] != exe || out["operation"] != tools.ExecCaptureID {
		t.Errorf("result %v", out)
	}
}

// timeout_seconds stops the process group and returns the partial output,
// never as a success; the tool's maxExecutionTime still aborts the attempt.
func TestExecTools_Timeout(t *testing.T) {
	exe := childBinary(t)
	rt := openExecRuntime(t, caps(t, "process.exec:"+exe, "filesystem.read"))
	out := completed(t, rt, tools.ExecCaptureID, map[string]any{"command": exe, "args": []string{"sleep", "60"}, "timeout_seconds": 0.5})
	if out["timed_out"] != true || out["success"] != false || out["stdout"] != "partial\n" || out["signal"] != "killed" {
		t.Errorf("result %v; want timed_out with the partial output", out)
	}

	// A grandchild holding the output pipe does not hold the call: the
	// whole group is killed, and the partial output names it.
	out = completed(t, rt, tools.ExecCaptureID, map[string]any{"command": exe, "args": []string{"fork"}, "timeout_seconds": 0.5})
	if out["timed_out"] != true || out["success"] != false {
		t.Errorf("fork: %v", out)
	}
	// The child's "gpid=N" and the grandchild's output race: either order.
	gpid := -1
	stdout, _ := out["stdout"].(string)
	for line := range strings.Lines(stdout) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "gpid="); ok {
			if n, err := strconv.Atoi(v); err == nil {
				gpid = n
			}
		}
	}
	if gpid <= 0 {
		t.Fatalf("no grandchild pid in the partial output %q", out["stdout"])
	}
	waitGone(t, gpid)

	res, err := rt.Execute(context.Background(), tgruntime.Invocation{
		Tool: tools.ExecCaptureID, Principal: "tester",
		Input:  json.RawMessage(`{"command":` + quote(exe) + `,"args":["sleep","60"]}`),
		Limits: &tools.ResourceLimits{MaxExecutionTime: 300 * time.Millisecond},
	})
	var te *tgruntime.TimeoutError
	if !errors.As(err, &te) || res.State != lifecycle.RolledBack {
		t.Fatalf("err = %v, state %s; want the attempt's deadline to abort it", err, res.State)
	}

	// A timeout not below the attempt's limit is refused before anything runs.
	res, err = rt.Execute(context.Background(), tgruntime.Invocation{
		Tool: tools.ExecStatusID, Principal: "tester",
		Input:  json.RawMessage(`{"command":` + quote(exe) + `,"args":["sleep","60"],"timeout_seconds":1}`),
		Limits: &tools.ResourceLimits{MaxExecutionTime: time.Second},
	})
	if !errors.Is(err, tools.ErrInvalidValue) || res.Error.Code != "invalid_argument" {
		t.Fatalf("err = %v; want invalid_argument", err)
	}
	// And the schema refuses one at or past the declared limit.
	if res, err := execute(t, rt, tools.ExecStatusID, map[string]any{"command": exe, "timeout_seconds": 300}); !errors.Is(err, tgruntime.ErrValidation) || res.State != lifecycle.Failed {
		t.Fatalf("err = %v; want a validation error", err)
	}
}

// waitGone fails the test unless pid is gone (or a zombie awaiting its
// reaper) within a second.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	for range 100 {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return // gone
		}
		if f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:])); len(f) > 0 && f[0] == "Z" {
			return // dead, not yet reaped
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("process %d survived the group kill", pid)
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// 100 MB on each stream with 1 KB caps: the pipes are drained past the
// caps (no deadlock), the flags say so, the totals are counted, and our
// memory does not grow with the output.
func TestExecTools_Flood(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 200 MB through pipes")
	}
	exe := childBinary(t)
	rt := openExecRuntime(t, caps(t, "process.exec:"+exe, "filesystem.read"))
	const n = 100 << 20
	var before, after goruntime.MemStats
	goruntime.GC()
	goruntime.ReadMemStats(&before)
	out := completed(t, rt, tools.ExecCaptureID, map[string]any{
		"command": exe, "args": []string{"flood", "104857600"}, "max_stdout_bytes": 1024, "max_stderr_bytes": 1024,
	})
	goruntime.ReadMemStats(&after)
	if out["success"] != true || out["stdout_truncated"] != true || out["stderr_truncated"] != true ||
		out["stdout_bytes"] != float64(n) || out["stderr_bytes"] != float64(n) {
		t.Errorf("result flags %v %v %v %v %v", out["success"], out["stdout_truncated"], out["stderr_truncated"], out["stdout_bytes"], out["stderr_bytes"])
	}
	if s := out["stdout"].(string); s != strings.Repeat("x", 1024) {
		t.Errorf("stdout kept %d bytes", len(s))
	}
	if s := out["stderr"].(string); s != strings.Repeat("x", 1024) {
		t.Errorf("stderr kept %d bytes", len(s))
	}
	// 200 MB went through; what we allocated meanwhile must be a small
	// fraction of it (read buffers, the result, the runtime's records).
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 32<<20 {
		t.Errorf("allocated %d MiB while draining 200 MB", alloc>>20)
	}

	// exec_status keeps a bounded stderr summary and no stdout.
	out = completed(t, rt, tools.ExecStatusID, map[string]any{"command": exe, "args": []string{"flood", "1000000"}})
	if len(out["stderr"].(string)) != 4096 || out["stderr_truncated"] != true || out["stdout_bytes"] != 1e6 {
		t.Errorf("exec_status: stderr %d bytes, truncated %v, stdout_bytes %v", len(out["stderr"].(string)), out["stderr_truncated"], out["stdout_bytes"])
	}
}

// Without max_stdout_bytes and max_stderr_bytes, exec_capture and
// exec_with_input keep 64 KiB of each stream (the bounded process tools
// document (004) section 6, phase 1: no oversized output capture), say
// they truncated, and count every byte; exec_status keeps a 4 KiB stderr
// summary and no stdout.
func TestExecTools_DefaultCaps(t *testing.T) {
	exe := childBinary(t)
	rt := openExecRuntime(t, caps(t, "process.exec:"+exe, "filesystem.read"))
	const n = 1 << 20 // 1 MiB on each stream
	for _, tc := range []struct {
		tool  string
		input map[string]any
	}{
		{tools.ExecCaptureID, map[string]any{"command": exe, "args": []string{"flood", strconv.Itoa(n)}}},
		{tools.ExecWithInputID, map[string]any{"command": exe, "args": []string{"flood", strconv.Itoa(n)}, "stdin": ""}},
	} {
		out := completed(t, rt, tc.tool, tc.input)
		if s, _ := out["stdout"].(string); s != strings.Repeat("x", 65536) || out["stdout_truncated"] != true || out["stdout_bytes"] != float64(n) {
			t.Errorf("%s: stdout kept %d bytes, truncated %v, counted %v; want 65536, true, %d", tc.tool, len(s), out["stdout_truncated"], out["stdout_bytes"], n)
		}
		if s, _ := out["stderr"].(string); s != strings.Repeat("x", 65536) || out["stderr_truncated"] != true || out["stderr_bytes"] != float64(n) {
			t.Errorf("%s: stderr kept %d bytes, truncated %v, counted %v; want 65536, true, %d", tc.tool, len(s), out["stderr_truncated"], out["stderr_bytes"], n)
		}
	}
	out := completed(t, rt, tools.ExecStatusID, map[string]any{"command": exe, "args": []string{"flood", strconv.Itoa(n)}})
	if s, _ := out["stderr"].(string); len(s) != 4096 || out["stderr_truncated"] != true || out["stderr_bytes"] != float64(n) {
		t.Errorf("exec_status: stderr %d bytes, truncated %v; want a 4096-byte summary", len(s), out["stderr_truncated"])
	}
	if _, ok := out["stdout"]; ok {
		t.Errorf("exec_status returned stdout")
	}
}

// stdin goes to the process as given, and comes back through cat.
func TestExecTools_StdinRoundTrip(t *testing.T) {
	exe := childBinary(t)
	rt := openExecRuntime(t, caps(t, "process.exec:"+exe, "filesystem.read"))
	payload := "line one\n$(id); rm -rf /\n\ttabs and ünïcödé\n" + strings.Repeat("0123456789", 10000)
	for _, tool := range []string{tools.ExecWithInputID, tools.ExecID} {
		in := map[string]any{"command": exe, "args": []string{"cat"}, "stdin": payload}
		if tool == tools.ExecWithInputID {
			in["max_stdout_bytes"] = 1 << 20
		}
		out := completed(t, rt, tool, in)
		if out["stdout"] != payload || out["stdout_truncated"] != false {
			t.Errorf("%s: stdout differs from stdin (%d bytes back)", tool, len(out["stdout"].(string)))
		}
	}
	// Without stdin the process reads an empty /dev/null.
	out := completed(t, rt, tools.ExecCaptureID, map[string]any{"command": exe, "args": []string{"cat"}})
	if out["stdout"] != "" || out["success"] != true {
		t.Errorf("exec_capture cat: %v", out)
	}
}

// The child sees PATH and the variables the input names, nothing of ours.
func TestExecTools_EnvAllowlist(t *testing.T) {
	t.Setenv("TOOLGATE_TEST_SECRET", "must not leak")
	exe := childBinary(t)
	rt := openExecRuntime(t, caps(t, "process.exec:"+exe, "filesystem.read"))
	out := completed(t, rt, tools.ExecCaptureID, map[string]any{"command": exe, "args": []string{"env"}, "env": map[string]string{"B": "2", "A_1": "x=y"}})
	want := "A_1=x=y\nB=2\nPATH=" + tools.DefaultSearchPath + "\n"
	if out["stdout"] != want {
		t.Errorf("child environment:\n%s\nwant:\n%s", out["stdout"], want)
	}
	out = completed(t, rt, tools.ExecCaptureID, map[string]any{"command": exe, "args": []string{"env"}, "env": map[string]string{"PATH": "/opt/bin:/usr/bin"}})
	if out["stdout"] != "PATH=/opt/bin:/usr/bin\n" {
		t.Errorf("child environment with PATH: %q", out["stdout"])
	}
	for _, tc := range []struct {
		name  string
		env   map[string]string
		code  string
		state lifecycle.State
	}{
		{"bad name", map[string]string{"A-B": "x"}, "invalid_input", lifecycle.Failed},
		{"name with =", map[string]string{"A=B": "x"}, "invalid_input", lifecycle.Failed},
		{"NUL in value", map[string]string{"A": "x\x00y"}, "invalid_input", lifecycle.Failed},
		{"relative PATH entry", map[string]string{"PATH": ".:/usr/bin"}, "invalid_argument", lifecycle.RolledBack},
		{"empty PATH entry", map[string]string{"PATH": "/usr/bin::/bin"}, "invalid_argument", lifecycle.RolledBack},
		{"LD_PRELOAD", map[string]string{"LD_PRELOAD": "/tmp/evil.so"}, "invalid_argument", lifecycle.RolledBack},
		{"LD_LIBRARY_PATH", map[string]string{"LD_LIBRARY_PATH": "/tmp"}, "invalid_argument", lifecycle.RolledBack},
		{"GCONV_PATH", map[string]string{"GCONV_PATH": "/tmp"}, "invalid_argument", lifecycle.RolledBack},
		{"GIT_SSH_COMMAND", map[string]string{"GIT_SSH_COMMAND": "sh -c id"}, "invalid_argument", lifecycle.RolledBack},
		{"GIT_CONFIG_COUNT", map[string]string{"GIT_CONFIG_COUNT": "1"}, "invalid_argument", lifecycle.RolledBack},
		{"BASH_ENV", map[string]string{"BASH_ENV": "/tmp/x"}, "invalid_argument", lifecycle.RolledBack},
		{"PYTHONSTARTUP", map[string]string{"PYTHONSTARTUP": "/tmp/x.py"}, "invalid_argument", lifecycle.RolledBack},
		{"lowercase ld_preload", map[string]string{"ld_preload": "/tmp/evil.so"}, "invalid_argument", lifecycle.RolledBack},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := execute(t, rt, tools.ExecCaptureID, map[string]any{"command": exe, "args": []string{"env"}, "env": tc.env})
			if err == nil || res.Error.Code != tc.code || res.State != tc.state {
				t.Fatalf("err = %v, state %s; want %s", err, res.State, tc.code)
			}
		})
	}
}

// Hostile-looking arguments reach the program verbatim, one argument each:
// there is no shell to interpret them, and nothing makes a value an option
// that was not one. NUL, which no argument can hold, is refused.
func TestExecTools_ArgumentInjection(t *testing.T) {
	exe := childBinary(t)
	rt := openExecRuntime(t, caps(t, "process.exec:"+exe, "filesystem.read"))
	args := []string{"-rf", "--output=/etc/x", "$(touch /tmp/pwned)", "`id`", "a; rm -rf /", "x && y", "| cat", "line1\nline2", "*", "~", "$HOME", "'\"", ""}
	out := completed(t, rt, tools.ExecCaptureID, map[string]any{"command": exe, "args": append([]string{"argv"}, args...)})
	var got []string
	if err := json.Unmarshal([]byte(out["stdout"].(string)), &got); err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, "\x00") != strings.Join(args, "\x00") || len(got) != len(args) {
		t.Errorf("the child received %q; want %q", got, args)
	}
	res, err := execute(t, rt, tools.ExecCaptureID, map[string]any{"command": exe, "args": []string{"argv", "a\x00b"}})
	if !errors.Is(err, tgruntime.ErrValidation) || res.State != lifecycle.Failed {
		t.Errorf("NUL argument: err = %v, state %s; want a validation failure", err, res.State)
	}
	// Called directly, without the runtime's validation, the tool still
	// refuses it before anything runs.
	env := &tools.Env{Grants: caps(t, "process.exec", "filesystem.read")}
	defer env.Close()
	tl := toolByID(t, tools.ExecCaptureID)
	_, err = tl.Execute(context.Background(), env, json.RawMessage(`{"command":`+quote(exe)+`,"args":["argv","a\u0000b"]}`))
	var pe *tools.ProcessError
	var ae *tools.ArgumentError
	if !errors.As(err, &pe) || pe.Kind != "invalid_argument" || !errors.As(err, &ae) || ae.Field != "args[1]" {
		t.Errorf("direct call with NUL: %v", err)
	}
	// A shell is just another command, which must be granted by name.
	res, err = execute(t, rt, tools.ExecCaptureID, map[string]any{"command": "sh", "args": []string{"-c", "id"}})
	if !errors.Is(err, tools.ErrAccessDenied) || res.Error.Code != "capability_boundary" {
		t.Errorf("sh without a grant: %v", err)
	}
}

func toolByID(t *testing.T, id string) tools.Tool {
	t.Helper()
	for _, tl := range tools.Builtins() {
		if tl.Declaration().ID == id {
			return tl
		}
	}
	t.Fatalf("no built-in %s", id)
	return nil
}

// A search path with "." in it never runs a planted file from the working
// directory: the relative entry is refused and the error says so, and a
// command found further along the path runs instead.
func TestExecTools_PathWithDot(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"planted", "true"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\necho planted ran\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	trueAbs, err := exec.LookPath("true")
	if err != nil || !filepath.IsAbs(trueAbs) {
		t.Skip("no true command on this machine")
	}
	t.Chdir(dir) // "." is both our working directory and the child's
	env := &tools.Env{
		Grants:     caps(t, "process.exec", "filesystem.read:"+dir),
		WorkDir:    dir,
		SearchPath: ".:" + filepath.Dir(trueAbs),
	}
	defer env.Close()
	capture := toolByID(t, tools.ExecCaptureID)
	_, err = capture.Execute(context.Background(), env, json.RawMessage(`{"command":"planted","cwd":"."}`))
	var pe *tools.ProcessError
	if !errors.As(err, &pe) || pe.Kind != "not_found" || !strings.Contains(err.Error(), "relative PATH entry") {
		t.Fatalf("planted: %v; want not_found naming the refused relative entry", err)
	}
	out, err := capture.Execute(context.Background(), env, json.RawMessage(`{"command":"true","cwd":"."}`))
	if err != nil {
		t.Fatal(err)
	}
	var r tools.ExecResult
	json.Unmarshal(out, &r)
	if r.ResolvedPath != trueAbs || *r.Stdout != "" || r.Cwd != dir {
		t.Errorf("true ran from %s with stdout %q in %q; want %s", r.ResolvedPath, *r.Stdout, r.Cwd, trueAbs)
	}
	// which_command says the same without running anything.
	wout, err := toolByID(t, tools.WhichCommandID).Execute(context.Background(), env, json.RawMessage(`{"command":"planted"}`))
	if err != nil {
		t.Fatal(err)
	}
	var w tools.WhichCommandResult
	json.Unmarshal(wout, &w)
	if w.Found || !strings.Contains(w.Reason, "relative PATH entry") {
		t.Errorf("which_command planted: %+v", w)
	}
}

// which_command resolves without running, and says whether the grants
// allow running the command.
func TestWhichCommand(t *testing.T) {
	trueAbs, err := exec.LookPath("true")
	if err != nil || !filepath.IsAbs(trueAbs) {
		t.Skip("no true command on this machine")
	}
	rt := openExecRuntime(t, caps(t, "process.exec:true"))
	out := completed(t, rt, tools.WhichCommandID, map[string]any{"command": "true"})
	if out["found"] != true || out["path"] != trueAbs || out["resolved_by"] != "PATH entry "+filepath.Dir(trueAbs) || out["granted"] != true {
		t.Errorf("which true: %v", out)
	}
	out = completed(t, rt, tools.WhichCommandID, map[string]any{"command": "git"})
	if out["granted"] == true {
		t.Errorf("which git with only process.exec:true granted: %v", out)
	}
	out = completed(t, rt, tools.WhichCommandID, map[string]any{"command": "toolgate-no-such-command"})
	if out["found"] != false || out["path"] != "" || !strings.HasPrefix(out["reason"].(string), "not_found") {
		t.Errorf("which missing: %v", out)
	}
	// Without any process.exec grant the call is denied.
	rt = openExecRuntime(t, caps(t, "filesystem.read"))
	if res, err := execute(t, rt, tools.WhichCommandID, map[string]any{"command": "true"}); res.State != lifecycle.Denied {
		t.Errorf("without a grant: %v, %s", err, res.State)
	}
}

// which_command returns the structured fields every process tool returns
// (the bounded process tools document (004) section 5): operation,
// command, args, cwd and duration_ms, in the order the other tools have
// them, found or not.
func TestWhichCommand_StructuredFields(t *testing.T) {
	exe := childBinary(t)
	rt := openExecRuntime(t, caps(t, "process.exec:"+exe, "filesystem.read"))
	common := []string{"operation", "command", "args", "cwd", "duration_ms"}
	res, err := execute(t, rt, tools.ExecCaptureID, map[string]any{"command": exe, "args": []string{"exit", "0"}})
	if err != nil {
		t.Fatal(err)
	}
	wantOrder := keyOrder(t, res.Output, common)
	if len(wantOrder) != len(common) {
		t.Fatalf("exec_capture: %s", res.Output)
	}
	for _, command := range []string{exe, "toolgate-no-such-command"} {
		res, err := execute(t, rt, tools.WhichCommandID, map[string]any{"command": command})
		if err != nil {
			t.Fatal(err)
		}
		var out map[string]any
		if err := json.Unmarshal(res.Output, &out); err != nil {
			t.Fatal(err)
		}
		args, ok := out["args"].([]any)
		if out["operation"] != tools.WhichCommandID || out["command"] != command || !ok || len(args) != 0 || out["cwd"] != "" {
			t.Errorf("%s: %s; want operation which_command, the command, no args, no cwd", command, res.Output)
		}
		if d, ok := out["duration_ms"].(float64); !ok || d < 0 {
			t.Errorf("%s: duration_ms %v", command, out["duration_ms"])
		}
		if got := keyOrder(t, res.Output, common); !slices.Equal(got, wantOrder) {
			t.Errorf("%s: fields in the order %v, the other process tools %v", command, got, wantOrder)
		}
	}
	// duration_ms is wall time: a tool returning it cannot promise one
	// output per input.
	if toolByID(t, tools.WhichCommandID).Declaration().Deterministic {
		t.Error("which_command is declared deterministic, but returns duration_ms")
	}
}

// keyOrder returns the keys of the JSON object raw that are in keys, in
// the order raw has them.
func keyOrder(t *testing.T, raw []byte, keys []string) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("not an object: %s", raw)
	}
	var out []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		if k := tok.(string); slices.Contains(keys, k) {
			out = append(out, k)
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// The command must be granted (by name or by a path scope covering it):
// a command outside the grants is refused when the tool asks to run it;
// and the working directory must be inside a granted filesystem.read
// scope: one outside is DENIED at authorization, before anything runs.
func TestExecTools_Grants(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	exe := childBinary(t)
	rt := openExecRuntime(t, caps(t, "process.exec:true", "process.exec:"+filepath.Dir(exe), "filesystem.read:"+dir))
	completed(t, rt, tools.ExecStatusID, map[string]any{"command": "true"})
	out := completed(t, rt, tools.ExecCaptureID, map[string]any{"command": exe, "args": []string{"pwd"}, "cwd": dir})
	if real, _ := filepath.EvalSymlinks(dir); out["stdout"] != real || out["cwd"] != dir {
		t.Errorf("pwd: %v in %v; want %s", out["stdout"], out["cwd"], dir)
	}
	for _, in := range []map[string]any{
		{"command": "false"},
		{"command": "/bin/sh", "args": []string{"-c", "true"}},
	} {
		res, err := execute(t, rt, tools.ExecStatusID, in)
		if !errors.Is(err, tools.ErrAccessDenied) || res.State != lifecycle.RolledBack || res.Error.Code != "capability_boundary" {
			t.Errorf("%v: err = %v, state %s; want a recorded denial", in, err, res.State)
		}
	}
	for _, in := range []map[string]any{
		{"command": exe, "cwd": other},
		{"command": exe, "cwd": filepath.Join(dir, "..")},
	} {
		res, err := execute(t, rt, tools.ExecStatusID, in)
		if !errors.Is(err, tgruntime.ErrAuthorization) || res.State != lifecycle.Denied || res.Error.Code != "capability_denied" {
			t.Errorf("%v: err = %v, state %s; want DENIED", in, err, res.State)
		}
	}
}

// Replay: the same input gives the same result in every field but
// duration_ms, in the same order. And each case's result is the one its
// process gives (the success path of each tool, 004 section 7): a tool
// that ignored its input, or returned another process's result, would
// replay too, but fails here.
func TestExecTools_Replay(t *testing.T) {
	dir := t.TempDir()
	exe := childBinary(t)
	rt := openExecRuntime(t, caps(t, "process.exec:"+exe, "filesystem.read:"+dir))
	for _, tc := range []struct {
		tool  string
		input map[string]any
		want  map[string]any // fields of the result, as decoded from JSON
	}{
		{tools.ExecStatusID, map[string]any{"command": exe, "args": []string{"exit", "4", "bad"}},
			map[string]any{"success": false, "exit_code": 4.0, "stderr": "bad\n", "operation": tools.ExecStatusID}},
		{tools.ExecCaptureID, map[string]any{"command": exe, "args": []string{"argv", "a", "-b"}, "cwd": dir, "env": map[string]string{"Z": "1", "A": "2"}},
			map[string]any{"success": true, "exit_code": 0.0, "stdout": `["a","-b"]`, "cwd": dir, "stdout_truncated": false}},
		{tools.ExecCaptureID, map[string]any{"command": exe, "args": []string{"flood", "5000"}, "max_stdout_bytes": 100, "max_stderr_bytes": 10},
			map[string]any{"success": true, "stdout": strings.Repeat("x", 100), "stderr": strings.Repeat("x", 10),
				"stdout_truncated": true, "stderr_truncated": true, "stdout_bytes": 5000.0, "stderr_bytes": 5000.0}},
		{tools.ExecWithInputID, map[string]any{"command": exe, "args": []string{"cat"}, "stdin": "abc"},
			map[string]any{"success": true, "stdout": "abc", "stdout_bytes": 3.0, "operation": tools.ExecWithInputID}},
		{tools.ExecID, map[string]any{"command": exe, "args": []string{"env"}},
			map[string]any{"success": true, "stdout": "PATH=" + tools.DefaultSearchPath + "\n", "operation": tools.ExecID}},
		// Stopped by timeout_seconds: the partial output, timed_out and the
		// signal replay too.
		{tools.ExecCaptureID, map[string]any{"command": exe, "args": []string{"sleep", "60"}, "timeout_seconds": 0.2},
			map[string]any{"success": false, "timed_out": true, "stdout": "partial\n"}},
		{tools.WhichCommandID, map[string]any{"command": exe},
			map[string]any{"found": true, "path": exe, "granted": true}},
	} {
		var outs [2]string
		for i := range outs {
			res, err := execute(t, rt, tc.tool, tc.input)
			if err != nil {
				t.Fatalf("%s: %v", tc.tool, err)
			}
			var m map[string]any
			if err := json.Unmarshal(res.Output, &m); err != nil {
				t.Fatalf("%s: %v", tc.tool, err)
			}
			if _, ok := m["duration_ms"]; !ok {
				t.Fatalf("%s: no duration_ms in %s", tc.tool, res.Output)
			}
			for k, v := range tc.want {
				if got, ok := m[k]; !ok || got != v {
					t.Errorf("%s %v: %s = %#v; want %#v", tc.tool, tc.input["args"], k, got, v)
				}
			}
			// Blank the one field allowed to differ, keeping the byte
			// order of everything else.
			outs[i] = durationRE.ReplaceAllString(string(res.Output), `"duration_ms":0`)
		}
		if outs[0] != outs[1] {
			t.Errorf("%s: two runs differ:\n%s\n%s", tc.tool, outs[0], outs[1])
		}
	}
}

var durationRE = regexp.MustCompile(`"duration_ms":\d+`)

// The built-in registry holds file.read and the five process tools, each
// a full declaration that registers (schemas lint and compile).
func TestBuiltins_ProcessTools(t *testing.T) {
	var ids []string
	reg := tools.NewRegistry()
	for _, tl := range tools.Builtins() {
		if err := reg.Register(tl); err != nil {
			t.Fatal(err)
		}
		d := tl.Declaration()
		ids = append(ids, d.ID)
		if d.ID == tools.ExecID && !strings.Contains(d.Description, "Compatibility path") {
			t.Errorf("exec is not marked as the compatibility path: %q", d.Description)
		}
	}
	want := "file.read file.read file.read file.list file.list file.write file.write which_command exec_status exec_capture exec_with_input exec"
	if got := strings.Join(ids, " "); got != want {
		t.Errorf("Builtins() = %s; want %s", got, want)
	}
}
