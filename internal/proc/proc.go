package proc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Spec is one process to run and its limits. The zero value of a limit
// means "no limit", except for the output caps, where 0 keeps nothing.
type Spec struct {
	// Path is a bare command name, looked up in the PATH of Env (else
	// Options.SearchPath) by Resolve, or an absolute path.
	Path string
	// Args are the arguments after argv[0], passed as they are: there is
	// never a shell.
	Args []string
	// Dir is the absolute working directory; "" means this process's.
	Dir string
	// Env is the whole environment of the child, KEY=VALUE entries.
	// Nothing is inherited: nil means an empty environment.
	Env []string
	// Stdin is read into the child's standard input; nil means /dev/null.
	// Use bytes.NewReader for a fixed payload.
	Stdin io.Reader

	// MaxStdout and MaxStderr are how many bytes of each stream are kept.
	// The rest is read and counted but discarded, so the child never blocks
	// on a full pipe.
	MaxStdout, MaxStderr int64
	// OnOutput, when set, is called with the size of each write the child
	// makes to either stream, kept or not, as it is read: from the
	// goroutines that drain the pipes, so it must be quick and safe for
	// concurrent use (an atomic add).
	OnOutput func(n int)
	// KillOnOutputLimit kills the process group as soon as either stream
	// passes its cap; the run ends with LimitOutput.
	KillOnOutputLimit bool
	// Timeout bounds the run, on top of the context's deadline.
	Timeout time.Duration
	// OnStart, when set, is called with the identity of the process once
	// it has started, before Run waits for it, so that a caller can record
	// it durably: after a crash of ours, Reap kills what is left of the run
	// from that record. It is not called when /proc cannot say the
	// process's start time.
	OnStart func(Identity)
	// MaxMemory in bytes: cgroup v2 memory.max, else RLIMIT_AS plus the
	// RSS watchdog (see the package doc for what each means).
	MaxMemory int64
	// BestEffortMemory accepts the RSS watchdog alone when neither cgroup
	// v2 nor prlimit is available. Without it, Run refuses to start.
	BestEffortMemory bool
	// MaxFileSize in bytes: RLIMIT_FSIZE, the largest file the process
	// group may write or extend.
	MaxFileSize int64
}

// Result is what happened to a process that started.
type Result struct {
	Path       string // the resolved absolute path that ran
	ResolvedBy string // how Path was found (Resolve's how)
	Pid        int

	ExitCode int            // -1 if a signal ended it
	Signal   syscall.Signal // the signal that ended it, 0 if it exited
	TimedOut bool           // the timeout or the context deadline ended it
	Limit    string         // the limit that ended it, "" if none
	Evidence string         // how Limit was decided
	Duration time.Duration  // from just before start to after the last wait

	Stdout, Stderr Output
	Usage          Usage
	Memory         string // the memory enforcement used (MemoryCgroup, ...), "" without MaxMemory
}

// Success reports a process that exited with status 0 and hit no limit.
func (r *Result) Success() bool {
	return r.ExitCode == 0 && r.Signal == 0 && !r.TimedOut && r.Limit == ""
}

// Usage is the resources a run used.
type Usage struct {
	// MaxRSS is the largest resident set in bytes of the process or of a
	// descendant it waited for (wait4 rusage).
	MaxRSS int64
	// PeakMemory is the largest memory of the whole group seen by the
	// enforcement: the watchdog's summed RSS, or the cgroup's memory.peak
	// (which counts page cache too). 0 when not measured.
	PeakMemory int64
	User       time.Duration
	System     time.Duration
}

// Options configure a Runner. A nil *Options means DefaultOptions.
type Options struct {
	// CgroupParent is a cgroup v2 directory with the memory controller in
	// its cgroup.subtree_control, under which Run makes a child cgroup per
	// run that sets MaxMemory. "" looks at this process's own cgroup.
	CgroupParent string
	// NoCgroup never uses cgroups: MaxMemory is enforced with prlimit and
	// the watchdog.
	NoCgroup bool
	// SearchPath resolves a bare command name when Spec.Env has no PATH.
	// Only its absolute entries are used.
	SearchPath string
	// WaitDelay bounds how long Run waits for the output pipes once the
	// process has ended or been killed: a process that left the group and
	// still holds them cannot hold the call longer.
	WaitDelay time.Duration
	// WatchdogInterval is how often the RSS watchdog samples the group.
	WatchdogInterval time.Duration
}

// DefaultOptions returns a fresh value with the defaults.
func DefaultOptions() *Options {
	return &Options{
		SearchPath:       "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		WaitDelay:        500 * time.Millisecond,
		WatchdogInterval: 10 * time.Millisecond,
	}
}

// Validate checks the options.
func (o *Options) Validate() error {
	switch {
	case o.WaitDelay <= 0:
		return errors.New("proc: Options.WaitDelay must be positive")
	case o.WatchdogInterval <= 0:
		return errors.New("proc: Options.WatchdogInterval must be positive")
	case o.CgroupParent != "" && !filepath.IsAbs(o.CgroupParent):
		return errors.New("proc: Options.CgroupParent must be an absolute path")
	}
	return nil
}

// Runner runs processes under limits. It probes the machine once, in New.
// It is safe for concurrent use.
type Runner struct {
	opts Options
	caps Capabilities
	// noPidfd waits for the leader as on a kernel without pidfd_open
	// (before Linux 5.3), for the tests.
	noPidfd bool
}

// New returns a Runner with the options (nil: DefaultOptions), after
// probing what it can enforce.
func New(opts *Options) (*Runner, error) {
	if opts == nil {
		opts = DefaultOptions()
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	return &Runner{opts: *opts, caps: Probe(opts)}, nil
}

// Capabilities returns what New found.
func (r *Runner) Capabilities() Capabilities { return r.caps }

// Run runs spec with a Runner of the default options. A program running
// many processes should keep one Runner instead, which probes once.
func Run(ctx context.Context, spec Spec) (*Result, error) {
	r, err := New(nil)
	if err != nil {
		return nil, err
	}
	return r.Run(ctx, spec)
}

// Run starts the process, waits for it and its process group, and says how
// it ended.
//
// A process that did not start returns a nil Result and a *LaunchError, a
// *SpecError, an *UnenforceableError, or ErrCanceled if ctx was done first. A process that started always
// returns a Result, with a nil error only if Result.Success; otherwise the
// error is a *LimitError (timeout, memory, file size, output), an
// *ExitError, a *SignalError, or wraps ErrCanceled when ctx was canceled.
func (r *Runner) Run(ctx context.Context, spec Spec) (*Result, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: %s not started: %w", ErrCanceled, spec.Path, context.Cause(ctx))
	}
	if err := validate(&spec); err != nil {
		return nil, err
	}
	if spec.Dir != "" {
		if fi, err := os.Stat(spec.Dir); err != nil {
			return nil, &LaunchError{Kind: KindBadDir, Command: spec.Dir, Reason: "cannot use as working directory", Err: err}
		} else if !fi.IsDir() {
			return nil, &LaunchError{Kind: KindBadDir, Command: spec.Dir, Reason: "not a directory", Err: syscall.ENOTDIR}
		}
	}
	pathEnv, ok := lookupEnv(spec.Env, "PATH")
	if !ok {
		pathEnv = r.opts.SearchPath
	}
	abs, how, err := Resolve(spec.Path, pathEnv)
	if err != nil {
		return nil, err
	}

	memory := ""
	if spec.MaxMemory > 0 {
		switch {
		case r.caps.Memory != "":
			memory = r.caps.Memory
		case spec.BestEffortMemory && r.caps.RSSWatchdog.OK:
			memory = MemoryWatchdog
		default:
			return nil, &UnenforceableError{Limit: LimitMemory, Reason: "cgroup v2: " + r.caps.CgroupMemory.Detail +
				"; prlimit: " + r.caps.Prlimit.Detail + "; watchdog: " + r.caps.RSSWatchdog.Detail}
		}
	}
	if spec.MaxFileSize > 0 && !r.caps.Prlimit.OK {
		return nil, &UnenforceableError{Limit: LimitFileSize, Reason: r.caps.Prlimit.Detail}
	}

	var cg *cgroup
	if memory == MemoryCgroup {
		if cg, err = newCgroup(r.caps.CgroupParent, spec.MaxMemory); err != nil {
			return nil, &UnenforceableError{Limit: LimitMemory, Reason: fmt.Sprintf("making a cgroup under %s: %v", r.caps.CgroupParent, err)}
		}
	}
	res, err := r.run(ctx, &spec, abs, how, memory, cg)
	if cg != nil {
		if rerr := cg.remove(); rerr != nil && err == nil {
			err = rerr
		}
	}
	return res, err
}

func (r *Runner) run(ctx context.Context, spec *Spec, abs, how, memory string, cg *cgroup) (*Result, error) {
	// The effective timeout: Spec.Timeout or what is left of the
	// context's deadline, whichever is shorter.
	timeoutMax := spec.Timeout
	if dl, ok := ctx.Deadline(); ok && (timeoutMax == 0 || time.Until(dl) < timeoutMax) {
		timeoutMax = max(time.Until(dl), 0)
	}
	if spec.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, spec.Timeout)
		defer cancel()
	}

	k := &killer{cg: cg}
	stdout, stderr := newCapture(spec.MaxStdout), newCapture(spec.MaxStderr)
	stdout.onWrite, stderr.onWrite = spec.OnOutput, spec.OnOutput
	if spec.KillOnOutputLimit {
		stdout.onExceed = func() { k.kill(LimitOutput, spec.MaxStdout, fmt.Sprintf("stdout passed %d bytes", spec.MaxStdout)) }
		stderr.onExceed = func() { k.kill(LimitOutput, spec.MaxStderr, fmt.Sprintf("stderr passed %d bytes", spec.MaxStderr)) }
	}
	var want []marker
	if memory == MemoryPrlimit {
		want = append(want, markOOM)
	}
	if spec.MaxFileSize > 0 {
		want = append(want, markEFBIG)
	}
	if len(want) > 0 {
		stderr.scan = newScanner(want...)
	}

	cmd := exec.Command(abs, spec.Args...)
	cmd.Args[0] = spec.Path
	if tr := trampoline(); tr != "" && (spec.MaxFileSize > 0 || memory == MemoryPrlimit) {
		// prlimit(1) sets the limits, then execs the command: they hold from
		// its first instruction, with no window (see "The prlimit race").
		args := []string{tr}
		if spec.MaxFileSize > 0 {
			args = append(args, "--fsize="+strconv.FormatInt(spec.MaxFileSize, 10))
		}
		if memory == MemoryPrlimit {
			args = append(args, "--as="+strconv.FormatInt(spec.MaxMemory, 10))
		}
		args = append(append(args, "--", abs), spec.Args...)
		cmd = exec.Command(tr, args[1:]...)
	}
	cmd.Env = append([]string{}, spec.Env...) // never nil: nil would inherit ours
	cmd.Dir = spec.Dir
	cmd.Stdin = spec.Stdin
	if spec.Stdin == nil {
		if f := devNull(); f != nil {
			cmd.Stdin = f // else os/exec opens /dev/null itself
		}
	}
	pipes, err := newOutputPipes()
	if err != nil {
		return nil, launchError(spec, abs, err)
	}
	cmd.Stdout, cmd.Stderr = pipes.w[0], pipes.w[1]
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if cg != nil {
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = cg.fd
	}
	// Bounds the wait for the output pipes once the leader has exited (on
	// its own, or killed at the end of ctx below).
	cmd.WaitDelay = r.opts.WaitDelay

	start := time.Now()
	if err := ctx.Err(); err != nil {
		pipes.close()
		return nil, launchError(spec, abs, err) // as exec.CommandContext's Start
	}
	// This goroutine's thread is the child's parent thread, kept until the
	// child is reaped below (see spawn.go).
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	err = startLocked(cmd)
	pipes.started()
	if err != nil {
		pipes.close()
		return nil, launchError(spec, abs, err)
	}
	pid := cmd.Process.Pid
	// The end of ctx kills the group: a callback of ctx, where
	// exec.CommandContext would start a goroutine per run to watch it. If
	// ctx ends before k.started below, k.started makes the kill.
	stopWatch := context.AfterFunc(ctx, func() {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			k.kill(LimitTimeout, int64(timeoutMax), fmt.Sprintf("killed the process group after %v", timeoutMax.Round(time.Millisecond)))
		} else {
			k.kill("canceled", 0, "")
		}
	})
	defer stopWatch()

	// Limits on the child, as soon as Start returns: see "The prlimit race"
	// in the package doc.
	var setupErr error
	if spec.MaxFileSize > 0 {
		if err := setRlimit(pid, unix.RLIMIT_FSIZE, spec.MaxFileSize); err != nil && !errors.Is(err, unix.ESRCH) {
			setupErr = &UnenforceableError{Limit: LimitFileSize, Reason: fmt.Sprintf("prlimit(RLIMIT_FSIZE) on pid %d: %v", pid, err)}
		}
	}
	if memory == MemoryPrlimit && setupErr == nil {
		if err := setRlimit(pid, unix.RLIMIT_AS, spec.MaxMemory); err != nil && !errors.Is(err, unix.ESRCH) {
			setupErr = &UnenforceableError{Limit: LimitMemory, Reason: fmt.Sprintf("prlimit(RLIMIT_AS) on pid %d: %v", pid, err)}
		}
	}
	k.started(pid)
	if setupErr != nil {
		k.kill("setup", 0, "")
	}
	var wd *watchdog
	if (memory == MemoryPrlimit || memory == MemoryWatchdog) && setupErr == nil {
		wd = startWatchdog(pid, spec.MaxMemory, r.opts.WatchdogInterval, func(rss int64) {
			k.kill(LimitMemory, spec.MaxMemory, fmt.Sprintf("the watchdog saw the process group's resident memory at %d bytes and killed it", rss))
		})
	}
	if spec.OnStart != nil && setupErr == nil {
		// After the watchdog: a slow record does not delay the limits.
		if id, err := identify(pid, abs, cg); err == nil {
			spec.OnStart(id)
		}
	}

	// Read the output while waiting for the leader to exit, without
	// reaping it, so that its pid, which is the group's id, cannot be
	// reused while we kill the rest of the group (k.finish, as soon as it
	// has exited); then until the pipes end, or WaitDelay.
	pipes.drain(pid, !r.noPidfd, [2]*capture{stdout, stderr}, r.opts.WaitDelay, k.finish)
	var peak int64
	if wd != nil {
		peak = wd.halt()
	}
	_ = cmd.Wait() // reaps; the outcome is read from ProcessState below
	dur := time.Since(start)

	res := &Result{
		Path: abs, ResolvedBy: how, Pid: pid, ExitCode: -1, Duration: dur,
		Stdout: stdout.output(), Stderr: stderr.output(), Memory: memory,
	}
	ps := cmd.ProcessState
	if ps == nil {
		return res, fmt.Errorf("proc: %s: no process state after wait", abs)
	}
	ws, _ := ps.Sys().(syscall.WaitStatus)
	switch {
	case ws.Exited():
		res.ExitCode = ws.ExitStatus()
	case ws.Signaled():
		res.Signal = ws.Signal()
	}
	if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
		res.Usage.MaxRSS = ru.Maxrss * 1024 // kilobytes on Linux
		res.Usage.User = time.Duration(ru.Utime.Nano())
		res.Usage.System = time.Duration(ru.Stime.Nano())
	}
	res.Usage.PeakMemory = peak
	if cg != nil {
		res.Usage.PeakMemory = cg.peak()
	}
	if setupErr != nil {
		return res, setupErr
	}
	return res, classify(ctx, spec, res, k, cg, stderr)
}

// classify decides how the run ended, sets Result.Limit, TimedOut and
// Evidence, and returns the error. The order is the package doc's.
func classify(ctx context.Context, spec *Spec, res *Result, k *killer, cg *cgroup, stderr *capture) error {
	limit := func(name string, max int64, evidence string) error {
		res.Limit, res.Evidence = name, evidence
		res.TimedOut = name == LimitTimeout
		return &LimitError{Limit: name, Max: max, Evidence: evidence}
	}
	if cg != nil && spec.MaxMemory > 0 {
		if n, err := cg.events("oom_kill"); err == nil && n > 0 {
			return limit(LimitMemory, spec.MaxMemory, fmt.Sprintf("the kernel OOM-killed %d process(es) of the run's cgroup (memory.events oom_kill)", n))
		}
	}
	switch reason, max, evidence := k.why(); reason {
	case LimitTimeout, LimitMemory, LimitOutput:
		return limit(reason, max, evidence)
	case "canceled":
		return fmt.Errorf("%w: %s: %w", ErrCanceled, res.Path, context.Cause(ctx))
	}
	if res.Signal == syscall.SIGXFSZ && spec.MaxFileSize > 0 {
		return limit(LimitFileSize, spec.MaxFileSize, "killed by SIGXFSZ under RLIMIT_FSIZE")
	}
	if res.ExitCode == 0 {
		return nil
	}
	if res.Memory == MemoryPrlimit {
		if ph := stderr.found(markOOM); ph != "" {
			return limit(LimitMemory, spec.MaxMemory, fmt.Sprintf("the process failed under RLIMIT_AS and its stderr says %q", ph))
		}
	}
	if spec.MaxFileSize > 0 {
		if ph := stderr.found(markEFBIG); ph != "" {
			return limit(LimitFileSize, spec.MaxFileSize, fmt.Sprintf("the process failed under RLIMIT_FSIZE and its stderr says %q (EFBIG)", ph))
		}
	}
	if res.Signal != 0 {
		return &SignalError{Path: res.Path, Signal: res.Signal}
	}
	return &ExitError{Path: res.Path, Code: res.ExitCode}
}

// killer kills the process group (and the run's cgroup) and remembers the
// first reason it was asked to.
type killer struct {
	mu       sync.Mutex
	pid      int // the group's id; 0 before start, -1 once the leader has exited
	cg       *cgroup
	pending  bool
	reason   string
	max      int64 // the limit of reason
	evidence string
}

func (k *killer) kill(reason string, max int64, evidence string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.pid < 0 {
		return // the leader had exited on its own: too late to be the reason
	}
	if k.reason == "" {
		k.reason, k.max, k.evidence = reason, max, evidence
	}
	if k.pid == 0 {
		k.pending = true
		return
	}
	k.signal()
}

func (k *killer) started(pid int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.pid = pid
	if k.pending {
		k.signal()
	}
}

// finish kills what is left of the group once the leader has exited (it is
// a zombie, so the group id is still ours), and refuses any later kill.
func (k *killer) finish() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.signal()
	k.pid = -1
}

func (k *killer) signal() {
	if k.pid > 1 {
		_ = unix.Kill(-k.pid, unix.SIGKILL)
	}
	if k.cg != nil {
		_ = k.cg.kill()
	}
}

func (k *killer) why() (reason string, max int64, evidence string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.reason, k.max, k.evidence
}

func validate(s *Spec) error {
	for i, a := range s.Args {
		if strings.ContainsRune(a, 0) {
			return &SpecError{Field: fmt.Sprintf("Args[%d]", i), Reason: "contains a NUL byte"}
		}
	}
	for i, e := range s.Env {
		k, _, ok := strings.Cut(e, "=")
		switch {
		case !ok:
			return &SpecError{Field: fmt.Sprintf("Env[%d]", i), Reason: "not KEY=VALUE"}
		case k == "":
			return &SpecError{Field: fmt.Sprintf("Env[%d]", i), Reason: "empty key"}
		case strings.ContainsRune(e, 0):
			return &SpecError{Field: fmt.Sprintf("Env[%d]", i), Reason: "contains a NUL byte"}
		}
	}
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"MaxStdout", s.MaxStdout}, {"MaxStderr", s.MaxStderr}, {"MaxMemory", s.MaxMemory},
		{"MaxFileSize", s.MaxFileSize}, {"Timeout", int64(s.Timeout)},
	} {
		if f.v < 0 {
			return &SpecError{Field: f.name, Reason: "negative"}
		}
	}
	if s.Dir != "" && !filepath.IsAbs(s.Dir) {
		return &LaunchError{Kind: KindBadDir, Command: s.Dir, Reason: "working directory must be an absolute path"}
	}
	return nil
}

// lookupEnv returns the last value of key in env, as the child would see it.
func lookupEnv(env []string, key string) (string, bool) {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], key+"="); ok {
			return v, true
		}
	}
	return "", false
}

// launchError translates a failed Start. The checks in Run catch most
// causes first; this covers what changed in between.
func launchError(spec *Spec, abs string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: %s not started: %w", ErrCanceled, spec.Path, err)
	}
	var pe *fs.PathError
	if errors.As(err, &pe) && pe.Op == "chdir" {
		return &LaunchError{Kind: KindBadDir, Command: spec.Dir, Reason: "cannot change into it", Err: pe.Err}
	}
	switch {
	case errors.Is(err, syscall.ENOENT):
		return &LaunchError{Kind: KindNotFound, Command: spec.Path, Reason: abs + " vanished or its interpreter is missing", Err: err}
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.ENOEXEC), errors.Is(err, syscall.EPERM):
		return &LaunchError{Kind: KindNotExecutable, Command: spec.Path, Reason: abs, Err: err}
	}
	return &LaunchError{Kind: KindOther, Command: spec.Path, Reason: abs, Err: err}
}

// devNull is /dev/null open for reading, the standard input of every run
// without Spec.Stdin (os/exec would open and close it for each); nil if it
// cannot be opened.
var devNull = sync.OnceValue(func() *os.File {
	f, err := os.Open(os.DevNull)
	if err != nil {
		return nil
	}
	return f
})

// trampoline returns the path of util-linux prlimit(1) when it is
// installed where a system installs it, root-owned and writable by no one
// else: Run starts limited commands through it, so RLIMIT_FSIZE and
// RLIMIT_AS are set before the command's first instruction. "" when there
// is none; Run then sets them right after start.
var trampoline = sync.OnceValue(func() string {
	for _, p := range []string{"/usr/bin/prlimit", "/bin/prlimit"} {
		fi, err := os.Stat(p)
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o022 != 0 || fi.Mode().Perm()&0o111 == 0 {
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || st.Uid != 0 {
			continue
		}
		return p
	}
	return ""
})
