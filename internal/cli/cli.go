// Package cli is the toolgate command line: argument parsing, output, and
// exit codes. cmd/toolgate only calls Main.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"

	"github.com/toolgate/toolgate/mcp"
	"github.com/toolgate/toolgate/tools"
)

// Exit codes. exitCodes is the one table of what they mean: the --help
// text is written from it, and the README's table must say the same
// (TestExitCodes_README).
const (
	ExitCompleted = 0 // COMPLETED
	ExitInternal  = 1 // not done: a process tool's command failed, the database failed, an internal error
	ExitUsage     = 2 // bad flags or arguments, unknown tool or version
	ExitFailed    = 3 // FAILED: the input is not valid
	ExitDenied    = 4 // DENIED, or refused before running (intent, idempotency key)
	ExitAborted   = 5 // ABORTED then ROLLED_BACK: a timeout, a limit, or a cancel
	ExitRollback  = 6 // ROLLED_BACK: the tool failed or its output was invalid
	// ExitVerify (7, audit verification failed) is declared with the audit
	// commands.
)

// exitCodes says what each exit code means, in Markdown (backquotes are
// dropped for --help).
var exitCodes = []struct {
	code    int
	meaning string
}{
	{ExitCompleted, "COMPLETED (for a process tool, the command exited 0)"},
	{ExitInternal, "not done: the command a process tool ran failed (a non-zero exit, a signal, `timeout_seconds`; the call is COMPLETED and its result says how); or the database failed (it cannot be opened, or a write failed or conflicted: a full disk, a read-only file system; a `StateError`); or an internal error"},
	{ExitUsage, "usage error: bad flags or arguments, unknown tool or version"},
	{ExitFailed, "FAILED: the input does not match the tool's schema"},
	{ExitDenied, "DENIED: a required capability was not granted (see `--allow`); or refused before it ran: an intent that may not run, an idempotency key in conflict or in flight"},
	{ExitAborted, "ABORTED, then ROLLED_BACK: a timeout, a resource limit, or a cancel"},
	{ExitRollback, "ROLLED_BACK: the tool failed, or its output did not match its schema"},
	{ExitVerify, "`audit verify`: an event is bad, the log does not extend the checkpoint, or the checkpoint's signature does not verify"},
}

// exitCodesHelp is exitCodes as --help shows it.
var exitCodesHelp = func() string {
	var b strings.Builder
	b.WriteString("Exit codes:")
	for _, e := range exitCodes {
		const indent = "     " // under the meaning's first word
		line, words := fmt.Sprintf("  %d ", e.code), 0
		for _, w := range strings.Fields(strings.ReplaceAll(e.meaning, "`", "")) {
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
}()

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
	return &exitError{code: ExitUsage, err: fmt.Errorf(format, args...)}
}

func internalErr(err error) error { return &exitError{code: ExitInternal, err: err} }

// Main runs the toolgate command with args and returns its exit code. It
// never panics on bad input and never prints a stack trace.
func Main(ctx context.Context, args []string, stdio Stdio) (code int) {
	defer func() {
		if p := recover(); p != nil {
			fmt.Fprintf(stdio.Err, "toolgate: internal error: %v\n", p)
			code = ExitInternal
		}
	}()
	root, g := newRoot(stdio)
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
		if ee.err != nil {
			fmt.Fprintf(stdio.Err, "toolgate: %v\n", ee.err)
		}
		return ee.code
	}
	// cobra's own errors: unknown command or flag, wrong arguments.
	fmt.Fprintf(stdio.Err, "toolgate: %v\nRun 'toolgate --help' for usage.\n", err)
	return ExitUsage
}

type globals struct {
	db           string
	json         bool
	policyPath   string
	registryPath string

	stderr  io.Writer       // where the gateway's warnings and upstreams' stderr go
	reg     *tools.Registry // loaded once per command (upstream MCP servers start once)
	gateway *mcp.Gateway    // the registry file's mcp_servers, closed when the command ends
	// mcpOnly, set by a command that needs one tool, says which upstream
	// MCP servers to start (see forTool); nil starts them all.
	mcpOnly func(server string) bool
}

func newRoot(stdio Stdio) (*cobra.Command, *globals) {
	g := &globals{stderr: stdio.Err}
	root := &cobra.Command{
		Use:   "toolgate",
		Short: "Run tools under RFC-0001: validated, authorized, transactional, audited",
		Long: `toolgate executes tools under RFC-0001. Every invocation is validated against the
tool's schema, authorized against the capabilities granted to it (nothing by
default), executed inside a state transaction with a deadline, and recorded
with every lifecycle transition in a bbolt database.

` + exitCodesHelp,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version(debug.ReadBuildInfo()),
	}
	root.SetVersionTemplate("toolgate {{.Version}}\n")
	root.PersistentFlags().StringVar(&g.db, "db", "", "database: a file, or a postgres:// URL (default $TOOLGATE_DB, else toolgate.db in the user's state directory)")
	root.PersistentFlags().BoolVar(&g.json, "json", false, "print JSON instead of text")
	root.PersistentFlags().StringVar(&g.policyPath, "policy", "", "capability policy file (default $TOOLGATE_POLICY; none: nothing is granted but --allow)")
	root.PersistentFlags().StringVar(&g.registryPath, "registry", "", "registry file of external tools, YAML or JSON (default $TOOLGATE_REGISTRY; none: the built-in tools only)")
	root.AddCommand(newRunCmd(g, stdio), newToolsCmd(g, stdio), newDescribeCmd(g, stdio), newExecutionsCmd(g, stdio), newShowCmd(g, stdio), newBenchCmd(g, stdio))
	root.AddCommand(newAuditCmd(g, stdio), newStatsCmd(g, stdio), newPolicyCmd(g, stdio), newDoctorCmd(g, stdio), newIntentCmd(g, stdio), newServeCmd(g, stdio), newMCPCmd(g, stdio))
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
