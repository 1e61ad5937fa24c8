package proc

import (
	"errors"
	"fmt"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

var (
	// ErrLaunch is wrapped by every *LaunchError: the process did not start.
	ErrLaunch = errors.New("proc: process did not start")
	// ErrNotFound is wrapped by a *LaunchError of kind KindNotFound.
	ErrNotFound = errors.New("proc: command not found")
	// ErrNotExecutable is wrapped by a *LaunchError of kind KindNotExecutable.
	ErrNotExecutable = errors.New("proc: command not executable")
	// ErrBadDir is wrapped by a *LaunchError of kind KindBadDir.
	ErrBadDir = errors.New("proc: bad working directory")
	// ErrInvalidSpec is wrapped by every *SpecError.
	ErrInvalidSpec = errors.New("proc: invalid spec")
	// ErrUnenforceable is wrapped by every *UnenforceableError: a limit was
	// asked for that this machine cannot enforce, so nothing ran.
	ErrUnenforceable = errors.New("proc: limit cannot be enforced")

	// ErrLimit is wrapped by every *LimitError, with one of the four below.
	ErrLimit = errors.New("proc: resource limit exceeded")
	// ErrTimeout is wrapped by a *LimitError whose Limit is LimitTimeout.
	ErrTimeout = errors.New("proc: timed out")
	// ErrMemoryLimit is wrapped by a *LimitError whose Limit is LimitMemory.
	ErrMemoryLimit = errors.New("proc: memory limit exceeded")
	// ErrFileSizeLimit is wrapped by a *LimitError whose Limit is LimitFileSize.
	ErrFileSizeLimit = errors.New("proc: file size limit exceeded")
	// ErrOutputLimit is wrapped by a *LimitError whose Limit is LimitOutput.
	ErrOutputLimit = errors.New("proc: output limit exceeded")

	// ErrExit is wrapped by every *ExitError: the process exited with a
	// non-zero status.
	ErrExit = errors.New("proc: process exited with non-zero status")
	// ErrSignaled is wrapped by every *SignalError: a signal ended the process
	// and no limit of ours explains it.
	ErrSignaled = errors.New("proc: process killed by a signal")
	// ErrCanceled is returned (wrapping the context's error) when the
	// caller's context was canceled before the process ended. A context
	// deadline is a timeout, not a cancellation.
	ErrCanceled = errors.New("proc: run canceled")
)

// Limit names, stable and low-cardinality: the runtime uses them as the
// OpenTelemetry error.type of a process tool that hit a limit.
const (
	LimitTimeout  = "timeout"
	LimitMemory   = "memory_limit"
	LimitFileSize = "file_size_limit"
	LimitOutput   = "output_limit"
)

// LaunchKind says why a process did not start.
type LaunchKind string

// The launch failure kinds. Their strings are stable error.type values.
const (
	KindNotFound      LaunchKind = "not_found"
	KindNotExecutable LaunchKind = "not_executable"
	KindBadDir        LaunchKind = "bad_working_directory"
	KindOther         LaunchKind = "launch_failed"
)

// LaunchError reports a process that did not start.
type LaunchError struct {
	Kind    LaunchKind
	Command string // the command as given, or the working directory for KindBadDir
	Reason  string // for a person: what was looked at and why it failed
	Err     error  // the underlying error, if any
}

func (e *LaunchError) Error() string {
	s := fmt.Sprintf("proc: %s: %s: %s", e.Kind, e.Command, e.Reason)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns ErrLaunch, the sentinel of the kind, and the underlying
// error, so errors.Is(err, ErrNotFound) and errors.Is(err, fs.ErrNotExist)
// both work.
func (e *LaunchError) Unwrap() []error {
	errs := []error{ErrLaunch}
	switch e.Kind {
	case KindNotFound:
		errs = append(errs, ErrNotFound)
	case KindNotExecutable:
		errs = append(errs, ErrNotExecutable)
	case KindBadDir:
		errs = append(errs, ErrBadDir)
	}
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	return errs
}

// SpecError reports a Spec field that cannot be run as given.
type SpecError struct {
	Field  string // e.g. "Env[2]"
	Reason string
}

func (e *SpecError) Error() string {
	return fmt.Sprintf("proc: invalid spec: %s: %s", e.Field, e.Reason)
}

func (e *SpecError) Unwrap() error { return ErrInvalidSpec }

// UnenforceableError reports a limit that was asked for and that no method
// available on this machine can enforce. Nothing was started.
type UnenforceableError struct {
	Limit  string // LimitMemory or LimitFileSize
	Reason string // what was tried, from Probe
}

func (e *UnenforceableError) Error() string {
	return fmt.Sprintf("proc: %s cannot be enforced on this machine: %s", e.Limit, e.Reason)
}

func (e *UnenforceableError) Unwrap() error { return ErrUnenforceable }

// LimitError reports a run ended by one of its limits. The Result returned
// with it holds what was captured until then.
type LimitError struct {
	Limit    string // LimitTimeout, LimitMemory, LimitFileSize or LimitOutput
	Max      int64  // the limit: bytes, or nanoseconds for LimitTimeout
	Evidence string // how the outcome was classified (see the package doc)
}

func (e *LimitError) Error() string {
	max := fmt.Sprintf("%d bytes", e.Max)
	if e.Limit == LimitTimeout {
		max = time.Duration(e.Max).String()
	}
	return fmt.Sprintf("proc: %s exceeded (limit %s): %s", e.Limit, max, e.Evidence)
}

// Unwrap returns ErrLimit and the sentinel of the limit.
func (e *LimitError) Unwrap() []error {
	errs := []error{ErrLimit}
	switch e.Limit {
	case LimitTimeout:
		errs = append(errs, ErrTimeout)
	case LimitMemory:
		errs = append(errs, ErrMemoryLimit)
	case LimitFileSize:
		errs = append(errs, ErrFileSizeLimit)
	case LimitOutput:
		errs = append(errs, ErrOutputLimit)
	}
	return errs
}

// ExitError reports a process that exited on its own with a non-zero status.
type ExitError struct {
	Path string // the resolved absolute path
	Code int
}

func (e *ExitError) Error() string {
	return fmt.Sprintf("proc: %s exited with status %d", e.Path, e.Code)
}

func (e *ExitError) Unwrap() error { return ErrExit }

// SignalError reports a process ended by a signal that no limit of ours
// explains (someone else killed it, or it crashed).
type SignalError struct {
	Path   string
	Signal syscall.Signal
}

func (e *SignalError) Error() string {
	return fmt.Sprintf("proc: %s killed by signal %s", e.Path, signalName(e.Signal))
}

func (e *SignalError) Unwrap() error { return ErrSignaled }

func signalName(s syscall.Signal) string {
	if n := unix.SignalName(s); n != "" {
		return n
	}
	return fmt.Sprintf("signal %d", int(s))
}

// ErrorType returns a stable, low-cardinality name for an error returned by
// this package, for the OpenTelemetry error.type attribute: a Limit name
// ("timeout", "memory_limit", "file_size_limit", "output_limit"), a
// LaunchKind, "exit_status", "signal", "canceled", "invalid_spec",
// "limit_unenforceable"; "" for nil and "_OTHER" for anything else.
func ErrorType(err error) string {
	var (
		le *LimitError
		ln *LaunchError
	)
	switch {
	case err == nil:
		return ""
	case errors.As(err, &le):
		return le.Limit
	case errors.As(err, &ln):
		return string(ln.Kind)
	case errors.Is(err, ErrExit):
		return "exit_status"
	case errors.Is(err, ErrSignaled):
		return "signal"
	case errors.Is(err, ErrCanceled):
		return "canceled"
	case errors.Is(err, ErrInvalidSpec):
		return "invalid_spec"
	case errors.Is(err, ErrUnenforceable):
		return "limit_unenforceable"
	}
	return "_OTHER"
}
