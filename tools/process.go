package tools

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/internal/proc"

	"golang.org/x/sys/unix"
)

// ErrProcess is wrapped by every *ProcessError.
var ErrProcess = errors.New("tools: process failed")

// DefaultSearchPath is where a bare command name is looked up when the
// Env does not say otherwise. Only absolute directories: a relative entry
// would resolve against the working directory.
const DefaultSearchPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// defaultStreamCap is how much of each output stream a Command keeps when
// it does not say, before MaxOutputBytes lowers it.
const defaultStreamCap = 1 << 20

// Command is one process a tool asks its Env to run. There is never a
// shell: Args reach the program as they are, one argument each.
type Command struct {
	// Name is a bare command name, looked up in the Env's search path, or
	// an absolute path. It must be granted: process.exec:<name> for a bare
	// name, or a process.exec scope covering the resolved absolute path
	// (process.exec:/usr/bin covers every program in /usr/bin).
	Name string
	// Args are the arguments after the program name.
	Args []string
	// Dir is the working directory: at or below a granted
	// filesystem.read or filesystem.write scope, relative to the Env's
	// WorkDir, checked with its symbolic links resolved. "" runs the
	// process in a fresh empty directory of its own, removed afterwards (in
	// the background: WaitProcessDirs). The check happens before the
	// start: a link swapped in between is not caught.
	// That is acceptable because the working directory is no boundary: a
	// process reads and writes whatever its user may.
	Dir string
	// Env is the child's whole environment, KEY=VALUE. Nothing is
	// inherited: nil is an empty environment.
	Env []string
	// Stdin is the child's standard input; nil means none (/dev/null).
	Stdin []byte
	// MaxStdout and MaxStderr are how many bytes of each stream are kept;
	// the rest is read and discarded, so the child never blocks. 0 means
	// 1 MiB, lowered to the attempt's maxOutputBytes when that is set.
	MaxStdout, MaxStderr int64
}

// ProcessResult is what happened to a process that started.
type ProcessResult struct {
	Path       string        // the absolute path that ran
	ResolvedBy string        // how Name was resolved: "absolute path" or "PATH entry /usr/bin"
	ExitCode   int           // -1 when a signal ended it
	Signal     string        // the signal that ended it, "" if it exited
	TimedOut   bool          // the attempt's deadline ended it (never a success)
	Limit      string        // the limit that ended it: "timeout", "memory_limit", "file_size_limit", "output_limit"; "" if none
	Evidence   string        // how Limit was decided
	Duration   time.Duration // wall time
	Stdout     []byte        // the kept part of standard output
	Stderr     []byte        // the kept part of standard error
	// StdoutBytes and StderrBytes count everything the process wrote;
	// the Truncated flags say that more was written than kept.
	StdoutBytes, StderrBytes         int64
	StdoutTruncated, StderrTruncated bool
	MaxRSS                           int64         // bytes, the largest resident set (wait4 rusage)
	UserTime, SystemTime             time.Duration // CPU time
	Memory                           string        // how maxMemory was enforced ("cgroup2", "prlimit+watchdog"), "" if unlimited
}

// Success reports a process that exited with status 0 within its limits.
func (r *ProcessResult) Success() bool {
	return r.ExitCode == 0 && r.Signal == "" && !r.TimedOut && r.Limit == ""
}

// ProcessError reports a process that did not start, or ran and failed on
// its own. Kind is a stable, low-cardinality name: "not_found",
// "not_executable", "bad_working_directory", "launch_failed",
// "invalid_command", "exit_status", "signal", "canceled".
type ProcessError struct {
	Kind    string
	Command string
	Err     error
}

func (e *ProcessError) Error() string {
	msg := strings.TrimPrefix(strings.TrimPrefix(e.Err.Error(), "proc: "), "tools: ")
	return fmt.Sprintf("tools: process %s: %s: %s", e.Command, e.Kind, msg)
}

// Unwrap returns ErrProcess and the cause.
func (e *ProcessError) Unwrap() []error { return []error{ErrProcess, e.Err} }

// UnenforceableError reports a declared limit that this machine cannot
// enforce for a process, so the process was not started: failing closed
// rather than running unbounded. `toolgate doctor` says which limits can be
// enforced here.
type UnenforceableError struct {
	Limit  string // "memory_limit" or "file_size_limit"
	Reason string
}

func (e *UnenforceableError) Error() string {
	return fmt.Sprintf("tools: %s cannot be enforced on this machine, so the process was not started: %s", e.Limit, e.Reason)
}

var runner = sync.OnceValues(func() (*proc.Runner, error) { return proc.New(nil) })

// ProcessSupport describes which process limits this machine can enforce
// and how, one line per mechanism, for `toolgate doctor`.
func ProcessSupport() []LimitSupport {
	r, err := runner()
	if err != nil {
		return []LimitSupport{{Name: "process runner", Detail: err.Error()}}
	}
	c := r.Capabilities()
	memory := LimitSupport{Name: "maxMemory (process tools)", OK: c.Memory != "", Fallback: c.Memory == proc.MemoryPrlimit}
	switch c.Memory {
	case proc.MemoryCgroup:
		memory.Detail = "cgroup v2 memory.max under " + c.CgroupParent + ": the kernel kills the run's cgroup at the limit"
	case proc.MemoryPrlimit:
		memory.Detail = "prlimit RLIMIT_AS on the child (virtual memory) plus a watchdog on the process group's resident memory; cgroup v2 unavailable: " + c.CgroupMemory.Detail
	default:
		memory.Detail = "cannot be enforced: processes declaring maxMemory are refused. cgroup v2: " + c.CgroupMemory.Detail + "; prlimit: " + c.Prlimit.Detail
	}
	return []LimitSupport{
		{Name: "maxExecutionTime (process tools)", OK: c.ProcessGroups.OK, Detail: "the process group is killed at the deadline: " + c.ProcessGroups.Detail},
		memory,
		{Name: "maxFileSize (process tools)", OK: c.Prlimit.OK, Detail: "RLIMIT_FSIZE via " + c.Prlimit.Detail},
		{Name: "output bytes (process tools)", OK: true, Detail: "capped capture; pipes are drained past the cap"},
	}
}

// LimitSupport is whether one limit can be enforced here, and how.
type LimitSupport struct {
	Name     string
	OK       bool // enforced
	Fallback bool // enforced, by a weaker method than the preferred one
	Detail   string
}

// Run runs c under the attempt's grants and limits: the command must be
// granted (process.exec), the working directory inside a granted
// filesystem scope; the process runs in its own process group, killed as a
// whole when ctx ends (pass the ctx Execute received: it carries the
// attempt's deadline), with maxMemory and maxFileSize enforced on it.
//
// A process that ran and exited non-zero, or was killed by a signal no
// limit explains, returns its result and a *ProcessError (Kind
// "exit_status" or "signal"). A limit returns the result and a *LimitError.
// A process that did not start returns a nil result and a *ProcessError, an
// *AccessError, or an *UnenforceableError.
func (e *Env) Run(ctx context.Context, c Command) (*ProcessResult, error) {
	e.mu.Lock()
	closed := e.closed
	e.mu.Unlock()
	if closed {
		return nil, errors.New("tools: environment closed: the attempt has ended")
	}
	r, err := runner()
	if err != nil {
		return nil, &ProcessError{Kind: "launch_failed", Command: c.Name, Err: err}
	}
	search := e.SearchPath
	if search == "" {
		search = DefaultSearchPath
	}
	abs, _, err := proc.Resolve(c.Name, search)
	if err != nil {
		return nil, processError(c.Name, err)
	}
	if err := e.allowCommand(c.Name, abs); err != nil {
		return nil, err
	}
	dir, cleanup, err := e.processDir(c.Dir)
	if err != nil {
		return nil, err
	}
	defer cleanup()

	spec := proc.Spec{
		Path:        abs,
		Args:        c.Args,
		Dir:         dir,
		Env:         c.Env,
		MaxStdout:   e.streamCap(c.MaxStdout),
		MaxStderr:   e.streamCap(c.MaxStderr),
		MaxMemory:   e.Limits.MaxMemory,
		MaxFileSize: e.Limits.MaxFileSize,
	}
	if c.Stdin != nil {
		spec.Stdin = bytes.NewReader(c.Stdin)
	}
	if oc, ok := ctx.Value(outputCounterKey{}).(*OutputCounter); ok {
		spec.OnOutput = func(n int) { oc.n.Add(int64(n)) }
	}
	var ended func()
	if e.OnProcessStart != nil {
		spec.OnStart = func(id proc.Identity) { ended = e.OnProcessStart(RunningProcess(id)) }
	}
	pr, err := r.Run(ctx, spec)
	if ended != nil {
		ended()
	}
	if pr == nil {
		return nil, processError(c.Name, err)
	}
	res := &ProcessResult{
		Path: pr.Path, ResolvedBy: pr.ResolvedBy, ExitCode: pr.ExitCode, TimedOut: pr.TimedOut,
		Limit: pr.Limit, Evidence: pr.Evidence, Duration: pr.Duration,
		Stdout: pr.Stdout.Data, Stderr: pr.Stderr.Data,
		StdoutBytes: pr.Stdout.Total, StderrBytes: pr.Stderr.Total,
		StdoutTruncated: pr.Stdout.Truncated, StderrTruncated: pr.Stderr.Truncated,
		MaxRSS: pr.Usage.MaxRSS, UserTime: pr.Usage.User, SystemTime: pr.Usage.System, Memory: pr.Memory,
	}
	if pr.Signal != 0 {
		res.Signal = pr.Signal.String()
	}
	if e.OnProcess != nil {
		e.OnProcess(res)
	}
	return res, processError(c.Name, err)
}

// OutputCounter counts the bytes that the processes a call runs write to
// their standard output and error, kept or not, as they write them: a
// front end that reports a long call's progress puts one in the call's
// context (WithOutputCounter) and reads it while the call runs.
type OutputCounter struct{ n atomic.Int64 }

// Bytes returns the bytes counted so far.
func (c *OutputCounter) Bytes() int64 { return c.n.Load() }

type outputCounterKey struct{}

// WithOutputCounter returns ctx carrying c: every process Env.Run starts
// under it (or a context derived from it) adds its output to c.
func WithOutputCounter(ctx context.Context, c *OutputCounter) context.Context {
	return context.WithValue(ctx, outputCounterKey{}, c)
}

// allowCommand checks that a process.exec grant covers the command: its
// bare name as given, or its resolved absolute path.
func (e *Env) allowCommand(name, abs string) error {
	scopes, all := capability.Scopes(e.Grants, "process.exec")
	if all {
		return nil
	}
	for _, s := range scopes {
		if (!strings.Contains(name, "/") && s == name) || (filepath.IsAbs(s) && capability.ScopeCovers(s, abs)) {
			return nil
		}
	}
	return &AccessError{Capability: "process.exec:" + name, Reason: "command not granted (resolved to " + abs + ")"}
}

// processDir returns the working directory for a process: dir made
// absolute and checked against the filesystem grants, or a fresh empty
// directory when dir is "".
func (e *Env) processDir(dir string) (string, func(), error) {
	if dir == "" {
		tmp, err := scratch.make()
		if err != nil {
			return "", nil, &ProcessError{Kind: "bad_working_directory", Command: dir, Err: err}
		}
		return tmp, func() { scratch.remove(tmp) }, nil
	}
	fsys := e.FS("filesystem.read")
	abs, err := fsys.abs(dir)
	if err != nil {
		return "", nil, err
	}
	for _, name := range []string{"filesystem.read", "filesystem.write"} {
		for _, g := range e.Grants {
			if g.Name != name {
				continue
			}
			if g.Scope == "" {
				return abs, func() {}, nil
			}
			s, err := fsys.abs(g.Scope)
			if err != nil || !capability.ScopeCovers(s, abs) {
				continue
			}
			// The grant names a place (its links were resolved once, when
			// it was made): the directory is looked up below that place,
			// its own links followed only while they stay inside, and then
			// pinned: the process changes into the very directory that was
			// checked, through its descriptor, so a link swapped in
			// meanwhile cannot move it elsewhere.
			place := g.PlaceOf()
			if !filepath.IsAbs(place) {
				place = s
			}
			rel, err := filepath.Rel(s, abs)
			if err != nil {
				continue
			}
			real, err := filepath.EvalSymlinks(filepath.Join(place, rel))
			if err != nil {
				return "", nil, &ProcessError{Kind: "bad_working_directory", Command: dir, Err: err}
			}
			if !capability.ScopeCovers(place, real) {
				continue
			}
			fd, err := openNoLinks(real, unix.O_PATH|unix.O_DIRECTORY)
			if errors.Is(err, unix.ENOTDIR) {
				return "", nil, &ProcessError{Kind: "bad_working_directory", Command: dir, Err: err} // a file, not a refusal
			}
			if err != nil {
				return "", nil, &AccessError{Capability: name + ":" + abs, Reason: "the working directory changed while it was checked: " + err.Error()}
			}
			return "/proc/self/fd/" + strconv.Itoa(fd), func() { unix.Close(fd) }, nil
		}
	}
	return "", nil, &AccessError{Capability: "filesystem.read:" + abs, Reason: "the working directory is outside the granted scopes"}
}

func (e *Env) streamCap(n int64) int64 {
	if n <= 0 {
		n = defaultStreamCap
	}
	if m := e.Limits.MaxOutputBytes; m > 0 && n > m {
		n = m
	}
	return n
}

// processError turns the runner's errors into this package's.
func processError(name string, err error) error {
	if err == nil {
		return nil
	}
	var (
		le *proc.LimitError
		ue *proc.UnenforceableError
		ln *proc.LaunchError
		se *proc.SpecError
	)
	switch {
	case errors.As(err, &le):
		if le.Limit == proc.LimitTimeout {
			return &ProcessError{Kind: "timeout", Command: name, Err: err}
		}
		return &LimitError{Limit: le.Limit, Max: le.Max, Got: -1, Detail: le.Evidence}
	case errors.As(err, &ue):
		return &UnenforceableError{Limit: ue.Limit, Reason: ue.Reason}
	case errors.As(err, &ln):
		return &ProcessError{Kind: string(ln.Kind), Command: name, Err: err}
	case errors.As(err, &se):
		return &ProcessError{Kind: "invalid_command", Command: name, Err: err}
	case errors.Is(err, proc.ErrExit):
		return &ProcessError{Kind: "exit_status", Command: name, Err: err}
	case errors.Is(err, proc.ErrSignaled):
		return &ProcessError{Kind: "signal", Command: name, Err: err}
	case errors.Is(err, proc.ErrCanceled):
		return &ProcessError{Kind: "canceled", Command: name, Err: err}
	}
	return &ProcessError{Kind: "launch_failed", Command: name, Err: err}
}

// RunningProcess names a process Env.Run started so that another process
// of ours, after a crash, finds what is left of it, and only that: the pid
// (also the id of the process group the process leads), its start time in
// clock ticks after boot (field 22 of /proc/<pid>/stat), its session, the
// boot id and host name of the machine, its own cgroup if it has one, and
// the program.
type RunningProcess struct {
	Pid       int
	StartTime uint64
	Session   int
	BootID    string
	Host      string
	Cgroup    string
	Path      string
}

// ProcessLeftover is what ReapProcess found of a process.
type ProcessLeftover struct {
	Killed    int    // processes of its group (or cgroup) still running, killed with SIGKILL
	Remaining int    // of those, how many were still there a second later
	Unchecked string // why it could not be checked from here (another machine), "" if it was
}

// ReapProcess kills what is left of a process that a crashed process of
// ours started: its process group, or its cgroup. It never signals another
// process: one whose pid was reused has another start time, and a process
// of another boot or machine is not signaled (ProcessLeftover.Unchecked
// says so for another machine). The direct child is normally gone already:
// it gets SIGKILL when the process that started it dies. What its group
// started is what this finds.
func ReapProcess(p RunningProcess) (ProcessLeftover, error) {
	l, err := proc.Reap(proc.Identity(p))
	return ProcessLeftover(l), err
}
