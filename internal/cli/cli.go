// Package cli is the toolgate command line: argument parsing, output, and
// exit codes. cmd/toolgate only calls Main.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/toolgate/toolgate/mcp"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
	"github.com/toolgate/toolgate/txn"
)

// Exit codes. exitCodes is the one table of what they mean: the --help
// text is written from it, and docs/cli.md's table must say the same
// (TestExitCodes_Docs).
const (
	ExitCompleted = 0 // COMPLETED
	ExitInternal  = 1 // not done: a process tool's command failed, the database failed, an internal error
	ExitUsage     = 2 // bad flags or arguments, unknown tool or version
	ExitFailed    = 3 // FAILED: the input is not valid
	ExitDenied    = 4 // DENIED or outside the granted scopes, or refused before running (intent, idempotency key)
	ExitAborted   = 5 // ABORTED then ROLLED_BACK: a timeout, a limit, or a cancel
	ExitRollback  = 6 // ROLLED_BACK: the tool failed or its output was invalid
	// ExitVerify (7, audit verification failed) is declared with the audit
	// commands.
)

// exitRow is a row of exitCodes.
type exitRow struct {
	code    int
	meaning string
	// audit is what the code means for the audit commands, whose --help
	// lists their codes only (auditExitHelp); "" when they never exit
	// with it.
	audit string
}

// exitCodes says what each exit code means, in Markdown (backquotes are
// dropped for --help): the one table of exit codes, that every --help
// listing them is written from.
var exitCodes = []exitRow{
	{ExitCompleted, "COMPLETED (for a process tool, the command exited 0). A replay (an executed intent run again, a repeated `--idempotency-key`) runs nothing, says `replayed`, and exits with its stored outcome's code: 0 for a stored COMPLETED",
		"success (verify: the log is valid, and extends the checkpoint if given)"},
	{ExitInternal, "not done: the command a process tool ran failed (a non-zero exit, a signal, `timeout_seconds`; the call is COMPLETED and its result says how); or the database failed (it cannot be opened, another process holds its lock, or a write failed or conflicted: a full disk, a read-only file system; a `StateError`); or `doctor` found something broken; or an internal error",
		"internal error (the database cannot be opened or read, or is locked by a writer)"},
	{ExitUsage, "usage error: bad flags or arguments, an unknown tool or version, an unknown or malformed intent id, a policy or registry file that does not load",
		"usage error (bad flags, a checkpoint or key file that cannot be read)"},
	{ExitFailed, "FAILED: the input does not match the tool's schema", ""},
	{ExitDenied, "DENIED: a required capability was not granted, or a path or command is outside the granted scopes (the tool's handle refuses it as the tool runs: ROLLED_BACK with an `AuthorizationError`); the message names the `--allow` that grants it. Or refused before it ran: an intent that may not run (pending, rejected, changed), an idempotency key in conflict or in flight, an approval declined", ""},
	{ExitAborted, "ABORTED, then ROLLED_BACK: a timeout, a resource limit, or a cancel", ""},
	{ExitRollback, "ROLLED_BACK: the tool failed, or its output did not match its schema", ""},
	{ExitVerify, "verification failed: `audit verify` (an event is bad, the log does not extend the checkpoint, or the checkpoint's signature does not verify); `show` or `intent show` (the record or intent does not match the audit log)",
		"verification failed: an event is bad, the log does not extend the checkpoint, or the checkpoint's signature does not verify with the key"},
}

// exitCodesHelp is exitCodes as --help shows it.
var exitCodesHelp = exitHelp(func(e exitRow) string { return e.meaning })

// exitHelp lists, for --help, the exit codes of the rows of exitCodes for
// which meaning says something, with what it says.
func exitHelp(meaning func(exitRow) string) string {
	var b strings.Builder
	b.WriteString("Exit codes:")
	for _, e := range exitCodes {
		if meaning(e) == "" {
			continue
		}
		const indent = "     " // under the meaning's first word
		line, words := fmt.Sprintf("  %d ", e.code), 0
		for _, w := range strings.Fields(strings.ReplaceAll(meaning(e), "`", "")) {
			if words > 0 && len(line)+1+len(w) > 80 {
				b.WriteString("\n" + line)
				line, words = indent[:len(indent)-1], 0
			}
			line += " " + w
			words++
		}
		b.WriteString("\n" + line)
	}
	return b.String()
}

// Stdio are the streams the command uses.
type Stdio struct {
	In  io.Reader
	Out io.Writer
	Err io.Writer
	// Terminal reports whether In is a terminal a person answers on; nil
	// means: In is an *os.File that is a terminal (it answers TCGETS; a
	// character device such as /dev/zero is not enough).
	Terminal func() bool
}

// exitError carries an exit code through cobra.
type exitError struct {
	code int
	err  error // printed to stderr when non-nil
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit %d", e.code)
	}
	return e.err.Error()
}

func usageErr(format string, args ...any) error {
	for i, a := range args {
		if err, ok := a.(error); ok {
			args[i] = userError{err} // %v prints it in the user's terms, %w still wraps it
		}
	}
	return &exitError{code: ExitUsage, err: userError{fmt.Errorf(format, args...)}}
}

func internalErr(err error) error { return &exitError{code: ExitInternal, err: userError{err}} }

// userError is err as a person reads it: its text is
// tgruntime.Message(err) (no Go package prefixes, no system call names:
// issue 17 §5), and errors.Is and errors.As see err.
type userError struct{ err error }

func (e userError) Error() string { return tgruntime.Message(e.err) }
func (e userError) Unwrap() error { return e.err }

// Main runs the toolgate command with args and returns its exit code. It
// never panics on bad input and never prints a stack trace. With --json,
// every failure prints one JSON object on stdout: the command's own (a
// result, a report) when it printed one, else an error object (jsonError),
// failures before the lifecycle included.
func Main(ctx context.Context, args []string, stdio Stdio) (code int) {
	out := &countingWriter{w: stdio.Out}
	stdio.Out = out
	root, g := newRoot(stdio)
	defer func() {
		if p := recover(); p != nil {
			fmt.Fprintf(stdio.Err, "toolgate: internal error: %v\n", p)
			code = ExitInternal
			if (g.json || jsonFlag(args)) && out.n == 0 {
				writeJSONError(out, code, fmt.Errorf("internal error: %v", p))
			}
		}
	}()
	defer g.closeGateway()
	root.SetArgs(args)
	root.SetIn(stdio.In)
	root.SetOut(stdio.Out)
	root.SetErr(stdio.Err)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitCompleted
	}
	var ee *exitError
	if errors.As(err, &ee) {
		code = ee.code
		if ee.err != nil {
			fmt.Fprintf(stdio.Err, "toolgate: %s\n", tgruntime.Message(ee.err))
		}
		err = ee.err
	} else {
		// cobra's own errors: unknown command or flag, wrong arguments.
		code = ExitUsage
		fmt.Fprintf(stdio.Err, "toolgate: %s\nRun 'toolgate --help' for usage.\n", tgruntime.Message(err))
	}
	if (g.json || jsonFlag(args)) && out.n == 0 {
		writeJSONError(out, code, err)
	}
	return code
}

// jsonFlag reports whether args ask for --json, for a failure before the
// flags were parsed (a bad flag, an unknown command).
func jsonFlag(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "--json", "--json=true", "--json=1":
			return true
		}
	}
	return false
}

// countingWriter counts what a command wrote on stdout: with --json, a
// command that printed its own JSON object prints no error object after it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// jsonError is the object --json prints on stdout for a failure that
// printed nothing else there: the error as a result carries it (type,
// code, message) and the exit code.
type jsonError struct {
	Error struct {
		Type    string `json:"type"`
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	ExitCode int `json:"exitCode"`
}

// exitErrorCodes name the failure of each exit code, for an error that is
// none of the runtime's classified errors.
var exitErrorCodes = map[int][2]string{
	ExitInternal: {"InternalError", "internal"},
	ExitUsage:    {"UsageError", "usage"},
	ExitFailed:   {"ValidationError", "invalid_input"},
	ExitDenied:   {"AuthorizationError", "denied"},
	ExitAborted:  {"ResourceError", "aborted"},
	ExitRollback: {"ExecutionError", "rolled_back"},
	ExitVerify:   {"VerificationError", "not_verified"},
}

func writeJSONError(w io.Writer, code int, err error) {
	var j jsonError
	j.ExitCode = code
	names := exitErrorCodes[code]
	j.Error.Type, j.Error.Code = names[0], names[1]
	if info := tgruntime.Classify(err); info != nil && code != ExitUsage {
		j.Error.Type, j.Error.Code = info.Type, info.Code
	}
	switch {
	case errors.Is(err, txn.ErrLocked):
		j.Error.Code = "database_locked"
	case code == ExitUsage && (errors.Is(err, tools.ErrToolNotFound) || errors.Is(err, tools.ErrVersionNotFound)):
		j.Error.Code = "tool_not_found"
	}
	j.Error.Message = tgruntime.Message(err)
	if err == nil {
		j.Error.Message = fmt.Sprintf("exit %d", code)
	}
	b, _ := json.MarshalIndent(j, "", "  ")
	w.Write(append(b, '\n'))
}

type globals struct {
	db           string
	json         bool
	policyPath   string
	registryPath string
	wait         time.Duration // --wait: how long to wait for a database another process holds
	token        string        // --token: for a server that holds the database (see holder.go)
	approvalKey  string        // --approval-key: signs decisions on intents (see approvalkey.go)
	decides      bool          // the command records decisions on intents: open loads the approval key

	cmd  *cobra.Command // the command running
	addr string         // the address serve or mcp --http listens on, for the holder file
	api  string         // what it serves there: "http" or "mcp"

	stderr  io.Writer       // where the gateway's warnings and upstreams' stderr go
	reg     *tools.Registry // loaded once per command (upstream MCP servers start once)
	gateway *mcp.Gateway    // the registry file's mcp_servers, closed when the command ends
	// mcpOnly, set by a command that needs one tool, says which upstream
	// MCP servers to start (see forTool); nil starts them all.
	mcpOnly func(server string) bool
	// ownWarnings: the command (tools, doctor) shows the gateway's
	// warnings itself; registry does not print them.
	ownWarnings bool
}

func newRoot(stdio Stdio) (*cobra.Command, *globals) {
	g := &globals{stderr: stdio.Err}
	root := &cobra.Command{
		Use:   "toolgate",
		Short: "Run tools under RFC-0001: validated, authorized, transactional, audited",
		Long: `toolgate governs the tool calls of AI agents, under RFC-0001: every invocation
is validated against the tool's schema, authorized against the capabilities
granted to it (nothing by default), executed inside a state transaction with a
deadline, and recorded with every lifecycle transition. Agents reach it over
MCP (toolgate mcp), over HTTP (toolgate serve), or embedded in Go.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version(debug.ReadBuildInfo()),
	}
	root.SetVersionTemplate("toolgate {{.Version}}\n")
	// The commands come first; the exit codes follow them, on the top
	// level's help only (a subcommand's help lists its own).
	help := root.HelpFunc()
	root.SetHelpFunc(func(c *cobra.Command, args []string) {
		help(c, args)
		if c == root {
			fmt.Fprintf(c.OutOrStdout(), "\n%s", exitCodesHelp)
		}
	})
	root.PersistentFlags().StringVar(&g.db, "db", "", "database: a file, or a postgres:// URL (default $TOOLGATE_DB, else toolgate.db in the user's state directory)")
	root.PersistentFlags().BoolVar(&g.json, "json", false, "print JSON instead of text")
	root.PersistentFlags().StringVar(&g.policyPath, "policy", "", "capability policy file (default $TOOLGATE_POLICY; none: nothing is granted but --allow)")
	root.PersistentFlags().Var(newDurationValue(&g.wait, 0), "wait", "wait up to this long for a database another toolgate command holds (default 1s)")
	root.PersistentFlags().StringVar(&g.approvalKey, "approval-key", "", "key file that signs your approvals (default $TOOLGATE_APPROVAL_KEY, else ~/.config/toolgate/approval.key if it exists; see 'toolgate intent keygen')")
	root.PersistentFlags().StringVar(&g.token, "token", "", "bearer token for the local server that holds the database, to read through its HTTP API (default $TOOLGATE_TOKEN)")
	root.PersistentPreRunE = func(cmd *cobra.Command, args []string) error {
		g.cmd = cmd
		if g.wait < 0 {
			return usageErr("--wait %v: a duration must not be negative", g.wait)
		}
		return nil
	}
	root.PersistentFlags().StringVar(&g.registryPath, "registry", "", "registry file of external tools, YAML or JSON (default $TOOLGATE_REGISTRY; none: the built-in tools only)")
	root.AddCommand(newRunCmd(g, stdio), newToolsCmd(g, stdio), newDescribeCmd(g, stdio), newExecutionsCmd(g, stdio), newShowCmd(g, stdio), newBenchCmd(g, stdio))
	root.AddCommand(newAuditCmd(g, stdio), newStatsCmd(g, stdio), newPolicyCmd(g, stdio), newDoctorCmd(g, stdio), newIntentCmd(g, stdio), newServeCmd(g, stdio), newMCPCmd(g, stdio), newPinCmd(g, stdio))
	root.AddCommand(newBenchEchoCmd(stdio))
	return root, g
}

// dbPath resolves the database path: --db, then $TOOLGATE_DB, then
// $XDG_STATE_HOME/toolgate/toolgate.db, then ~/.local/state/toolgate/toolgate.db.
func (g *globals) dbPath() (string, error) {
	if g.db != "" {
		return g.db, nil
	}
	if p := os.Getenv("TOOLGATE_DB"); p != "" {
		return p, nil
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "toolgate", "toolgate.db"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("no database path: set --db or TOOLGATE_DB (%v)", err)
	}
	return filepath.Join(home, ".local", "state", "toolgate", "toolgate.db"), nil
}
