package proc_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/toolgate/toolgate/internal/proc"
)

// testExe is the test binary, run again as every child (see TestMain).
func testExe(t testing.TB) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

func childSpec(t testing.TB, kind string, args ...string) proc.Spec {
	return proc.Spec{
		Path:      testExe(t),
		Args:      args,
		Env:       []string{childVar + "=" + kind},
		MaxStdout: 1 << 20,
		MaxStderr: 1 << 20,
	}
}

// prlimitRunner never uses cgroups, so the prlimit path runs on every
// machine.
func prlimitRunner(t testing.TB) *proc.Runner {
	t.Helper()
	opts := proc.DefaultOptions()
	opts.NoCgroup = true
	r, err := proc.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if c := r.Capabilities(); c.Memory != proc.MemoryPrlimit {
		t.Fatalf("prlimit unavailable on Linux? %+v", c)
	}
	return r
}

// grandchildPid reads the "gpid=N" line the fork child prints.
func grandchildPid(t *testing.T, stdout []byte) int {
	t.Helper()
	m := regexp.MustCompile(`gpid=(\d+)`).FindSubmatch(stdout)
	if m == nil {
		t.Fatalf("no gpid in stdout %q", stdout)
	}
	pid, _ := strconv.Atoi(string(m[1]))
	return pid
}

// assertGone reaps pid, an orphan reparented to the test process (a
// subreaper, see TestMain), and checks that SIGKILL ended it and that no
// process with that pid is left.
func assertGone(t *testing.T, pid int) {
	t.Helper()
	var ws unix.WaitStatus
	for i := 0; ; i++ {
		got, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil)
		if err != nil {
			t.Fatalf("wait4(%d): %v (not our orphan?)", pid, err)
		}
		if got == pid {
			break
		}
		if i == 500 { // 5 s: it was not killed
			t.Fatalf("grandchild %d still running after the call returned", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !ws.Signaled() || ws.Signal() != unix.SIGKILL {
		t.Errorf("grandchild %d ended with %v, want SIGKILL", pid, ws)
	}
	if err := unix.Kill(pid, 0); !errors.Is(err, unix.ESRCH) {
		t.Errorf("kill(%d, 0) after reaping = %v, want ESRCH", pid, err)
	}
}

func TestRun_Env(t *testing.T) {
	t.Parallel()
	r := prlimitRunner(t)
	t.Run("allowlist", func(t *testing.T) {
		spec := childSpec(t, "env")
		spec.Env = append(spec.Env, "A=1", "B=two words", "EMPTY=")
		res, err := r.Run(context.Background(), spec)
		if err != nil {
			t.Fatal(err)
		}
		got := strings.Split(string(res.Stdout.Data), "\n")
		want := []string{"A=1", "B=two words", "EMPTY=", childVar + "=env"}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("child environment = %q, want exactly %q", got, want)
		}
	})
	t.Run("nil is empty", func(t *testing.T) {
		res, err := r.Run(context.Background(), proc.Spec{Path: "env", MaxStdout: 1 << 16})
		if err != nil {
			t.Fatal(err)
		}
		if res.Stdout.Total != 0 {
			t.Errorf("env printed %q, want nothing", res.Stdout.Data)
		}
	})
}

func TestRun_Stdin(t *testing.T) {
	t.Parallel()
	in := make([]byte, 1<<20) // more than a pipe holds
	rand.Read(in)
	spec := childSpec(t, "stdin")
	spec.Stdin = bytes.NewReader(in)
	spec.MaxStdout = 2 << 20
	res, err := prlimitRunner(t).Run(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(res.Stdout.Data, in) || res.Stdout.Truncated {
		t.Errorf("stdin round trip: got %d bytes (truncated %v), want the %d sent", len(res.Stdout.Data), res.Stdout.Truncated, len(in))
	}
	// Without Stdin the child reads /dev/null.
	spec.Stdin = nil
	if res, err = prlimitRunner(t).Run(context.Background(), spec); err != nil || res.Stdout.Total != 0 {
		t.Errorf("nil Stdin: %v, %d bytes", err, res.Stdout.Total)
	}
}

func TestRun_LaunchErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	noExec := filepath.Join(dir, "script")
	if err := os.WriteFile(noExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		spec proc.Spec
		kind proc.LaunchKind
		is   error
	}{
		{"not found", proc.Spec{Path: "no-such-command-toolgate"}, proc.KindNotFound, proc.ErrNotFound},
		{"absolute not found", proc.Spec{Path: "/no/such/command"}, proc.KindNotFound, proc.ErrNotFound},
		{"no x bit", proc.Spec{Path: noExec}, proc.KindNotExecutable, proc.ErrNotExecutable},
		{"directory", proc.Spec{Path: dir}, proc.KindNotExecutable, proc.ErrNotExecutable},
		{"relative path", proc.Spec{Path: "./true"}, proc.KindOther, proc.ErrLaunch},
		{"dir missing", proc.Spec{Path: "true", Dir: filepath.Join(dir, "missing")}, proc.KindBadDir, proc.ErrBadDir},
		{"dir is a file", proc.Spec{Path: "true", Dir: noExec}, proc.KindBadDir, proc.ErrBadDir},
		{"dir relative", proc.Spec{Path: "true", Dir: "."}, proc.KindBadDir, proc.ErrBadDir},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := prlimitRunner(t).Run(context.Background(), tc.spec)
			var le *proc.LaunchError
			if !errors.As(err, &le) || le.Kind != tc.kind {
				t.Fatalf("err = %v, want a *LaunchError of kind %s", err, tc.kind)
			}
			if !errors.Is(err, tc.is) || !errors.Is(err, proc.ErrLaunch) {
				t.Errorf("errors.Is(%v, %v) = false", err, tc.is)
			}
			if res != nil {
				t.Errorf("a launch failure returned a Result: %+v", res)
			}
			if proc.ErrorType(err) != string(tc.kind) {
				t.Errorf("ErrorType = %q, want %q", proc.ErrorType(err), tc.kind)
			}
		})
	}
}

func TestRun_InvalidSpec(t *testing.T) {
	t.Parallel()
	for _, spec := range []proc.Spec{
		{Path: "true", Env: []string{"NOEQUALS"}},
		{Path: "true", Env: []string{"=value"}},
		{Path: "true", Env: []string{"A=b\x00c"}},
		{Path: "true", Args: []string{"a\x00b"}},
		{Path: "true", MaxStdout: -1},
		{Path: "true", MaxMemory: -1},
		{Path: "true", Timeout: -time.Second},
	} {
		res, err := prlimitRunner(t).Run(context.Background(), spec)
		if !errors.Is(err, proc.ErrInvalidSpec) || res != nil {
			t.Errorf("Run(%+v) = %v, %v; want ErrInvalidSpec and no result", spec, res, err)
		}
	}
}

func TestRun_Result(t *testing.T) {
	t.Parallel()
	want, how, err := proc.Resolve("true", proc.DefaultOptions().SearchPath)
	if err != nil {
		t.Fatal(err)
	}
	res, err := prlimitRunner(t).Run(context.Background(), proc.Spec{Path: "true"})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Success() || res.ExitCode != 0 || res.Signal != 0 || res.TimedOut || res.Limit != "" {
		t.Errorf("true: %+v, want success", res)
	}
	if res.Path != want || res.ResolvedBy != how || !filepath.IsAbs(res.Path) {
		t.Errorf("Path %q (%s), want %q (%s)", res.Path, res.ResolvedBy, want, how)
	}
	if res.Pid <= 0 || res.Duration <= 0 || res.Usage.MaxRSS <= 0 {
		t.Errorf("pid %d, duration %v, max RSS %d: want all positive", res.Pid, res.Duration, res.Usage.MaxRSS)
	}
	if res.Memory != "" {
		t.Errorf("Memory = %q without MaxMemory", res.Memory)
	}
}

func TestRun_ExitStatus(t *testing.T) {
	t.Parallel()
	r := prlimitRunner(t)
	res, err := r.Run(context.Background(), childSpec(t, "exit", "3"))
	var ee *proc.ExitError
	if !errors.As(err, &ee) || ee.Code != 3 || !errors.Is(err, proc.ErrExit) {
		t.Fatalf("err = %v, want *ExitError with code 3", err)
	}
	if res == nil || res.ExitCode != 3 || res.Success() || string(res.Stderr.Data) != "exiting" {
		t.Errorf("result = %+v", res)
	}
	if proc.ErrorType(err) != "exit_status" {
		t.Errorf("ErrorType = %q", proc.ErrorType(err))
	}
	if res, err = r.Run(context.Background(), proc.Spec{Path: "false"}); !errors.As(err, &ee) || res.ExitCode != 1 {
		t.Errorf("false: %v", err)
	}
}

func TestRun_Signal(t *testing.T) {
	t.Parallel()
	res, err := prlimitRunner(t).Run(context.Background(), childSpec(t, "signal"))
	var se *proc.SignalError
	if !errors.As(err, &se) || se.Signal != syscall.SIGTERM || !errors.Is(err, proc.ErrSignaled) {
		t.Fatalf("err = %v, want *SignalError SIGTERM", err)
	}
	if res.Signal != syscall.SIGTERM || res.ExitCode != -1 || res.Limit != "" {
		t.Errorf("result = %+v", res)
	}
}

// A timeout kills the whole group, grandchild included, returns what was
// captured, and is never a success.
func TestRun_Timeout(t *testing.T) {
	t.Parallel()
	spec := childSpec(t, "fork", "wait")
	spec.Timeout = 500 * time.Millisecond
	start := time.Now()
	res, err := prlimitRunner(t).Run(context.Background(), spec)
	elapsed := time.Since(start)
	var le *proc.LimitError
	if !errors.As(err, &le) || !errors.Is(err, proc.ErrTimeout) || !errors.Is(err, proc.ErrLimit) ||
		proc.ErrorType(err) != "timeout" || le.Max != int64(spec.Timeout) {
		t.Fatalf("err = %v, want a timeout of %v", err, spec.Timeout)
	}
	if !res.TimedOut || res.Limit != proc.LimitTimeout || res.Success() || res.Signal != syscall.SIGKILL {
		t.Errorf("result = %+v, want timed out by SIGKILL", res)
	}
	out := string(res.Stdout.Data)
	if !strings.Contains(out, "gpid=") || !strings.Contains(out, "partial") {
		t.Errorf("partial output lost: %q", out)
	}
	// The one wall-clock check, which the issue states: deadline + 1 s.
	if elapsed > spec.Timeout+time.Second {
		t.Errorf("Run returned after %v, more than the timeout + 1 s", elapsed)
	}
	assertGone(t, grandchildPid(t, res.Stdout.Data))
}

// The context's deadline is a timeout too.
func TestRun_ContextDeadline(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	res, err := prlimitRunner(t).Run(ctx, childSpec(t, "sleep", "30"))
	if !errors.Is(err, proc.ErrTimeout) || !res.TimedOut {
		t.Fatalf("err = %v, want a timeout", err)
	}
}

// cancelingReader cancels the context when the child's stdin is first
// read, which is surely after the child started.
type cancelingReader struct{ cancel context.CancelFunc }

func (r cancelingReader) Read([]byte) (int, error) { r.cancel(); return 0, io.EOF }

func TestRun_Cancel(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	spec := childSpec(t, "sleep", "30")
	spec.Stdin = cancelingReader{cancel}
	res, err := prlimitRunner(t).Run(ctx, spec)
	if !errors.Is(err, proc.ErrCanceled) || !errors.Is(err, context.Canceled) || proc.ErrorType(err) != "canceled" {
		t.Fatalf("err = %v, want ErrCanceled", err)
	}
	if res == nil || res.TimedOut || res.Signal != syscall.SIGKILL {
		t.Errorf("result = %+v", res)
	}
	// Canceled before it starts: nothing runs.
	if res, err := prlimitRunner(t).Run(ctx, childSpec(t, "sleep", "30")); !errors.Is(err, proc.ErrCanceled) || res != nil {
		t.Errorf("Run with a done context = %v, %v", res, err)
	}
}

// The leader exits at once; the grandchild it leaves holding stdout is
// killed, so the call does not wait for it.
func TestRun_GrandchildHoldsStdout(t *testing.T) {
	t.Parallel()
	res, err := prlimitRunner(t).Run(context.Background(), childSpec(t, "fork"))
	if err != nil {
		t.Fatal(err)
	}
	assertGone(t, grandchildPid(t, res.Stdout.Data))
}

// Run reads the output in the goroutine that waits for the leader, woken
// by the pipes or by a pidfd of the leader; without pidfd (before Linux 5.3)
// it looks at the leader every 10 ms. Either way: all of the output, the
// exit status, the group killed when the leader exits, a timeout, and a
// grandchild that left the group bounded by WaitDelay.
func TestRun_OutputAndExitWithAndWithoutPidfd(t *testing.T) {
	for _, pidfd := range []bool{true, false} {
		r := prlimitRunner(t)
		if !pidfd {
			proc.NoPidfd(r)
		}
		name := map[bool]string{true: "pidfd", false: "polling"}[pidfd]
		res, err := r.Run(context.Background(), childSpec(t, "flood", strconv.Itoa(3<<20)))
		if err != nil || res.Stdout.Total != 3<<20 || res.Stderr.Total != 3<<20 || len(res.Stdout.Data) != 1<<20 {
			t.Fatalf("%s: flood: %v, stdout %d (kept %d), stderr %d", name, err, res.Stdout.Total, len(res.Stdout.Data), res.Stderr.Total)
		}
		res, err = r.Run(context.Background(), childSpec(t, "exit", "7"))
		if !errors.Is(err, proc.ErrExit) || res.ExitCode != 7 || string(res.Stderr.Data) != "exiting" {
			t.Fatalf("%s: exit: %v, %+v", name, err, res)
		}
		res, err = r.Run(context.Background(), childSpec(t, "fork"))
		if err != nil {
			t.Fatalf("%s: fork: %v", name, err)
		}
		assertGone(t, grandchildPid(t, res.Stdout.Data))
		spec := childSpec(t, "sleep", "30")
		spec.Timeout = 200 * time.Millisecond
		res, err = r.Run(context.Background(), spec)
		if !errors.Is(err, proc.ErrTimeout) || !res.TimedOut || string(res.Stdout.Data) != "partial\n" {
			t.Fatalf("%s: timeout: %v, %+v", name, err, res)
		}
		res, err = r.Run(context.Background(), childSpec(t, "fork", "escape"))
		if err != nil {
			t.Fatalf("%s: escaped grandchild: %v", name, err)
		}
		gpid := grandchildPid(t, res.Stdout.Data)
		if err := unix.Kill(gpid, 0); err != nil {
			t.Errorf("%s: the escaped grandchild is gone (%v): the test proves nothing", name, err)
		}
		unix.Kill(gpid, unix.SIGKILL)
		assertGone(t, gpid)
	}
}

// A grandchild that left the process group cannot be killed with it, but
// cannot hold the call either: WaitDelay closes the pipes.
func TestRun_EscapedGrandchildHoldsStdout(t *testing.T) {
	t.Parallel()
	res, err := prlimitRunner(t).Run(context.Background(), childSpec(t, "fork", "escape"))
	if err != nil {
		t.Fatal(err)
	}
	gpid := grandchildPid(t, res.Stdout.Data)
	defer assertGone(t, gpid)
	defer unix.Kill(gpid, unix.SIGKILL)
	// It sleeps 30 s holding the pipe: Run returned without waiting for it.
	if err := unix.Kill(gpid, 0); err != nil {
		t.Errorf("the escaped grandchild is gone (%v): the test proves nothing", err)
	}
}

// Floods of 100 MB on each stream with 1 KB caps: no deadlock, the flags,
// the totals, and our memory stays small.
func TestRun_Flood(t *testing.T) {
	const n = 100 << 20
	spec := childSpec(t, "flood", strconv.Itoa(n))
	spec.MaxStdout, spec.MaxStderr = 1024, 1024
	r := prlimitRunner(t)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	res, err := r.Run(context.Background(), spec)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	for name, o := range map[string]proc.Output{"stdout": res.Stdout, "stderr": res.Stderr} {
		if !o.Truncated || o.Total != n || len(o.Data) != 1024 {
			t.Errorf("%s: truncated %v, total %d, kept %d; want true, %d, 1024", name, o.Truncated, o.Total, len(o.Data), n)
		}
	}
	if d := after.TotalAlloc - before.TotalAlloc; d > 10<<20 {
		t.Errorf("allocated %d bytes while 200 MB went through: capture is not bounded", d)
	}
	t.Logf("allocated %d KiB for 200 MiB of output", (after.TotalAlloc-before.TotalAlloc)>>10)
}

func TestRun_OutputLimit(t *testing.T) {
	t.Parallel()
	spec := childSpec(t, "flood", strconv.Itoa(1<<30))
	spec.MaxStdout, spec.MaxStderr = 1024, 2<<30 // only stdout can pass its cap
	spec.KillOnOutputLimit = true
	res, err := prlimitRunner(t).Run(context.Background(), spec)
	var le *proc.LimitError
	if !errors.As(err, &le) || !errors.Is(err, proc.ErrOutputLimit) || proc.ErrorType(err) != "output_limit" || le.Max != 1024 {
		t.Fatalf("err = %v, want output_limit with the stdout cap", err)
	}
	if res.Limit != proc.LimitOutput || res.Signal != syscall.SIGKILL || len(res.Stdout.Data) != 1024 ||
		!res.Stdout.Truncated || !strings.Contains(res.Evidence, "stdout") {
		t.Errorf("result: limit %q, signal %v, kept %d, truncated %v, evidence %q",
			res.Limit, res.Signal, len(res.Stdout.Data), res.Stdout.Truncated, res.Evidence)
	}
	if res.Stdout.Total >= 1<<30 && res.Stderr.Total >= 1<<30 {
		t.Error("the flood ran to its end: nothing was killed")
	}
}

func TestRun_FileSizeLimit(t *testing.T) {
	t.Parallel()
	const limit = 1 << 20
	r := prlimitRunner(t)
	t.Run("SIGXFSZ", func(t *testing.T) {
		// dd keeps the default action of SIGXFSZ: the kernel kills it. It
		// has 128 MiB to write, so it is still writing when the limit
		// lands (see "The prlimit race" in the package doc).
		out := filepath.Join(t.TempDir(), "out")
		res, err := r.Run(context.Background(), proc.Spec{
			Path: "dd", Args: []string{"if=/dev/zero", "of=" + out, "bs=64k", "count=2048"},
			MaxFileSize: limit, MaxStderr: 4096,
		})
		if !errors.Is(err, proc.ErrFileSizeLimit) || proc.ErrorType(err) != "file_size_limit" {
			t.Fatalf("err = %v (stderr %q), want file_size_limit", err, res.Stderr.Data)
		}
		if res.Signal != syscall.SIGXFSZ || !strings.Contains(res.Evidence, "SIGXFSZ") {
			t.Errorf("signal %v, evidence %q", res.Signal, res.Evidence)
		}
		if fi, err := os.Stat(out); err != nil || fi.Size() < limit || fi.Size() >= 128<<20 {
			t.Errorf("file: %v, %v; want it stopped at the limit", fi, err)
		} else if fi.Size() != limit {
			t.Logf("the file is %d bytes: dd passed the limit before prlimit landed", fi.Size())
		}
	})
	t.Run("EFBIG", func(t *testing.T) {
		// The Go runtime ignores SIGXFSZ, so the write fails with EFBIG.
		spec := childSpec(t, "write", filepath.Join(t.TempDir(), "out"), strconv.Itoa(2*limit))
		spec.MaxFileSize = limit
		res, err := r.Run(context.Background(), spec)
		if !errors.Is(err, proc.ErrFileSizeLimit) {
			t.Fatalf("err = %v (stderr %q), want file_size_limit", err, res.Stderr.Data)
		}
		if res.ExitCode != 1 || !strings.Contains(res.Evidence, "file too large") {
			t.Errorf("exit %d, evidence %q", res.ExitCode, res.Evidence)
		}
	})
	t.Run("under the limit", func(t *testing.T) {
		spec := childSpec(t, "write", filepath.Join(t.TempDir(), "out"), strconv.Itoa(limit/2))
		spec.MaxFileSize = limit
		if _, err := r.Run(context.Background(), spec); err != nil {
			t.Fatal(err)
		}
	})
}

func TestRun_MemoryLimit_Prlimit(t *testing.T) {
	t.Parallel()
	const limit = 256 << 20
	r := prlimitRunner(t)
	check := func(t *testing.T, res *proc.Result, err error, evidence string) {
		t.Helper()
		if !errors.Is(err, proc.ErrMemoryLimit) || proc.ErrorType(err) != "memory_limit" {
			t.Fatalf("err = %v (stderr %.300q), want memory_limit", err, res.Stderr.Data)
		}
		if res.Limit != proc.LimitMemory || res.Memory != proc.MemoryPrlimit || !strings.Contains(res.Evidence, evidence) {
			t.Errorf("limit %q, memory %q, evidence %q (want it to mention %q)", res.Limit, res.Memory, res.Evidence, evidence)
		}
	}
	t.Run("kernel refuses", func(t *testing.T) {
		t.Parallel()
		// sort keeps a line of /dev/zero (no newline) in memory: it grows
		// until RLIMIT_AS refuses it and says "memory exhausted".
		res, err := r.Run(context.Background(), proc.Spec{Path: "sort", Args: []string{"/dev/zero"}, MaxMemory: limit, MaxStderr: 4096})
		check(t, res, err, "memory exhausted")
	})
	t.Run("Go child", func(t *testing.T) {
		t.Parallel()
		// The Go runtime reserves more address space than the limit: it
		// dies at start or at its first allocation past it, saying so.
		spec := childSpec(t, "alloc")
		spec.MaxMemory, spec.MaxStderr = limit, 256
		res, err := r.Run(context.Background(), spec)
		check(t, res, err, "stderr says")
	})
	t.Run("watchdog", func(t *testing.T) {
		t.Parallel()
		// Four sorts, each under RLIMIT_AS, exceed the limit together: the
		// watchdog kills the group. On a loaded machine one sort may reach
		// its own RLIMIT_AS before the others have grown (the kernel's
		// refusal, also a memory_limit): try again, a few times, until the
		// watchdog is seen.
		for try := 1; ; try++ {
			res, err := r.Run(context.Background(), proc.Spec{
				Path: "xargs", Args: []string{"-P", "4", "-n", "1", "sort"},
				Stdin:     strings.NewReader(strings.Repeat("/dev/zero\n", 4)),
				MaxMemory: limit, MaxStderr: 4096,
			})
			if try < 8 && errors.Is(err, proc.ErrMemoryLimit) && !strings.Contains(res.Evidence, "watchdog") {
				t.Logf("try %d: %s", try, res.Evidence)
				continue
			}
			check(t, res, err, "watchdog")
			if res.Usage.PeakMemory <= limit || res.Signal != syscall.SIGKILL {
				t.Errorf("peak %d, signal %v: want above %d, SIGKILL", res.Usage.PeakMemory, res.Signal, limit)
			}
			break
		}
	})
	t.Run("under the limit", func(t *testing.T) {
		t.Parallel()
		res, err := r.Run(context.Background(), proc.Spec{Path: "sort", Stdin: strings.NewReader("b\na\n"), MaxMemory: 64 << 20, MaxStdout: 64})
		if err != nil || string(res.Stdout.Data) != "a\nb\n" || res.Memory != proc.MemoryPrlimit {
			t.Fatalf("sort under a 64 MiB limit: %v, %+v", err, res)
		}
	})
}

// Without cgroup v2 or prlimit, a memory limit is refused, unless the
// caller accepts the watchdog alone, which then kills a group of Go
// processes (no RLIMIT_AS in the way).
func TestRun_MemoryLimit_BestEffort(t *testing.T) {
	t.Parallel()
	r := prlimitRunner(t)
	proc.DisableEnforcement(r)
	spec := childSpec(t, "forkalloc", "3", "128")
	spec.MaxMemory = 256 << 20
	spec.Timeout = 10 * time.Second // a failure, not a hang, if the watchdog misses
	res, err := r.Run(context.Background(), spec)
	var ue *proc.UnenforceableError
	if !errors.As(err, &ue) || ue.Limit != proc.LimitMemory || res != nil || proc.ErrorType(err) != "limit_unenforceable" {
		t.Fatalf("Run = %v, %v; want an *UnenforceableError and nothing run", res, err)
	}
	spec.BestEffortMemory = true
	res, err = r.Run(context.Background(), spec)
	if !errors.Is(err, proc.ErrMemoryLimit) || res.Memory != proc.MemoryWatchdog || !strings.Contains(res.Evidence, "watchdog") {
		t.Fatalf("err = %v, memory %q, evidence %q", err, res.Memory, res.Evidence)
	}
	if res.Usage.PeakMemory <= spec.MaxMemory {
		t.Errorf("peak %d not above the limit", res.Usage.PeakMemory)
	}
	// A file size limit needs prlimit: refused.
	if _, err := r.Run(context.Background(), proc.Spec{Path: "true", MaxFileSize: 1}); !errors.Is(err, proc.ErrUnenforceable) {
		t.Errorf("MaxFileSize without prlimit: %v", err)
	}
}

func TestProbe(t *testing.T) {
	t.Parallel()
	c := proc.Probe(nil)
	if !c.ProcessGroups.OK || !c.Prlimit.OK || !c.RSSWatchdog.OK {
		t.Errorf("Linux has process groups, prlimit and /proc: %+v", c)
	}
	switch c.Memory {
	case proc.MemoryCgroup:
		if !c.CgroupMemory.OK || c.CgroupParent == "" {
			t.Errorf("cgroup memory without a parent: %+v", c)
		}
	case proc.MemoryPrlimit:
		if c.CgroupMemory.OK || c.CgroupMemory.Detail == "" {
			t.Errorf("cgroup memory unavailable without a reason: %+v", c)
		}
	default:
		t.Errorf("Memory = %q", c.Memory)
	}
	t.Logf("cgroup v2 memory: %v: %s", c.CgroupMemory.OK, c.CgroupMemory.Detail)
	c = proc.Probe(&proc.Options{NoCgroup: true, WatchdogInterval: time.Millisecond, WaitDelay: time.Second})
	if c.CgroupMemory.OK || c.Memory != proc.MemoryPrlimit || !strings.Contains(c.CgroupMemory.Detail, "NoCgroup") {
		t.Errorf("NoCgroup: %+v", c)
	}
}

func TestOptions_Validate(t *testing.T) {
	t.Parallel()
	if err := proc.DefaultOptions().Validate(); err != nil {
		t.Fatal(err)
	}
	for _, o := range []*proc.Options{
		{WaitDelay: 0, WatchdogInterval: time.Millisecond},
		{WaitDelay: time.Second},
		{WaitDelay: time.Second, WatchdogInterval: time.Millisecond, CgroupParent: "relative"},
	} {
		if _, err := proc.New(o); err == nil {
			t.Errorf("New(%+v) accepted invalid options", o)
		}
	}
}

func TestErrorType(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want string
		is   error
	}{
		{nil, "", nil},
		{&proc.LimitError{Limit: proc.LimitTimeout}, "timeout", proc.ErrTimeout},
		{&proc.LimitError{Limit: proc.LimitMemory}, "memory_limit", proc.ErrMemoryLimit},
		{&proc.LimitError{Limit: proc.LimitFileSize}, "file_size_limit", proc.ErrFileSizeLimit},
		{fmt.Errorf("wrapped: %w", &proc.LimitError{Limit: proc.LimitOutput}), "output_limit", proc.ErrOutputLimit},
		{&proc.LaunchError{Kind: proc.KindNotFound}, "not_found", proc.ErrNotFound},
		{&proc.ExitError{Code: 2}, "exit_status", proc.ErrExit},
		{&proc.SignalError{Signal: syscall.SIGSEGV}, "signal", proc.ErrSignaled},
		{&proc.SpecError{}, "invalid_spec", proc.ErrInvalidSpec},
		{&proc.UnenforceableError{}, "limit_unenforceable", proc.ErrUnenforceable},
		{errors.New("other"), "_OTHER", nil},
	} {
		if got := proc.ErrorType(tc.err); got != tc.want {
			t.Errorf("ErrorType(%v) = %q, want %q", tc.err, got, tc.want)
		}
		if tc.is != nil && !errors.Is(tc.err, tc.is) {
			t.Errorf("errors.Is(%v, %v) = false", tc.err, tc.is)
		}
	}
	if errors.Is(&proc.LimitError{Limit: proc.LimitMemory}, proc.ErrTimeout) {
		t.Error("a memory limit error is a timeout")
	}
	if !strings.Contains((&proc.SignalError{Path: "/x", Signal: syscall.SIGKILL}).Error(), "SIGKILL") {
		t.Error("SignalError does not name the signal")
	}
}

// BenchmarkRun compares a bare os/exec run of /bin/true with proc.Run of
// it (process group, capture, the leader's wait, the group kill).
func BenchmarkRun(b *testing.B) {
	b.Run("os_exec", func(b *testing.B) {
		for b.Loop() {
			if err := exec.Command("/bin/true").Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("proc", func(b *testing.B) {
		r := prlimitRunner(b)
		spec := proc.Spec{Path: "/bin/true", MaxStdout: 1024, MaxStderr: 1024}
		for b.Loop() {
			if _, err := r.Run(context.Background(), spec); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("proc_limits", func(b *testing.B) {
		r := prlimitRunner(b)
		spec := proc.Spec{Path: "/bin/true", MaxStdout: 1024, MaxStderr: 1024, Timeout: time.Minute, MaxMemory: 64 << 20, MaxFileSize: 1 << 20}
		for b.Loop() {
			if _, err := r.Run(context.Background(), spec); err != nil {
				b.Fatal(err)
			}
		}
	})
}
