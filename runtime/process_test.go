package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/internal/testchild"
	"github.com/toolgate/toolgate/lifecycle"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
)

// childBinary is the test child program (see internal/testchild).
func childBinary(t testing.TB) string { return testchild.Path(t) }

// procInput is the input of the test process tool: the child's arguments.
type procInput struct {
	Args []string `json:"args"`
}

const argsSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "properties": {"args": {"type": "array", "description": "arguments", "maxItems": 8, "items": {"type": "string", "maxLength": 256}}},
  "required": ["args"],
  "additionalProperties": false
}`

const procOutSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "properties": {"stdout": {"type": "string", "description": "standard output", "maxLength": 65536}},
  "required": ["stdout"],
  "additionalProperties": false
}`

// childTool runs the child binary with the input's arguments through
// env.Run, in dir, and reports each ProcessResult on results.
func childTool(t *testing.T, id string, limits tools.ResourceLimits, dir string, results chan<- *tools.ProcessResult) tools.Tool {
	exe := childBinary(t)
	return tools.NewRaw(tools.Declaration{
		ID: id, Version: "1.0.0", Name: id, Description: "runs the test child process",
		InputSchema: json.RawMessage(argsSchema), OutputSchema: json.RawMessage(procOutSchema),
		RequiredCapabilities: []capability.Capability{{Name: "process.exec", Scope: exe}, {Name: "filesystem.write", Scope: dir}},
		ResourceLimits:       limits,
	}, func(ctx context.Context, env *tools.Env, in json.RawMessage) (json.RawMessage, error) {
		var pi procInput
		if err := json.Unmarshal(in, &pi); err != nil {
			return nil, err
		}
		res, err := env.Run(ctx, tools.Command{Name: exe, Args: pi.Args, Dir: dir})
		if results != nil {
			results <- res
		}
		if err != nil {
			return nil, err
		}
		return json.Marshal(map[string]string{"stdout": string(res.Stdout)})
	})
}

func openProcRuntime(t *testing.T, tl tools.Tool, dir string) *tgruntime.Runtime {
	t.Helper()
	grants := map[string][]capability.Capability{"tester": {
		{Name: "process.exec", Scope: childBinary(t)}, {Name: "filesystem.write", Scope: dir},
	}}
	rt, _ := openRuntime(t, &tgruntime.Options{Grants: grants, Retry: tgruntime.RetryPolicy{MaxRetries: -1}}, tl)
	return rt
}

func runArgs(rt *tgruntime.Runtime, id string, args ...string) (*tgruntime.Result, error) {
	in, _ := json.Marshal(procInput{Args: args})
	return rt.Execute(context.Background(), tgruntime.Invocation{Tool: id, Input: in, Principal: "tester"})
}

func TestProcess_Completes(t *testing.T) {
	dir := t.TempDir()
	rt := openProcRuntime(t, childTool(t, "test.child", tools.ResourceLimits{MaxExecutionTime: 10 * time.Second}, dir, nil), dir)
	res, err := runArgs(rt, "test.child", "echo", "-rf", "$(id)", "a; b")
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]string
	json.Unmarshal(res.Output, &out)
	if out["stdout"] != "-rf\n$(id)\na; b\n" {
		t.Errorf("stdout = %q: arguments must arrive as they are, one each, never through a shell", out["stdout"])
	}
}

// Rule 6 for processes: a child that exceeds maxMemory is stopped and the
// attempt is reported as memory_limit.
func TestProcess_MemoryLimit(t *testing.T) {
	dir := t.TempDir()
	results := make(chan *tools.ProcessResult, 1)
	limits := tools.ResourceLimits{MaxExecutionTime: 30 * time.Second, MaxMemory: 64 << 20}
	rt := openProcRuntime(t, childTool(t, "test.hog", limits, dir, results), dir)
	res, err := runArgs(rt, "test.hog", "alloc", "1024")
	var re *tgruntime.ResourceError
	if !errors.As(err, &re) || re.Resource != "memory_limit" || res.Error.Code != "memory_limit" {
		t.Fatalf("err = %v; want a memory_limit ResourceError", err)
	}
	checkAttempt(t, rt, res, lifecycle.RolledBack, pathAborted)
	pr := <-results
	if pr.Limit != "memory_limit" || pr.Evidence == "" || pr.Memory == "" || pr.Success() {
		t.Errorf("process result: limit %q, evidence %q, memory %q", pr.Limit, pr.Evidence, pr.Memory)
	}
	t.Logf("stopped by %s: %s (max RSS %d MiB)", pr.Memory, pr.Evidence, pr.MaxRSS>>20)
	if ev := eventIn(t, rt, res.ExecutionID, lifecycle.Aborted); ev.Error == nil || ev.Error.Code != "memory_limit" {
		t.Errorf("the audit record does not say memory_limit: %+v", ev.Error)
	}
}

// A child writing past maxFileSize is stopped (RLIMIT_FSIZE) and reported
// as file_size_limit; the file never grows past the limit.
func TestProcess_FileSizeLimit(t *testing.T) {
	dir := t.TempDir()
	results := make(chan *tools.ProcessResult, 1)
	limits := tools.ResourceLimits{MaxExecutionTime: 30 * time.Second, MaxFileSize: 1 << 20}
	rt := openProcRuntime(t, childTool(t, "test.writer", limits, dir, results), dir)
	out := filepath.Join(dir, "out.bin")
	res, err := runArgs(rt, "test.writer", "write", out, strconv.Itoa(64<<20))
	var re *tgruntime.ResourceError
	if !errors.As(err, &re) || re.Resource != "file_size_limit" || res.Error.Code != "file_size_limit" {
		t.Fatalf("err = %v; want a file_size_limit ResourceError", err)
	}
	checkAttempt(t, rt, res, lifecycle.RolledBack, pathAborted)
	if pr := <-results; pr.Limit != "file_size_limit" {
		t.Errorf("process result limit %q", pr.Limit)
	}
	if fi, err := os.Stat(out); err != nil || fi.Size() > 1<<20 {
		t.Errorf("file: %v, %v; want at most 1 MiB", fi, err)
	}
}

// A child that forks a grandchild holding the output pipe is killed as a
// group at the deadline: Execute returns, and the tool's process call, long
// before the grandchild would let go of the pipe (it sleeps 60 s), and no
// process of the group survives. (The bounds are hang guards that tell a
// killed group from one waited for, not timings: a loaded machine may take
// seconds for what takes milliseconds on an idle one.)
func TestProcess_DeadlineKillsTheGroup(t *testing.T) {
	dir := t.TempDir()
	results := make(chan *tools.ProcessResult, 1)
	const deadline = 300 * time.Millisecond
	rt := openProcRuntime(t, childTool(t, "test.forker", tools.ResourceLimits{MaxExecutionTime: deadline}, dir, results), dir)
	start := time.Now()
	res, err := runArgs(rt, "test.forker", "fork")
	took := time.Since(start)
	var te *tgruntime.TimeoutError
	if !errors.As(err, &te) || res.Error.Code != "timeout" {
		t.Fatalf("err = %v; want a timeout", err)
	}
	checkAttempt(t, rt, res, lifecycle.RolledBack, pathAborted)
	const grandchildSleeps = 60 * time.Second // internal/testchild's fork
	if took > grandchildSleeps/2 {
		t.Errorf("Execute returned after %v: it waited for the grandchild", took)
	}
	var pr *tools.ProcessResult
	select {
	case pr = <-results:
	case <-time.After(grandchildSleeps/2 - time.Since(start)):
		t.Fatalf("the process call had not returned %v after it started: it waits for the grandchild", time.Since(start))
	}
	if !pr.TimedOut || pr.Success() {
		t.Errorf("process result: timed out %v, success %v", pr.TimedOut, pr.Success())
	}
	// The child prints "gpid=N" and the grandchild "partial"; the two
	// processes write concurrently, so the lines may come in either order.
	gpid := -1
	for line := range strings.Lines(string(pr.Stdout)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "gpid="); ok {
			if gpid, err = strconv.Atoi(v); err != nil {
				gpid = -1
			}
		}
	}
	if gpid <= 0 {
		t.Fatalf("no grandchild pid in the partial output %q", pr.Stdout)
	}
	waitGone(t, gpid, start.Add(grandchildSleeps/2))
}

// waitGone fails the test unless pid is gone (or a zombie awaiting its
// reaper) by the time guard: a process killed by SIGKILL dies at once, but
// on a loaded machine it may run its exit late.
func waitGone(t *testing.T, pid int, guard time.Time) {
	t.Helper()
	for time.Now().Before(guard) {
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

// Rule 7 for processes: the runner starts only granted commands, in a
// working directory inside a granted scope; anything else is a recorded
// denial and the attempt rolls back.
func TestProcess_CommandAndDirGrants(t *testing.T) {
	dir := t.TempDir()
	other := t.TempDir()
	exe := childBinary(t)
	run := func(cmd tools.Command) tools.Tool {
		return tools.NewRaw(tools.Declaration{
			ID: "test.runner", Version: "1.0.0", Name: "runner", Description: "runs a fixed command",
			InputSchema: json.RawMessage(msgSchema), OutputSchema: json.RawMessage(msgSchema),
			RequiredCapabilities: []capability.Capability{{Name: "process.exec", Scope: exe}, {Name: "filesystem.read", Scope: dir}},
			ResourceLimits:       tools.ResourceLimits{MaxExecutionTime: 10 * time.Second},
		}, func(ctx context.Context, env *tools.Env, in json.RawMessage) (json.RawMessage, error) {
			if _, err := env.Run(ctx, cmd); err != nil {
				return nil, err
			}
			return in, nil
		})
	}
	grants := map[string][]capability.Capability{"tester": {
		{Name: "process.exec"}, // the principal may run anything; the tool declared only the child
		{Name: "filesystem.read"},
	}}
	for _, tc := range []struct {
		name  string
		cmd   tools.Command
		allow bool
	}{
		{"declared command", tools.Command{Name: exe, Args: []string{"echo", "x"}}, true},
		{"declared command in a granted dir", tools.Command{Name: exe, Args: []string{"echo"}, Dir: dir}, true},
		{"undeclared command", tools.Command{Name: "true"}, false},
		{"undeclared absolute command", tools.Command{Name: "/bin/sh", Args: []string{"-c", "true"}}, false},
		{"dir outside the grants", tools.Command{Name: exe, Args: []string{"echo"}, Dir: other}, false},
		{"dir escaping with ..", tools.Command{Name: exe, Args: []string{"echo"}, Dir: filepath.Join(dir, "..")}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt, _ := openRuntime(t, &tgruntime.Options{Grants: grants}, run(tc.cmd))
			res, err := rt.Execute(context.Background(), invoke("test.runner", `{"msg":"x"}`))
			if tc.allow {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, tools.ErrAccessDenied) || res.State != lifecycle.RolledBack {
				t.Fatalf("err = %v, state %s; want a recorded denial", err, res.State)
			}
			if ev := eventIn(t, rt, res.ExecutionID, lifecycle.RolledBack); ev.Error == nil || ev.Error.Code != "capability_boundary" {
				t.Errorf("audit: %+v", ev.Error)
			}
		})
	}
}

// RFC-0001 8.2, resource usage: every process a tool runs is measured (CPU
// time, largest resident set), by tool and by the limit that stopped it.
func TestProcess_Metrics(t *testing.T) {
	dir := t.TempDir()
	grants := map[string][]capability.Capability{"tester": {
		{Name: "process.exec", Scope: childBinary(t)}, {Name: "filesystem.write", Scope: dir},
	}}
	limits := tools.ResourceLimits{MaxExecutionTime: 30 * time.Second, MaxFileSize: 1 << 20}
	tel := openTraced(t, &tgruntime.Options{Grants: grants, Retry: tgruntime.RetryPolicy{MaxRetries: -1}}, childTool(t, "test.child", limits, dir, nil))
	if _, err := runArgs(tel.rt, "test.child", "echo", "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := runArgs(tel.rt, "test.child", "write", filepath.Join(dir, "f"), strconv.Itoa(64<<20)); err == nil {
		t.Fatal("the file size limit did not stop the child")
	}
	var rm metricdata.ResourceMetrics
	if err := tel.metrics.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	counts := map[string]map[string]uint64{} // metric -> error.type -> count
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			add := func(attrs attribute.Set, n uint64, positive bool) {
				if !positive {
					t.Errorf("%s: a process measured at 0", m.Name)
				}
				if v, _ := attrs.Value("gen_ai.tool.name"); v.AsString() != "test.child" {
					t.Errorf("%s: tool %q", m.Name, v.AsString())
				}
				et, _ := attrs.Value("error.type")
				if counts[m.Name] == nil {
					counts[m.Name] = map[string]uint64{}
				}
				counts[m.Name][et.AsString()] += n
			}
			switch d := m.Data.(type) {
			case metricdata.Histogram[float64]:
				if m.Name == "toolgate.process.cpu_time" {
					for _, p := range d.DataPoints {
						add(p.Attributes, p.Count, p.Sum >= 0) // a short child may use less CPU than the clock tick
					}
				}
			case metricdata.Histogram[int64]:
				if m.Name == "toolgate.process.max_rss" {
					for _, p := range d.DataPoints {
						add(p.Attributes, p.Count, p.Sum > 0)
					}
				}
			}
		}
	}
	for _, name := range []string{"toolgate.process.cpu_time", "toolgate.process.max_rss"} {
		if got := counts[name]; got[""] != 1 || got["file_size_limit"] != 1 {
			t.Errorf("%s: %v; want one clean run and one stopped by file_size_limit", name, got)
		}
	}
}

// A process that does not start, or fails, is an ExecutionError whose code
// says how: the result, the audit event and the span's error.type carry it.
func TestProcess_FailureCodes(t *testing.T) {
	dir := t.TempDir()
	exe := childBinary(t)
	notExec := filepath.Join(dir, "notexec")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, code string
		cmd        tools.Command
	}{
		{"not found", "not_found", tools.Command{Name: filepath.Join(dir, "nope")}},
		{"not executable", "not_executable", tools.Command{Name: notExec}},
		{"bad working directory", "bad_working_directory", tools.Command{Name: exe, Args: []string{"echo"}, Dir: filepath.Join(dir, "missing")}},
		{"non-zero exit", "exit_status", tools.Command{Name: exe, Args: []string{"no-such-mode"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runner := tools.NewRaw(tools.Declaration{
				ID: "test.fails", Version: "1.0.0", Name: "fails", Description: "runs a failing command",
				InputSchema: json.RawMessage(msgSchema), OutputSchema: json.RawMessage(msgSchema),
				RequiredCapabilities: []capability.Capability{{Name: "process.exec"}, {Name: "filesystem.read", Scope: dir}},
				ResourceLimits:       tools.ResourceLimits{MaxExecutionTime: 10 * time.Second},
			}, func(ctx context.Context, env *tools.Env, in json.RawMessage) (json.RawMessage, error) {
				_, err := env.Run(ctx, tc.cmd)
				return in, err
			})
			grants := map[string][]capability.Capability{"tester": {{Name: "process.exec"}, {Name: "filesystem.read", Scope: dir}}}
			rt, _ := openRuntime(t, &tgruntime.Options{Grants: grants}, runner)
			res, err := rt.Execute(context.Background(), invoke("test.fails", `{"msg":"x"}`))
			var ee *tgruntime.ExecutionError
			if !errors.As(err, &ee) || !errors.Is(err, tools.ErrProcess) || res.Error.Code != tc.code {
				t.Fatalf("err = %v, code %q; want an ExecutionError with code %s", err, res.Error.Code, tc.code)
			}
			checkAttempt(t, rt, res, lifecycle.RolledBack, pathRolled)
		})
	}
}
