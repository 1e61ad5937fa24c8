package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/internal/proc"
)

// The process tools of the bounded process tools document (004): bounded,
// intention-revealing alternatives to a bare exec. Each runs one program
// through Env.Run: argv only, never a shell; the command resolved to an
// absolute path in the Env's search path; an environment of PATH plus the
// input's env entries and nothing inherited; a working directory inside a
// granted filesystem scope (none given: a fresh empty directory); the
// process group killed at the deadline; output captured up to a cap while
// the pipes keep draining.
//
// Outcomes: a process that ran is data, a COMPLETED invocation whose
// result says success, exit_code, signal and timed_out (a run stopped by
// the input's timeout_seconds returns its partial output and is never a
// success). A process that did not start (not found, not executable, bad
// working directory) fails the attempt with a *ProcessError whose Kind
// says which; an input value a process may not receive (a NUL byte, a
// relative PATH entry) fails it with a *ProcessError of kind
// "invalid_argument" wrapping an *ArgumentError. The tool's
// maxExecutionTime aborts the attempt as for every tool.

// Process tool ids.
const (
	WhichCommandID  = "which_command"
	ExecStatusID    = "exec_status"
	ExecCaptureID   = "exec_capture"
	ExecWithInputID = "exec_with_input"
	ExecID          = "exec"
)

const (
	// execMaxTime is the declared maxExecutionTime of the exec tools.
	execMaxTime = 5 * time.Minute
	// execDefaultCap is how much of a stream exec_capture and
	// exec_with_input keep when the input does not say.
	execDefaultCap = 64 << 10
	// execMaxCap is the largest max_stdout_bytes / max_stderr_bytes.
	execMaxCap = 1 << 20
	// statusStderrCap bounds exec_status's stderr summary.
	statusStderrCap = 4 << 10
	// execMaxOutput is the declared maxOutputBytes of the capturing
	// tools: two full streams, JSON-escaped, and the rest of the result.
	execMaxOutput = 16 << 20
)

// ExecResult is the result of every process tool but which_command, the
// shape of the bounded process tools document (004) section 5. Its fields are always present and in this
// order, except Stdout and StdoutTruncated, which exec_status leaves out.
// Stdout and Stderr are the kept bytes as text, invalid UTF-8 replaced by
// U+FFFD; the byte counts are of everything the process wrote.
type ExecResult struct {
	Success         bool     `json:"success"`   // exited 0, no signal, no timeout
	Operation       string   `json:"operation"` // the tool id
	Command         string   `json:"command"`   // as given
	Args            []string `json:"args"`      // as passed, one argument each
	Cwd             string   `json:"cwd"`       // absolute; "" for a fresh empty directory
	ResolvedPath    string   `json:"resolved_path"`
	ExitCode        int      `json:"exit_code"` // -1 when a signal ended the process
	Signal          string   `json:"signal"`    // "" unless a signal ended it
	TimedOut        bool     `json:"timed_out"`
	DurationMS      int64    `json:"duration_ms"`
	Stdout          *string  `json:"stdout,omitempty"`
	Stderr          string   `json:"stderr"`
	StdoutBytes     int64    `json:"stdout_bytes"`
	StderrBytes     int64    `json:"stderr_bytes"`
	StdoutTruncated *bool    `json:"stdout_truncated,omitempty"`
	StderrTruncated bool     `json:"stderr_truncated"`
}

// ProcessOutcome returns the process result a call of t produced, when t
// runs a process and returns an [ExecResult] (exec_status, exec_capture,
// exec_with_input, exec, and the tools of a registry file); ok is false for
// every other tool (which_command included: it runs nothing) and for an
// output that is not such a result. A caller that reports to a person uses
// it to say how the command ended: a COMPLETED call whose command exited
// non-zero is an execution that failed (the execution adapter document
// (000)).
func ProcessOutcome(t Tool, output []byte) (res *ExecResult, ok bool) {
	switch t.(type) {
	case previewTool, *fileTool:
	default:
		return nil, false
	}
	var r ExecResult
	if err := json.Unmarshal(output, &r); err != nil || r.Operation == "" {
		return nil, false
	}
	return &r, true
}

// ArgumentError reports an input value a process tool refuses to pass to a
// process, before anything runs. It wraps ErrInvalidValue; the tools return
// it inside a *ProcessError of kind "invalid_argument".
type ArgumentError struct {
	Field  string // the input field, e.g. "args[2]" or "env.PATH"
	Reason string
}

func (e *ArgumentError) Error() string {
	return fmt.Sprintf("tools: argument %s refused: %s", e.Field, e.Reason)
}

func (e *ArgumentError) Unwrap() error { return ErrInvalidValue }

func argumentError(command, field, reason string) error {
	return &ProcessError{Kind: "invalid_argument", Command: command, Err: &ArgumentError{Field: field, Reason: reason}}
}

// execInput is the union of the exec tools' inputs; each tool's schema
// says which fields it takes.
type execInput struct {
	Command        string            `json:"command"`
	Args           []string          `json:"args"`
	Cwd            string            `json:"cwd"`
	Env            map[string]string `json:"env"`
	TimeoutSeconds float64           `json:"timeout_seconds"`
	MaxStdoutBytes int64             `json:"max_stdout_bytes"`
	MaxStderrBytes int64             `json:"max_stderr_bytes"`
	Stdin          *string           `json:"stdin"`
}

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Schema fragments shared by the exec tools' input schemas.
const (
	schemaCommand = `"command": {"type": "string", "description": "A bare command name, looked up in the search path, or an absolute path; never run through a shell", "minLength": 1, "maxLength": 4096, "pattern": "^[^\\x00]+$"}`
	schemaArgs    = `"args": {"type": "array", "description": "Arguments after the program name, passed as they are, one argument each", "maxItems": 4096, "items": {"type": "string", "maxLength": 131071, "pattern": "^[^\\x00]*$"}}`
	schemaCwd     = `"cwd": {"type": "string", "description": "Working directory, inside a granted filesystem scope; omitted: a fresh empty directory", "minLength": 1, "maxLength": 4096, "pattern": "^[^\\x00]+$"}`
	schemaEnv     = `"env": {"type": "object", "description": "Environment variables for the process besides PATH; nothing is inherited", "maxProperties": 256, "propertyNames": {"pattern": "^[A-Za-z_][A-Za-z0-9_]*$"}, "additionalProperties": {"type": "string", "maxLength": 131071, "pattern": "^[^\\x00]*$"}}`
	schemaTimeout = `"timeout_seconds": {"type": "number", "description": "Stop the process group after this many seconds and return its partial output with timed_out true; below the tool's maxExecutionTime", "exclusiveMinimum": 0, "exclusiveMaximum": %d}`
	schemaStdin   = `"stdin": {"type": "string", "description": "Standard input of the process"}`
	schemaMaxOut  = `"max_stdout_bytes": {"type": "integer", "description": "Bytes of standard output kept (default %[1]d); the rest is drained and counted", "minimum": 1, "maximum": %[2]d},
    "max_stderr_bytes": {"type": "integer", "description": "Bytes of standard error kept (default %[1]d); the rest is drained and counted", "minimum": 1, "maximum": %[2]d}`
)

func execInputSchema(fields []string, required ...string) json.RawMessage {
	req, _ := json.Marshal(append([]string{}, required...))
	return json.RawMessage(fmt.Sprintf(`{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "properties": {
    %s
  },
  "required": %s,
  "additionalProperties": false
}`, strings.Join(fields, ",\n    "), req))
}

// execOutputSchema is the output schema of the section 5 result; withStdout
// adds stdout and stdout_truncated.
func execOutputSchema(withStdout bool) json.RawMessage {
	props := []string{
		`"success": {"type": "boolean", "description": "The process exited with status 0, without a signal or a timeout"}`,
		`"operation": {"type": "string", "description": "The tool that ran the process"}`,
		`"command": {"type": "string", "description": "The command as given"}`,
		`"args": {"type": "array", "description": "The arguments passed, one each", "items": {"type": "string"}}`,
		`"cwd": {"type": "string", "description": "The absolute working directory; empty for a fresh empty directory"}`,
		`"resolved_path": {"type": "string", "description": "The absolute path of the program that ran"}`,
		`"exit_code": {"type": "integer", "description": "The exit status; -1 when a signal ended the process"}`,
		`"signal": {"type": "string", "description": "The signal that ended the process; empty if it exited"}`,
		`"timed_out": {"type": "boolean", "description": "timeout_seconds stopped the process; never a success"}`,
		`"duration_ms": {"type": "integer", "description": "Wall time in milliseconds", "minimum": 0}`,
		`"stderr": {"type": "string", "description": "The kept part of standard error, invalid UTF-8 replaced by U+FFFD"}`,
		`"stdout_bytes": {"type": "integer", "description": "Bytes the process wrote to standard output", "minimum": 0}`,
		`"stderr_bytes": {"type": "integer", "description": "Bytes the process wrote to standard error", "minimum": 0}`,
		`"stderr_truncated": {"type": "boolean", "description": "More standard error was written than kept"}`,
	}
	required := []string{"success", "operation", "command", "args", "cwd", "resolved_path", "exit_code", "signal", "timed_out", "duration_ms", "stderr", "stdout_bytes", "stderr_bytes", "stderr_truncated"}
	if withStdout {
		props = append(props,
			`"stdout": {"type": "string", "description": "The kept part of standard output, invalid UTF-8 replaced by U+FFFD"}`,
			`"stdout_truncated": {"type": "boolean", "description": "More standard output was written than kept"}`)
		required = append(required, "stdout", "stdout_truncated")
	}
	req, _ := json.Marshal(required)
	return json.RawMessage(fmt.Sprintf(`{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "properties": {
    %s
  },
  "required": %s,
  "additionalProperties": false
}`, strings.Join(props, ",\n    "), req))
}

// execCaps are the exec tools' requirements: process.exec, unscoped
// because a bare command name is matched only once resolved (Env.Run
// checks the command against the grants); and, when the input gives a
// cwd, filesystem.read covering it, decided at authorization (without a
// cwd the process runs in a fresh empty directory and reads nothing
// granted).
func execCaps() ([]capability.Capability, []InputCapability) {
	return []capability.Capability{{Name: "process.exec"}}, []InputCapability{{Name: "filesystem.read", ScopeFrom: "cwd"}}
}

// execTool describes one of the exec tools.
type execTool struct {
	id, name, desc string
	fields         []string
	required       []string
	stdout         bool  // returns stdout
	fixedStderr    int64 // exec_status: the stderr summary's size
	defaultCap     int64
}

func (x execTool) tool() Tool {
	required, fromInput := execCaps()
	decl := Declaration{
		ID: x.id, Version: "1.0.0", Name: x.name, Description: x.desc,
		InputSchema:          execInputSchema(x.fields, x.required...),
		OutputSchema:         execOutputSchema(x.stdout),
		RequiredCapabilities: required,
		InputCapabilities:    fromInput,
		ResourceLimits:       ResourceLimits{MaxExecutionTime: execMaxTime, MaxOutputBytes: execMaxOutput},
	}
	return previewTool{NewRaw(decl, x.execute)}
}

func (x execTool) execute(ctx context.Context, env *Env, raw json.RawMessage) (json.RawMessage, error) {
	var in execInput
	d := json.NewDecoder(bytes.NewReader(raw))
	d.DisallowUnknownFields()
	if err := d.Decode(&in); err != nil {
		return nil, fmt.Errorf("tools: decoding %s input: %w", x.id, err)
	}
	c := Command{Name: in.Command, Args: in.Args, Dir: in.Cwd}
	if err := checkArgs(in.Command, in.Args); err != nil {
		return nil, err
	}
	envv, err := processEnv(in.Command, env, in.Env)
	if err != nil {
		return nil, err
	}
	c.Env = envv
	if in.Stdin != nil {
		c.Stdin = []byte(*in.Stdin)
	}
	switch {
	case x.fixedStderr > 0:
		c.MaxStdout, c.MaxStderr = 1, x.fixedStderr // stdout is counted, not returned
	default:
		c.MaxStdout, c.MaxStderr = x.defaultCap, x.defaultCap
		if in.MaxStdoutBytes > 0 {
			c.MaxStdout = min(in.MaxStdoutBytes, execMaxCap)
		}
		if in.MaxStderrBytes > 0 {
			c.MaxStderr = min(in.MaxStderrBytes, execMaxCap)
		}
	}
	var timeout time.Duration
	if in.TimeoutSeconds > 0 {
		timeout = time.Duration(in.TimeoutSeconds * float64(time.Second))
		if lim := env.Limits.MaxExecutionTime; lim > 0 && timeout >= lim {
			return nil, argumentError(in.Command, "timeout_seconds", fmt.Sprintf("%gs is not below the attempt's maxExecutionTime %v", in.TimeoutSeconds, lim))
		}
	}
	res, err := runBounded(ctx, env, c, timeout)
	if err != nil {
		return nil, err
	}
	return json.Marshal(newExecResult(x.id, in.Command, c.Args, cwdOf(env, in.Cwd), res, x.stdout))
}

// runBounded runs c under env, stopping it after timeout when that is
// positive. A process that ran and exited non-zero, was killed by a
// signal, or was stopped by the timeout is a result and no error; a
// launch failure, a resource limit, or the end of ctx itself (the
// attempt's deadline or a cancel) is an error.
func runBounded(ctx context.Context, env *Env, c Command, timeout time.Duration) (*ProcessResult, error) {
	runCtx := ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	res, err := env.Run(runCtx, c)
	if res == nil {
		return nil, err
	}
	if ctx.Err() != nil {
		// The attempt itself ended: the runtime reports its deadline or
		// the cancel, never a result.
		if err == nil {
			err = ctx.Err()
		}
		return nil, err
	}
	var pe *ProcessError
	if err != nil && !(errors.As(err, &pe) && (pe.Kind == "exit_status" || pe.Kind == "signal" || (pe.Kind == "timeout" && res.TimedOut))) {
		return nil, err
	}
	return res, nil
}

func newExecResult(op, command string, args []string, cwd string, res *ProcessResult, withStdout bool) *ExecResult {
	r := &ExecResult{
		Success: res.Success(), Operation: op, Command: command, Args: append([]string{}, args...), Cwd: cwd,
		ResolvedPath: res.Path, ExitCode: res.ExitCode, Signal: res.Signal, TimedOut: res.TimedOut,
		DurationMS:  res.Duration.Milliseconds(),
		Stderr:      strings.ToValidUTF8(string(res.Stderr), "\uFFFD"),
		StdoutBytes: res.StdoutBytes, StderrBytes: res.StderrBytes, StderrTruncated: res.StderrTruncated,
	}
	if withStdout {
		s, t := strings.ToValidUTF8(string(res.Stdout), "\uFFFD"), res.StdoutTruncated
		r.Stdout, r.StdoutTruncated = &s, &t
	}
	return r
}

// cwdOf is the absolute form of the working directory as given, "" when
// none was (the process then ran in a fresh directory whose name would
// make two identical runs differ).
func cwdOf(env *Env, dir string) string {
	if dir == "" {
		return ""
	}
	abs, err := env.FS("filesystem.read").abs(dir)
	if err != nil {
		return dir
	}
	return abs
}

// checkArgs refuses what no process can receive as an argument.
func checkArgs(command string, args []string) error {
	for i, a := range args {
		if strings.ContainsRune(a, 0) {
			return argumentError(command, fmt.Sprintf("args[%d]", i), "contains a NUL byte")
		}
	}
	return nil
}

// processEnv builds the child's whole environment: PATH (the Env's search
// path), then the given variables in name order. Nothing is inherited. A
// given PATH replaces the default and must have only absolute entries; the
// command itself is always resolved in the Env's search path.
func processEnv(command string, env *Env, vars map[string]string) ([]string, error) {
	path := env.SearchPath
	if path == "" {
		path = DefaultSearchPath
	}
	out := []string{"PATH=" + path}
	for _, k := range slices.Sorted(mapKeys(vars)) {
		v := vars[k]
		switch {
		case !envNameRE.MatchString(k):
			return nil, argumentError(command, "env."+k, "not a variable name ([A-Za-z_][A-Za-z0-9_]*)")
		case strings.ContainsRune(v, 0):
			return nil, argumentError(command, "env."+k, "contains a NUL byte")
		case injects(k):
			return nil, argumentError(command, "env."+k, "refused: it makes the dynamic loader or an interpreter load other code into the granted program")
		case k == "PATH":
			if err := checkSearchPath(v); err != nil {
				return nil, argumentError(command, "env.PATH", err.Error())
			}
			out[0] = "PATH=" + v
			continue
		}
		out = append(out, k+"="+v)
	}
	return out, nil
}

// injects reports an environment variable that makes a program load code
// other than its own: the dynamic loader's (LD_PRELOAD, LD_LIBRARY_PATH,
// LD_AUDIT, ...), glibc's (GCONV_PATH, GLIBC_TUNABLES, ...), and the
// start-up hooks of shells, interpreters and git. A caller granted one
// command must not be able to run other code through it this way.
func injects(name string) bool {
	up := strings.ToUpper(name)
	for _, p := range []string{"LD_", "DYLD_", "MALLOC_", "GIT_CONFIG", "PYTHON", "PERL5", "RUBY", "NODE_", "BASH_FUNC_"} {
		if strings.HasPrefix(up, p) {
			return true
		}
	}
	switch up {
	case "GCONV_PATH", "GLIBC_TUNABLES", "GETCONF_DIR", "HOSTALIASES", "LOCALDOMAIN", "LOCPATH", "NLSPATH",
		"RESOLV_HOST_CONF", "RES_OPTIONS", "BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "PS4", "IFS", "CDPATH",
		"PERLLIB", "PERLIO_DEBUG", "GIT_SSH", "GIT_SSH_COMMAND", "GIT_EXEC_PATH", "GIT_ASKPASS", "GIT_EXTERNAL_DIFF",
		"GIT_PAGER", "GIT_EDITOR", "GIT_PROXY_COMMAND", "SSH_ASKPASS", "EDITOR", "VISUAL", "PAGER",
		"JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "CLASSPATH", "LUA_INIT", "LUA_PATH", "LUA_CPATH":
		return true
	}
	return false
}

// checkSearchPath refuses empty and relative entries, which would resolve
// against the working directory.
func checkSearchPath(p string) error {
	for _, dir := range filepath.SplitList(p) {
		if !filepath.IsAbs(dir) {
			return fmt.Errorf("entry %q is not absolute: it would resolve against the working directory", dir)
		}
	}
	return nil
}

func mapKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// WhichCommandResult is the result of which_command. It carries the
// structured fields every process tool returns (the bounded process tools
// document (004) section 5): operation, command, args and cwd (always
// empty: it runs nothing, so it passes no arguments and has no working
// directory) and duration_ms.
type WhichCommandResult struct {
	Found      bool     `json:"found"`
	Operation  string   `json:"operation"`   // which_command
	Command    string   `json:"command"`     // as given
	Args       []string `json:"args"`        // always empty
	Cwd        string   `json:"cwd"`         // always ""
	Path       string   `json:"path"`        // the absolute path; "" when not found
	ResolvedBy string   `json:"resolved_by"` // "absolute path" or "PATH entry /usr/bin"; "" when not found
	SearchPath string   `json:"search_path"` // where a bare name was looked up
	Granted    bool     `json:"granted"`     // the attempt's process.exec grants cover it
	DurationMS int64    `json:"duration_ms"` // wall time of the resolution
	Reason     string   `json:"reason"`      // why it was not found; ""
}

func whichCommand() Tool {
	decl := Declaration{
		ID: WhichCommandID, Version: "1.0.0", Name: "Which command",
		Description: "Resolves a command to the absolute path it would run, without running it: found, path, how it was resolved, and whether the grants allow running it",
		InputSchema: execInputSchema([]string{schemaCommand}, "command"),
		OutputSchema: json.RawMessage(`{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "properties": {
    "found": {"type": "boolean", "description": "An executable was found"},
    "operation": {"type": "string", "description": "The tool: which_command"},
    "command": {"type": "string", "description": "The command as given"},
    "args": {"type": "array", "description": "Arguments passed: none, nothing runs", "maxItems": 0, "items": {"type": "string"}},
    "cwd": {"type": "string", "description": "Working directory: none, nothing runs", "maxLength": 0},
    "path": {"type": "string", "description": "The absolute path it resolves to; empty when not found"},
    "resolved_by": {"type": "string", "description": "How: absolute path, or the PATH entry it was found in; empty when not found"},
    "search_path": {"type": "string", "description": "The search path a bare name is looked up in (absolute entries only)"},
    "granted": {"type": "boolean", "description": "The process.exec grants of this call allow running it"},
    "duration_ms": {"type": "integer", "description": "Wall time of the resolution in milliseconds", "minimum": 0},
    "reason": {"type": "string", "description": "Why it was not found; empty when found"}
  },
  "required": ["found", "operation", "command", "args", "cwd", "path", "resolved_by", "search_path", "granted", "duration_ms", "reason"],
  "additionalProperties": false
}`),
		RequiredCapabilities: []capability.Capability{{Name: "process.exec"}},
		ResourceLimits:       ResourceLimits{MaxExecutionTime: 5 * time.Second},
		// Not Deterministic: duration_ms is wall time, so two calls with one
		// input may return different outputs, as for the other process tools.
		Idempotent: true,
	}
	return NewTyped(decl, func(ctx context.Context, env *Env, in struct {
		Command string `json:"command"`
	}) (WhichCommandResult, error) {
		start := time.Now()
		search := env.SearchPath
		if search == "" {
			search = DefaultSearchPath
		}
		out := WhichCommandResult{Operation: WhichCommandID, Command: in.Command, Args: []string{}, SearchPath: search}
		abs, how, err := proc.Resolve(in.Command, search)
		if err != nil {
			var le *proc.LaunchError
			if !errors.As(err, &le) {
				return out, err
			}
			out.Reason = string(le.Kind) + ": " + le.Reason
		} else {
			out.Found, out.Path, out.ResolvedBy = true, abs, how
			out.Granted = env.allowCommand(in.Command, abs) == nil
		}
		out.DurationMS = time.Since(start).Milliseconds()
		return out, nil
	})
}

// ProcessTools returns the process tools of the bounded process tools
// document (004): which_command, exec_status, exec_capture,
// exec_with_input and exec.
func ProcessTools() []Tool {
	timeout := fmt.Sprintf(schemaTimeout, int(execMaxTime/time.Second))
	caps := fmt.Sprintf(schemaMaxOut, execDefaultCap, execMaxCap)
	return []Tool{
		whichCommand(),
		execTool{
			id: ExecStatusID, name: "Exec status",
			desc:        "Runs a command (argv only, no shell) for its status: success, exit_code, timed_out and a bounded stderr summary; stdout is counted, not returned",
			fields:      []string{schemaCommand, schemaArgs, schemaCwd, schemaEnv, timeout},
			required:    []string{"command"},
			fixedStderr: statusStderrCap,
		}.tool(),
		execTool{
			id: ExecCaptureID, name: "Exec capture",
			desc:   "Runs a command (argv only, no shell) and returns its bounded stdout and stderr with per-stream truncation flags",
			fields: []string{schemaCommand, schemaArgs, schemaCwd, schemaEnv, timeout, caps},
			stdout: true, defaultCap: execDefaultCap, required: []string{"command"},
		}.tool(),
		execTool{
			id: ExecWithInputID, name: "Exec with input",
			desc:   "Runs a command (argv only, no shell) with a stdin payload and returns its bounded stdout and stderr with per-stream truncation flags",
			fields: []string{schemaCommand, schemaArgs, schemaCwd, schemaEnv, schemaStdin, timeout, caps},
			stdout: true, defaultCap: execDefaultCap, required: []string{"command", "stdin"},
		}.tool(),
		execTool{
			id: ExecID, name: "Exec (compatibility)",
			desc:   "Compatibility path: runs a command (argv only, no shell) and returns up to 1 MiB of each stream. Prefer which_command, exec_status, exec_capture or exec_with_input",
			fields: []string{schemaCommand, schemaArgs, schemaCwd, schemaEnv, schemaStdin, timeout},
			stdout: true, defaultCap: execMaxCap, required: []string{"command"},
		}.tool(),
	}
}
