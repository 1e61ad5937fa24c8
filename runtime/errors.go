package runtime

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/rules"
	"github.com/toolgate/toolgate/tools"
	"io/fs"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
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

// ErrClosed is returned by Execute after Close has begun. It is also the
// cause with which Close stops the calls still running when its context
// ends, and with which a front end's shutdown (server.Server.Shutdown)
// stops the calls it started: such a call's error wraps it.
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
	// Cedar is the Cedar policies' part of the decision, when the policy
	// has any: a deny names the policies that forbid the call, an
	// approval those that ask a person (package rules).
	Cedar *rules.Decision
}

func (e *AuthorizationError) Error() string {
	switch {
	case e.Err != nil:
		return fmt.Sprintf("runtime: %s: %v", e.Tool, strings.TrimPrefix(e.Err.Error(), "tools: "))
	case e.Reason != "" && len(e.Missing) == 0 && e.Cedar != nil && e.Cedar.Effect != rules.Allow:
		return fmt.Sprintf("runtime: denied: %s: %s", e.Tool, e.Reason)
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
	case len(e.Missing) == 0 && e.Cedar != nil && e.Cedar.Effect == rules.Deny:
		return "cedar_forbidden"
	case len(e.Missing) == 0 && e.Cedar != nil && e.Cedar.Effect == rules.Approval:
		return "approval_required"
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
	if le := (*tools.LimitError)(nil); errors.As(e.Err, &le) {
		// The limit's own message names it; the code says which it was.
		return "runtime: " + strings.TrimPrefix(e.Err.Error(), "tools: ")
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
	case e.Canceled && errors.Is(e.Err, ErrClosed):
		return fmt.Sprintf("runtime: %s was stopped: the server shut down, and the call did not finish within the shutdown's grace period", e.Tool)
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

// Classify describes err as a result would (its RFC-0001 class, its code,
// its message in the user's terms), or returns nil when err is none of the
// runtime's classified errors: for a caller that reports an error Execute,
// Propose or another method returned without a result.
func Classify(err error) *ErrorInfo {
	if classOf(err) == nil {
		return nil
	}
	return errorInfo(err)
}

// errorInfo describes err for a result and a record.
func errorInfo(err error) *ErrorInfo {
	if err == nil {
		return nil
	}
	info := &ErrorInfo{Type: "StateError", Code: "internal", Message: capMessage(Message(err))}
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

// checkToken refuses an invocation's token reference that a record could
// not hold as it is: an issuer or subject longer than MaxPrincipal bytes or
// not printable, a hash that is not 64 lowercase hex digits.
func checkToken(t *audit.Token) error {
	if t == nil {
		return nil
	}
	if err := checkPrincipal(t.Issuer); err != nil || t.Issuer == "" {
		return badIdentity("token issuer", t.Issuer, "not printable text of 1 to 256 bytes")
	}
	if err := checkPrincipal(t.Subject); err != nil {
		return badIdentity("token subject", t.Subject, "not printable text of at most 256 bytes")
	}
	if len(t.SHA256) != 64 || strings.Trim(t.SHA256, "0123456789abcdef") != "" {
		return badIdentity("token hash", t.SHA256, "not 64 lowercase hex digits")
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

// Message renders err for the person who reads it: the one rule by which
// every message toolgate shows or stores (a result's, a record's and its
// audit events' error message, the CLI's output, the HTTP boundary's
// problem documents, the MCP server's error results) speaks the user's
// terms, not Go's (issue 17 §5). It is err.Error() with, for each error in
// err's tree (errors.Unwrap, and Unwrap() []error):
//
//   - a Go package's prefix dropped ("runtime: ", "tools: ", "txn: ",
//     "json: ", ...): the prefix helps a programmer reading a Go error
//     value, not the user;
//   - a Go error type rendered in the user's terms: a *fs.PathError as
//     "cannot open PATH: permission denied" (never a system call's name
//     such as openat or statat), an *os.LinkError and an *os.SyscallError
//     alike, a JSON decoding error without Go's type names, a number or a
//     time that did not parse as what was expected.
//
// Text that a wrapper formatted with %v rather than %w is not in the tree;
// its package prefixes are dropped where a message part begins. The error
// value itself is unchanged: errors.Is and errors.As are the contract for
// programs, Message the text for people.
func Message(err error) string {
	if err == nil {
		return ""
	}
	msg := err.Error()
	var walk func(e error)
	walk = func(e error) {
		if e == nil {
			return
		}
		own := e.Error()
		if own == "" {
			return
		}
		if r, ok := renderGoError(e); ok {
			if pe, ok := e.(*fs.PathError); ok {
				// A wrapper that said what the error says ("open P: " before
				// "open P: not a directory") says it once.
				msg = strings.ReplaceAll(msg, pe.Op+" "+pe.Path+": "+own, own)
			}
			// Unless msg says it rendered already (a front end's wrapper
			// whose text is Message's): "cannot open", not "cannot cannot open".
			if own != r && (strings.Contains(own, r) || !strings.Contains(msg, r)) {
				msg = strings.ReplaceAll(msg, own, r)
			}
			return // the rendering says all of it
		}
		if p := goPrefix(own); p != "" {
			msg = strings.ReplaceAll(msg, own, own[len(p):])
		}
		switch u := e.(type) {
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		case interface{ Unwrap() []error }:
			for _, c := range u.Unwrap() {
				walk(c)
			}
		}
	}
	walk(err)
	return flatFileErrors(goPrefixes().ReplaceAllString(msg, "$1"))
}

// fileOpAt matches where a file error's Go form (*fs.PathError's "OP PATH:
// REASON") may begin in a message: an operation an *fs.PathError names
// (fileVerb's cases) where a message part begins.
var fileOpAt = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(?:^|: |; )(` + fileOps + `) `) })

const fileOps = `open|openat2?|creat|read|pread|readdirent|readdir|getdents(?:64)?|readlink(?:at)?|seek|write|pwrite|sync|fsync|fdatasync|f?truncate|mkdir(?:at)?|remove|unlink(?:at)?|rmdir|rename(?:at2?)?|link(?:at)?|symlink(?:at)?|f?chmod(?:at)?|[fl]?chown(?:at)?|close|stat|lstat|fstat|statat|fstatat|newfstatat`

// errnoTexts are the system errors' texts, REASON in a file error's Go form.
var errnoTexts = sync.OnceValue(func() []string {
	var out []string
	for n := 1; n < 256; n++ {
		if r := syscall.Errno(n).Error(); !strings.HasPrefix(r, "errno ") {
			out = append(out, r)
		}
	}
	return out
})

// flatFileErrors renders each file error's Go form in msg, text that a
// wrapper formatted with %v ("open policy.json: no such file or
// directory"), as Message renders the error value ("cannot open
// policy.json: no such file or directory"). REASON must be a system
// error's text, ending the message or a part of it.
func flatFileErrors(msg string) string {
	if !strings.Contains(msg, ": ") {
		return msg
	}
	var b strings.Builder
	last := 0
	for _, m := range fileOpAt().FindAllStringSubmatchIndex(msg, -1) {
		if m[2] < last {
			continue
		}
		op, rest := msg[m[2]:m[3]], msg[m[3]+1:]
		for i := 0; ; {
			j := strings.Index(rest[i:], ": ")
			if j < 0 {
				break
			}
			p := i + j
			if reason := errnoAt(rest[p+2:]); p > 0 && reason != "" {
				b.WriteString(msg[last:m[2]])
				b.WriteString("cannot " + fileVerb(op) + " " + rest[:p] + ": " + reason)
				last = m[3] + 1 + p + 2 + len(reason)
				break
			}
			i = p + 2
		}
	}
	if last == 0 {
		return msg
	}
	b.WriteString(msg[last:])
	return b.String()
}

// errnoAt returns the system error's text s begins with, when it ends s or
// is followed by punctuation, else "".
func errnoAt(s string) string {
	for _, r := range errnoTexts() {
		if strings.HasPrefix(s, r) && (len(s) == len(r) || strings.ContainsRune(":;,.)", rune(s[len(r)]))) {
			return r
		}
	}
	return ""
}

// goPackages are the packages whose prefix Message drops: toolgate's own,
// and the standard library's and dependencies' that reach a user.
const goPackages = `runtime|tools|capability|txn|lifecycle|audit|mcp|server|client|proc|json|time|strconv|bbolt|bolt|os|fs|io|syscall|exec|yaml|jsonschema|url|x509|errors|fmt|filepath`

// goPrefixes matches a package prefix where a message part begins: at the
// start, or after ": " or "; ".
var goPrefixes = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`(^|: |; )(?:` + goPackages + `)(?:\.[A-Z][A-Za-z]*)?: `)
})

// goPrefix returns the package prefix msg starts with, or "".
func goPrefix(msg string) string {
	if loc := goPrefixes().FindStringIndex(msg); loc != nil && loc[0] == 0 {
		return msg[:loc[1]]
	}
	return ""
}

// renderGoError renders the Go error types that reach a user in the
// user's terms.
func renderGoError(e error) (string, bool) {
	switch e := e.(type) {
	case *fs.PathError:
		return fmt.Sprintf("cannot %s %s: %s", fileVerb(e.Op), e.Path, Message(e.Err)), true
	case *os.LinkError:
		return fmt.Sprintf("cannot %s %s to %s: %s", fileVerb(e.Op), e.Old, e.New, Message(e.Err)), true
	case *os.SyscallError:
		return Message(e.Err), true
	case *json.UnmarshalTypeError:
		where := "the value"
		if e.Field != "" {
			where = fmt.Sprintf("the value of %q", e.Field)
		}
		return fmt.Sprintf("%s is %s where %s is expected", where, JSONKind(e.Value), jsonTypeOf(e.Type)), true
	case *strconv.NumError:
		want := "a number"
		switch e.Func {
		case "ParseInt", "Atoi":
			want = "a whole number"
		case "ParseUint":
			want = "a whole number, 0 or more"
		case "ParseBool":
			want = "true or false"
		}
		if errors.Is(e.Err, strconv.ErrRange) {
			return fmt.Sprintf("%q is out of range", e.Num), true
		}
		return fmt.Sprintf("%q is not %s", e.Num, want), true
	case *time.ParseError:
		return fmt.Sprintf("%q is not a time of the form %s", e.Value, e.Layout), true
	}
	return "", false
}

// fileVerb says what a file operation (a system call's name, as an
// *fs.PathError carries it) was trying to do.
func fileVerb(op string) string {
	switch op {
	case "open", "openat", "openat2", "creat":
		return "open"
	case "read", "pread", "readdirent", "readdir", "getdents", "getdents64", "readlink", "readlinkat", "seek":
		return "read"
	case "write", "pwrite", "sync", "fsync", "fdatasync", "truncate", "ftruncate":
		return "write"
	case "mkdir", "mkdirat":
		return "create the directory"
	case "remove", "unlink", "unlinkat", "rmdir":
		return "remove"
	case "rename", "renameat", "renameat2":
		return "rename"
	case "link", "linkat", "symlink", "symlinkat":
		return "link"
	case "chmod", "fchmod", "fchmodat", "chown", "fchown", "lchown", "fchownat":
		return "change the permissions of"
	case "close":
		return "close"
	}
	return "access" // stat, lstat, fstat, statat, fstatat, ...
}

// JSONKind names, for the person who reads it, the kind of a JSON value
// as encoding/json reports it in a *json.UnmarshalTypeError's Value
// ("object", "array", "bool", "number", "number 1e999", "string",
// "null"): "an object", "an array", "a boolean", "a number", "a string",
// "null". Every message toolgate shows about a JSON value of the wrong
// kind (Message's, the HTTP boundary's) names the kind with it.
func JSONKind(v string) string {
	switch {
	case v == "object", v == "array":
		return "an " + v
	case v == "bool":
		return "a boolean"
	case v == "null":
		return "null"
	case strings.HasPrefix(v, "number"):
		return "a number"
	case v == "string":
		return "a string"
	}
	return v
}

// jsonTypeOf names what a Go type holds, in JSON's terms.
func jsonTypeOf(t reflect.Type) string {
	if t == nil {
		return "another value"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "another value"
}
