package runtime

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/toolgate/toolgate/capability"
)

// The error classes of RFC-0001 7.1. Every error Execute returns for an
// attempt that ended short of COMPLETED is one of the matching types
// (errors.As), and matches its class with errors.Is. Two cases carry more:
// when the attempt's record could not be written, a *StateError is joined
// after the cause (so errors.Is(err, ErrState) is then also true); and an
// ExecutionError wraps the tool's own error, whatever that error is.
var (
	ErrValidation    = errors.New("runtime: validation error")
	ErrAuthorization = errors.New("runtime: authorization error")
	ErrResource      = errors.New("runtime: resource error")
	ErrExecution     = errors.New("runtime: execution error")
	ErrTimeout       = errors.New("runtime: timeout error")
	ErrState         = errors.New("runtime: state error")
)

// ErrClosed is returned by Execute after Close has begun.
var ErrClosed = errors.New("runtime: closed")

// ValidationError: the input (rule 1) or the output (rule 9) does not match
// its schema. Never retried.
type ValidationError struct {
	Phase string // "input" or "output", or "invocation" (its principal or call id)
	Err   error  // a *tools.ValueError, or why the input was refused before decoding
}

func (e *ValidationError) Error() string {
	return fmt.Sprintf("runtime: invalid %s: %v", e.Phase, strings.TrimPrefix(e.Err.Error(), "tools: "))
}
func (e *ValidationError) Unwrap() error        { return e.Err }
func (e *ValidationError) Is(target error) bool { return target == ErrValidation }
func (e *ValidationError) code() string {
	return "invalid_" + e.Phase
}

// AuthorizationError: the principal lacks a capability the tool requires
// (rule 2), or a handle refused something outside the grants during
// execution (rule 7). Never retried.
type AuthorizationError struct {
	Principal string
	Tool      string
	Missing   []capability.Capability // rule 2: what no grant covered
	Err       error                   // rule 7: the handle's *tools.AccessError

	// Rule 2's decision: its id and policy revision, as in the audit log,
	// and why everything was denied when the policy could not be read.
	DecisionID     string
	PolicyRevision string
	Reason         string
}

func (e *AuthorizationError) Error() string {
	switch {
	case e.Err != nil:
		return fmt.Sprintf("runtime: %s: %v", e.Tool, strings.TrimPrefix(e.Err.Error(), "tools: "))
	case e.Reason != "":
		return fmt.Sprintf("runtime: capability denied: %s: %s", e.Tool, e.Reason)
	}
	return fmt.Sprintf("runtime: capability denied: %s requires %s, not granted to %q",
		e.Tool, strings.Join(capability.Strings(e.Missing), ", "), e.Principal)
}
func (e *AuthorizationError) Unwrap() error        { return e.Err }
func (e *AuthorizationError) Is(target error) bool { return target == ErrAuthorization }
func (e *AuthorizationError) code() string {
	switch {
	case e.Err != nil:
		return "capability_boundary"
	case e.Reason != "":
		return "policy_unavailable"
	}
	return "capability_denied"
}

// ResourceError: a resource was unavailable before execution (rule 3) or a
// declared limit was reached during it. Transient errors (no free slot) may
// be retried for idempotent tools; a limit the attempt ran into is not,
// since the same input would hit it again.
type ResourceError struct {
	Resource  string // "concurrency", or the limit: "file_size_limit", "output_limit", ...
	Transient bool
	Err       error
}

func (e *ResourceError) Error() string {
	if e.Err == nil {
		return "runtime: insufficient resources: " + e.Resource
	}
	return fmt.Sprintf("runtime: %s: %v", e.Resource, strings.TrimPrefix(e.Err.Error(), "tools: "))
}
func (e *ResourceError) Unwrap() error        { return e.Err }
func (e *ResourceError) Is(target error) bool { return target == ErrResource }
func (e *ResourceError) code() string {
	if e.Resource == "concurrency" {
		return "resource_unavailable"
	}
	return e.Resource
}

// ExecutionError: the tool returned an error, panicked, or its invocation
// was canceled by the caller. A panic carries the recovered value and the
// goroutine's stack.
type ExecutionError struct {
	Tool     string
	Err      error  // the tool's error, or context.Canceled
	Panic    any    // the recovered value, when the tool panicked
	Stack    []byte // the stack at the panic
	Canceled bool   // the caller's context was canceled
	// Code, when set, is a more precise reason than "tool_error": a process
	// that did not start ("not_found", "not_executable",
	// "bad_working_directory", ...) or failed ("exit_status", "signal").
	Code string
}

func (e *ExecutionError) Error() string {
	switch {
	case e.Panic != nil:
		return fmt.Sprintf("runtime: %s panicked: %v", e.Tool, e.Panic)
	case e.Canceled:
		return fmt.Sprintf("runtime: %s canceled: %v", e.Tool, e.Err)
	}
	return fmt.Sprintf("runtime: %s failed: %v", e.Tool, e.Err)
}
func (e *ExecutionError) Unwrap() error        { return e.Err }
func (e *ExecutionError) Is(target error) bool { return target == ErrExecution }
func (e *ExecutionError) code() string {
	switch {
	case e.Panic != nil:
		return "panic"
	case e.Canceled:
		return "canceled"
	case e.Code != "":
		return e.Code
	}
	return "tool_error"
}

// TimeoutError: the attempt ran past its max execution time (rule 5), or
// past the deadline of the caller's context (Caller).
type TimeoutError struct {
	Tool   string
	Limit  time.Duration // the tool's max execution time; 0 when Caller
	Caller bool          // the caller's own deadline passed first
}

func (e *TimeoutError) Error() string {
	if e.Caller {
		return fmt.Sprintf("runtime: %s: the caller's deadline passed", e.Tool)
	}
	return fmt.Sprintf("runtime: %s timed out after %v", e.Tool, e.Limit)
}
func (e *TimeoutError) Is(target error) bool { return target == ErrTimeout }
func (e *TimeoutError) code() string         { return "timeout" }

// StateError: the state transaction could not begin, commit or be recorded
// (rules 4, 8, 10). Never retried.
type StateError struct {
	Op  string // "begin", "commit", "rollback", "record"
	Err error
}

func (e *StateError) Error() string {
	return fmt.Sprintf("runtime: state transaction %s failed: %v", e.Op, e.Err)
}
func (e *StateError) Unwrap() error        { return e.Err }
func (e *StateError) Is(target error) bool { return target == ErrState }
func (e *StateError) code() string         { return "state_error" }

// ErrorInfo is the structured error of a result (RFC-0001 4.4.5).
type ErrorInfo struct {
	Type    string `json:"type"`    // the RFC class: "ValidationError", "TimeoutError", ...
	Code    string `json:"code"`    // a low-cardinality reason: "invalid_input", "timeout", "panic", ...
	Message string `json:"message"` // for people
	Stack   string `json:"stack,omitempty"`
}

type classified interface {
	error
	code() string
}

// classOf returns the outermost classified error in err's chain: the class
// of the attempt. A tool's own error wrapped inside an ExecutionError, or a
// StateError joined after the cause, does not change it.
func classOf(err error) classified {
	var c classified
	if errors.As(err, &c) {
		return c
	}
	return nil
}

// maxMessage bounds the error message stored in a record, its audit events
// and a result. A message can quote the input (a path that does not exist):
// uncapped, one large input would be written several times per attempt.
const maxMessage = 2048

// capMessage shortens msg to at most maxMessage bytes, at a rune boundary,
// saying how long it was.
func capMessage(msg string) string {
	if len(msg) <= maxMessage {
		return msg
	}
	suffix := fmt.Sprintf("… (%d bytes in all)", len(msg))
	return runePrefix(msg, maxMessage-len(suffix)) + suffix
}

// runePrefix returns the longest prefix of s of at most n bytes that does
// not end inside a UTF-8 sequence.
func runePrefix(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// errorInfo describes err for a result and a record.
func errorInfo(err error) *ErrorInfo {
	if err == nil {
		return nil
	}
	info := &ErrorInfo{Type: "StateError", Code: "internal", Message: capMessage(err.Error())}
	if c := classOf(err); c != nil {
		info.Code = c.code()
		info.Type = strings.TrimPrefix(fmt.Sprintf("%T", c), "*runtime.")
		if _, ok := c.(*IntentError); ok {
			info.Type = "AuthorizationError" // the RFC class of a refused intent
		}
	}
	var ee *ExecutionError
	if errors.As(err, &ee) && ee.Stack != nil {
		info.Stack = string(ee.Stack)
	}
	return info
}

// Bounds of an invocation's identity, which every record and audit event of
// it carries: a principal is at most MaxPrincipal bytes of printable text
// (no control characters, which would forge lines in logs and listings); a
// call id is 1 to MaxCallID letters, digits and . _ : - (as the HTTP
// boundary takes it).
const (
	MaxPrincipal = 256
	MaxCallID    = 128
)

// CheckIdentity reports, as Execute would, a principal or call id outside
// those bounds ("" stands for the defaults, which are valid): a
// *ValidationError of phase "invocation", for a caller that wants to refuse
// it before opening anything.
func CheckIdentity(principal, callID string) error {
	if principal == "" {
		principal = "anonymous"
	}
	if callID == "" {
		callID = "default"
	}
	return checkIdentity(principal, callID)
}

// checkIdentity refuses a principal or call id outside those bounds, with
// a *ValidationError of phase "invocation" that quotes at most its start.
func checkIdentity(principal, callID string) error {
	if err := checkPrincipal(principal); err != nil {
		return err
	}
	switch {
	case len(callID) > MaxCallID:
		return badIdentity("call id", callID, fmt.Sprintf("longer than %d bytes", MaxCallID))
	case strings.IndexFunc(callID, func(r rune) bool {
		return !('0' <= r && r <= '9' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || strings.ContainsRune("._:-", r))
	}) >= 0:
		return badIdentity("call id", callID, "only letters, digits and . _ : - are allowed")
	}
	return nil
}

// checkPrincipal refuses a principal outside the bounds (see MaxPrincipal).
func checkPrincipal(principal string) error {
	switch {
	case len(principal) > MaxPrincipal:
		return badIdentity("principal", principal, fmt.Sprintf("longer than %d bytes", MaxPrincipal))
	case !utf8.ValidString(principal) || strings.IndexFunc(principal, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0:
		return badIdentity("principal", principal, "not printable text")
	}
	return nil
}

func badIdentity(what, v, why string) error {
	return &ValidationError{Phase: "invocation", Err: fmt.Errorf("%s %q: %s", what, runePrefix(v, 32), why)}
}
