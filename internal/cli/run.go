package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/spf13/cobra"

	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/lifecycle"
	"github.com/toolgate/toolgate/mcp"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
	"github.com/toolgate/toolgate/txn"
)

// maxInputFile bounds what --input @FILE or - reads; the runtime refuses
// inputs over its own (smaller) limit with a clear message.
const maxInputFile = 64 << 20

func newRunCmd(g *globals, stdio Stdio) *cobra.Command {
	var (
		input   string
		allow   []string
		callID  string
		who     string
		maxTime time.Duration
		// intents and idempotency
		intentID, intentHash string
		idemKey              string
		bypass, noWait       bool
		idemTTL              time.Duration
	)
	cmd := &cobra.Command{
		Use:   "run TOOL[@VERSION]",
		Short: "Run one invocation of a tool",
		Long: `Run one invocation of a tool through the RFC-0001 lifecycle and print its
output (stdout) and final state (stderr); with --json, print the whole result.

Nothing is granted by default. The policy (--policy) grants capabilities to
principals; --allow adds a capability for this one call, for example
--allow filesystem.read:. to read files below the current directory (relative
filesystem scopes are resolved against the current directory). The call runs
as --principal, by default cli:$USER.

` + telemetryHelp + `

` + exitCodesHelp,
		Example: `  toolgate run file.read --allow filesystem.read:. --input '{"path":"README.md"}'
  echo '{"path":"go.mod"}' | toolgate run file.read@1.0.0 --allow filesystem.read:. --input -`,
		Args: func(cmd *cobra.Command, args []string) error {
			if intentID != "" || intentHash != "" {
				return cobra.MaximumNArgs(1)(cmd, args)
			}
			return cobra.ExactArgs(1)(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			var id, version string
			if len(args) == 1 {
				id, version, _ = strings.Cut(args[0], "@")
				g.forTool(id)
			}
			if (intentID == "") != (intentHash == "") {
				return usageErr("--intent and --hash go together")
			}
			if intentID != "" && cmd.Flags().Changed("input") {
				return usageErr("--input: an intent runs the input that was approved")
			}
			if (bypass || noWait || cmd.Flags().Changed("idempotency-ttl")) && idemKey == "" {
				return usageErr("--bypass-idempotency, --no-wait and --idempotency-ttl need --idempotency-key")
			}
			if cmd.Flags().Changed("idempotency-ttl") && idemTTL <= 0 {
				return usageErr("--idempotency-ttl %v: the time a key holds its result must be positive, such as 60s or 24h", idemTTL)
			}
			// Everything that can be refused without the database is
			// refused before it is opened (and created).
			if err := checkIdempotencyKey(idemKey); err != nil {
				return usageErr("--idempotency-key: %v", err)
			}
			if intentID != "" {
				if err := checkIntentRef(intentID, intentHash); err != nil {
					return usageErr("%v", err)
				}
			}
			if who == "" {
				who = principal()
			}
			if err := tgruntime.CheckIdentity(who, callID); err != nil {
				return usageErr("--principal or --call-id: %v", err)
			}
			in, err := readInput(input, stdio.In)
			if err != nil {
				return usageErr("--input: %v", err)
			}
			reg, err := g.registry()
			if err != nil {
				return err
			}
			grants, err := parseAllow(allow, reg)
			if err != nil {
				return usageErr("--allow: %v", err)
			}
			warnBroadGrants(stdio.Err, grants)
			if intentID == "" {
				if _, err := reg.Lookup(id, version); err != nil {
					return usageErr("%v; 'toolgate tools' lists the registered tools", err)
				}
			} else if err := g.intentDatabase(intentID); err != nil {
				return err
			}
			policy, err := g.policy() // a broken policy file: refused before the database is opened
			if err != nil {
				return err
			}
			tel := startTelemetry(cmd.Context(), stdio.Err)
			defer tel.shutdown() // after rt.Close: every span has ended
			opts := &tgruntime.Options{Policy: policy, Registry: reg, IdempotencyTTL: idemTTL}
			tel.configure(opts)
			rt, err := g.open(opts)
			if err != nil {
				return err
			}
			defer rt.Close(context.Background()) // idempotent; the success path checks its error below
			inv := tgruntime.Invocation{
				Tool: id, Version: version, Input: in, CallID: callID,
				Principal: who, Grants: grants,
				IntentID: intentID, IntentHash: intentHash,
				IdempotencyKey: idemKey, BypassIdempotency: bypass, IdempotencyNoWait: noWait,
			}
			if intentID != "" {
				inv.Input = nil
			}
			if maxTime != 0 {
				inv.Limits = &tools.ResourceLimits{MaxExecutionTime: maxTime}
			}
			res, err := rt.Execute(tel.context(cmd.Context()), inv)
			if errors.Is(err, tools.ErrToolNotFound) || errors.Is(err, tools.ErrVersionNotFound) {
				return usageErr("%v; 'toolgate tools' lists the registered tools", err)
			}
			if res == nil {
				if errors.Is(err, tgruntime.ErrIntent) || errors.Is(err, tgruntime.ErrIdempotency) {
					return refusedErr(err)
				}
				return internalErr(err)
			}
			held := capability.ResolveAll(grants)
			if policy != nil {
				held = append(policy.Grants(who), held...)
			}
			if perr := printResult(stdio, g.json, res, err, held); perr != nil {
				return internalErr(perr)
			}
			if cerr := rt.Close(context.Background()); cerr != nil {
				return internalErr(cerr)
			}
			// The database failed or refused the call's state transaction (a
			// full disk, a read-only file system, a conflict), or the
			// attempt's record could not be written: a store failure, not
			// the tool's, whatever the state says.
			var se *tgruntime.StateError
			if errors.As(err, &se) {
				return storeErr(err, se, res)
			}
			if res.Replayed {
				// A replay exits with the stored outcome's code: an executed
				// intent run again, or a repeated idempotency key, whose
				// stored result is COMPLETED exits 0, and says it is a replay.
				why := "the idempotency key holds it"
				if errors.Is(err, tgruntime.ErrIntent) {
					why = tgruntime.Message(err)
				}
				fmt.Fprintf(stdio.Err, "replayed: the stored result of call %s; nothing ran: %s\n", res.CallID, why)
			}
			if code := exitCode(res); code != ExitCompleted {
				return &exitError{code: code}
			}
			if e, err := reg.Lookup(res.Tool, res.Version); err == nil {
				if pr, ok := tools.ProcessOutcome(e.Tool(), res.Output); ok && !pr.Success {
					return &exitError{code: ExitInternal, err: commandFailed(pr)}
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&input, "input", "{}", "input JSON; @FILE reads it from FILE, - from stdin")
	cmd.Flags().StringArrayVar(&allow, "allow", nil, "grant a capability for this call, e.g. filesystem.read:. (repeatable)")
	cmd.Flags().StringVar(&callID, "call-id", "", "the invocation's call id (default: a new UUID)")
	cmd.Flags().StringVar(&who, "principal", "", "run as this principal of the policy (default: cli:$USER)")
	cmd.Flags().StringVar(&intentID, "intent", "", "run an approved intent (with --hash): its tool, version and input")
	cmd.Flags().StringVar(&intentHash, "hash", "", "the approved intent's SHA-256 hash (with --intent)")
	cmd.Flags().StringVar(&idemKey, "idempotency-key", "", "run at most once per key (per principal and tool): a repeat returns the stored result")
	cmd.Flags().BoolVar(&bypass, "bypass-idempotency", false, "run even though the key holds a result (audited as a bypass)")
	cmd.Flags().Var(newDurationValue(&idemTTL, 0), "idempotency-ttl", "how long the key holds this call's result (default 24h)")
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "fail at once if the key's first invocation is still running, instead of waiting for it")
	// Lowers the tool's max execution time for this call (an invocation may
	// only lower a declared limit); for tests that need a timeout.
	cmd.Flags().Var(newDurationValue(&maxTime, 0), "max-time", "lower the tool's max execution time for this call")
	cmd.Flags().MarkHidden("max-time")
	return cmd
}

// open opens the runtime on the database with opts; a nil opts.Registry
// is set to the CLI's tools (see registry).
func (g *globals) open(opts *tgruntime.Options) (*heldRuntime, error) {
	path, err := g.dbPath()
	if err != nil {
		return nil, usageErr("%v", err)
	}
	if opts.Registry == nil {
		reg, err := g.registry()
		if err != nil {
			return nil, err
		}
		opts.Registry = reg
	}
	if opts.ApprovalKey == nil && g.decides {
		if opts.ApprovalKey, err = g.loadApprovalKey(); err != nil {
			return nil, err
		}
	}
	return g.openRuntime(path, opts) // holder.go: --wait, and who holds it
}

// registry returns the frozen registry of the tools the CLI runs: the
// built-in tools, plus the tools of the registry file named by --registry
// or $TOOLGATE_REGISTRY. A file that does not load is a usage error naming
// file:line; nothing runs.
func (g *globals) registry() (*tools.Registry, error) {
	path := g.registryPath
	if path == "" {
		path = os.Getenv("TOOLGATE_REGISTRY")
	}
	if path == "" {
		reg, err := builtinRegistry()
		if err != nil {
			return nil, internalErr(err)
		}
		return reg, nil
	}
	if g.reg != nil {
		return g.reg, nil
	}
	// Upstream MCP servers (mcp_servers) start here, once per command (only
	// the one a command naming one tool needs), and stop when it ends
	// (closeGateway).
	gw := mcp.NewGateway(&mcp.GatewayOptions{Stderr: g.stderr, Version: "dev", Only: g.mcpOnly})
	reg, err := tools.LoadRegistryFileWith(path, gw.Tools, tools.Builtins()...)
	if !g.ownWarnings || err != nil {
		for _, w := range slices.Compact(gw.Warnings()) {
			fmt.Fprintf(g.stderr, "toolgate: --registry: %s\n", w)
		}
	}
	if err != nil {
		gw.Close()
		if errors.Is(err, tools.ErrRegistryFile) {
			return nil, usageErr("--registry: %v", err)
		}
		return nil, internalErr(err)
	}
	g.reg, g.gateway = reg, gw
	return reg, nil
}

// forTool makes a command that needs only tool id start no upstream MCP
// server but the one whose tools are named SERVER.TOOL with SERVER a
// prefix of id: toolgate run file.read starts none.
func (g *globals) forTool(id string) {
	g.mcpOnly = func(server string) bool { return strings.HasPrefix(id, server+".") }
}

// closeGateway stops the upstream MCP servers the registry file started.
func (g *globals) closeGateway() {
	if g.gateway != nil {
		if err := g.gateway.Close(); err != nil && g.stderr != nil {
			fmt.Fprintf(g.stderr, "toolgate: %s\n", tgruntime.Message(err))
		}
		g.gateway = nil
	}
}

// lookup finds TOOL[@VERSION] in the registry, or says how to list the
// tools.
func (g *globals) lookup(arg string) (*tools.Entry, error) {
	id, version, _ := strings.Cut(arg, "@")
	if g.reg == nil {
		g.forTool(id)
	}
	reg, err := g.registry()
	if err != nil {
		return nil, err
	}
	e, err := reg.Lookup(id, version)
	if err != nil {
		return nil, usageErr("%v; 'toolgate tools' lists the registered tools", err)
	}
	return e, nil
}

func builtinRegistry() (*tools.Registry, error) {
	reg := tools.NewRegistry()
	for _, t := range tools.Builtins() {
		if err := reg.Register(t); err != nil {
			return nil, err
		}
	}
	reg.Freeze()
	return reg, nil
}

func readInput(arg string, stdin io.Reader) (json.RawMessage, error) {
	var r io.Reader
	switch {
	case arg == "-":
		r = stdin
	case strings.HasPrefix(arg, "@"):
		f, err := os.Open(arg[1:])
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	default:
		return json.RawMessage(arg), nil
	}
	b, err := io.ReadAll(io.LimitReader(r, maxInputFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxInputFile {
		return nil, fmt.Errorf("input larger than %d bytes", maxInputFile)
	}
	return b, nil
}

// refusedErr reports an invocation refused before it ran (an intent that
// may not run, an idempotency key in conflict or in flight): exit 4. A
// malformed or unknown intent, or a malformed key, is a usage error.
func refusedErr(err error) error {
	var ie *tgruntime.IntentError
	if errors.As(err, &ie) && (ie.Code == "intent_malformed" || ie.Code == "intent_not_found") {
		return usageErr("%v", err)
	}
	var ke *tgruntime.IdempotencyError
	if errors.As(err, &ke) && ke.Code == "idempotency_invalid" {
		return usageErr("--idempotency-key: %v", err)
	}
	return &exitError{code: ExitDenied, err: err}
}

// checkIdempotencyKey refuses a key the runtime would refuse
// (idempotency_invalid), before the database is opened: longer than
// tgruntime.MaxIdempotencyKey bytes, or holding anything but printable
// UTF-8 (newlines, tabs and other control characters included). The rules
// are the runtime's (runtime/idempotency.go), which package cli cannot
// call without an open database; TestCheckIdempotencyKey_AgreesWithRuntime
// keeps them in step.
func checkIdempotencyKey(key string) error {
	switch {
	case len(key) > tgruntime.MaxIdempotencyKey:
		return fmt.Errorf("the key is %d bytes, longer than the %d allowed", len(key), tgruntime.MaxIdempotencyKey)
	case strings.IndexFunc(key, func(r rune) bool { return !unicode.IsPrint(r) || r == unicode.ReplacementChar }) >= 0:
		return fmt.Errorf("%q holds unprintable characters (or bytes that are not UTF-8): a key is printable text", key)
	}
	return nil
}

// storeErr reports a call that the database failed (or refused) as a
// store failure, exit 1: a commit that fails because the disk is full is
// not the tool's failure. A COMPLETED call whose staged file writes could
// not be applied says so as it is.
func storeErr(err error, se *tgruntime.StateError, res *tgruntime.Result) error {
	switch {
	case res.Error == nil:
		return internalErr(err)
	case errors.Is(err, txn.ErrConflict):
		return &exitError{code: ExitInternal, err: fmt.Errorf("the call's state transaction conflicted with another call's at its %s; nothing of it was committed: run it again", se.Op)}
	}
	// The cause is in the result printed above (or in --json's error).
	return &exitError{code: ExitInternal, err: fmt.Errorf("the database failed at the state transaction's %s, so the call did not complete: a store failure, not the tool's", se.Op)}
}

// commandFailed says how a process tool's command failed: the call is
// COMPLETED (the process ran; its end is data), but the execution failed,
// and the person who ran it must not read it as a success (the execution
// adapter document (000)).
func commandFailed(pr *tools.ExecResult) error {
	const after = "; the call completed, the command failed"
	switch {
	case pr.TimedOut:
		return errors.New("the command was stopped after timeout_seconds" + after)
	case pr.Signal != "":
		return fmt.Errorf("the command was killed by signal %s%s", pr.Signal, after)
	}
	return fmt.Errorf("the command exited with status %d%s", pr.ExitCode, after)
}

// principal names the CLI's caller: "cli:" and the OS user name.
func principal() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return "cli:" + u.Username
	}
	return fmt.Sprintf("cli:uid-%d", os.Getuid())
}

// exitCode maps the final state to the documented exit code. A path or
// command outside the granted scopes is an authorization failure, exit 4
// like a DENIED, though the tool's handle found it during execution (so
// the call ended ROLLED_BACK with an AuthorizationError): a process tool's
// command and working directory, a file tool's path, are in the input, and
// the runtime checks a capability's scope where the tool uses it.
func exitCode(res *tgruntime.Result) int {
	if res.Error != nil && res.Error.Type == "AuthorizationError" {
		return ExitDenied
	}
	switch res.State {
	case lifecycle.Completed:
		return ExitCompleted
	case lifecycle.Failed:
		return ExitFailed
	case lifecycle.Denied:
		return ExitDenied
	case lifecycle.RolledBack:
		if last := res.Attempts[len(res.Attempts)-1]; last.Aborted() {
			return ExitAborted
		}
		return ExitRollback
	}
	return ExitInternal
}

// printResult prints a run's result; held are the grants the call had
// (the policy's for the principal, and --allow), named in a refusal's hint.
func printResult(stdio Stdio, asJSON bool, res *tgruntime.Result, execErr error, held []capability.Capability) error {
	if asJSON {
		enc := json.NewEncoder(stdio.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	if len(res.Output) > 0 {
		if err := writeJSON(stdio.Out, res.Output); err != nil {
			return err
		}
	}
	last := res.Attempts[len(res.Attempts)-1]
	fmt.Fprintf(stdio.Err, "%s %s@%s in %v (execution %s", res.State, res.Tool, res.Version,
		last.EndedAt.Sub(res.Attempts[0].StartedAt).Round(time.Microsecond), res.ExecutionID)
	if n := len(res.Attempts); n > 1 {
		fmt.Fprintf(stdio.Err, ", %d attempts", n)
	}
	if res.TraceID != "" {
		fmt.Fprintf(stdio.Err, ", trace %s", res.TraceID)
	}
	fmt.Fprintln(stdio.Err, ")")
	if len(res.Attempts) > 1 {
		for _, a := range res.Attempts {
			fmt.Fprintf(stdio.Err, "  attempt %d %s %s", a.Number, a.ExecutionID, a.State)
			if a.Error != nil {
				fmt.Fprintf(stdio.Err, ": %s", a.Error.Message)
			}
			fmt.Fprintln(stdio.Err)
		}
	}
	if res.Error != nil {
		fmt.Fprintf(stdio.Err, "%s (%s): %s\n", res.Error.Type, res.Error.Code, tgruntime.Message(errors.New(res.Error.Message))) // a record of an earlier version may hold a Go prefix
		var ae *tgruntime.AuthorizationError
		var acc *tools.AccessError
		switch {
		case errors.As(execErr, &ae) && len(ae.Missing) > 0 && ae.Reason == "":
			fmt.Fprintln(stdio.Err, denyHint(ae.Missing, held))
		case errors.As(execErr, &acc) && (ae == nil || ae.Reason == ""): // a path refused at the decision says where it leads
			if h := outsideHint(acc.Capability, held); h != "" {
				fmt.Fprintln(stdio.Err, h)
			} else if c, err := capability.Parse(acc.Capability); err == nil {
				fmt.Fprintln(stdio.Err, denyHint([]capability.Capability{c}, held)) // the flag that grants it (a command), or name:PATH
			}
		}
	}
	return nil
}

// denyHint says what would let a denied call run: the --allow flags that
// grant what was missing, except for a filesystem path outside the grants
// of its capability that the call has (held): that hint names those
// grants, and never suggests granting the place the path went to (a path
// of an agent's input that leaves its grant, by .. or as an absolute path,
// is answered by a path inside the grant, not by a wider one).
func denyHint(missing, held []capability.Capability) string {
	var flags, lines []string
	add := func(f string) {
		if !slices.Contains(flags, f) {
			flags = append(flags, f)
		}
	}
	for _, m := range missing {
		switch {
		case m.IsFilesystem() && m.Scope != "":
			if h := outsideHint(m.String(), held); h != "" {
				lines = append(lines, h)
				continue
			}
			add("--allow " + m.Name + ":PATH")
		case m.IsFilesystem():
			add("--allow " + m.Name + ":PATH")
		default:
			add("--allow " + m.String())
		}
	}
	if len(flags) > 0 {
		lines = append(lines, "to grant it for this call: "+strings.Join(flags, " "))
	}
	return strings.Join(lines, "\n")
}

// outsideHint names the grants that a refused filesystem path (c, as
// "filesystem.read:/etc/shadow") falls outside of; "" when the call held
// no grant of its capability.
func outsideHint(c string, held []capability.Capability) string {
	name, place, _ := strings.Cut(c, ":")
	var in []string
	for _, g := range held {
		if g.Name == name {
			in = append(in, g.String())
		}
	}
	if len(in) == 0 || !strings.HasPrefix(name, "filesystem.") {
		return ""
	}
	return fmt.Sprintf("%s is outside %s, what this call holds of %s: give a path inside it (a grant is not widened for a path that leaves it)",
		place, strings.Join(in, ", "), name)
}

// writeJSON indents raw for reading, keeping its key order and numbers.
func writeJSON(w io.Writer, raw json.RawMessage) error {
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		b.Reset()
		b.Write(raw)
	}
	b.WriteByte('\n')
	_, err := w.Write(b.Bytes())
	return err
}
