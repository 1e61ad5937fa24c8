package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/internal/explain"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
)

const intentHelp = `An intent is an exact invocation (tool, version, input) proposed for a human
to approve. It is identified by a random UUID and by the SHA-256 of its
canonical form, and runs only with both, only once approved, only if
unchanged, and at most once: 'toolgate run --intent ID --hash HASH'.
Nothing modifies or deletes an intent; a decision is final.

` + approvalKeyHelp

func newIntentCmd(g *globals, stdio Stdio) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "intent",
		Short: "Propose, inspect, approve and reject intents (invocations that need a human's approval)",
		Long:  intentHelp,
	}
	cmd.AddCommand(newIntentProposeCmd(g, stdio), newIntentListCmd(g, stdio), newIntentShowCmd(g, stdio),
		newIntentApproveCmd(g, stdio), newIntentRejectCmd(g, stdio), newIntentKeygenCmd(g, stdio))
	return cmd
}

// withRuntime opens the runtime on the database with reg (nil: the CLI's
// tools), runs fn, and closes it.
func (g *globals) withRuntime(reg *tools.Registry, fn func(rt *tgruntime.Runtime) error) error {
	policy, _ := g.policy() // intents are not authorized here; execution decides
	rt, err := g.open(&tgruntime.Options{Policy: policy, Registry: reg})
	if err != nil {
		return err
	}
	ferr := fn(rt.Runtime)
	if cerr := rt.Close(context.Background()); cerr != nil && ferr == nil {
		return internalErr(cerr)
	}
	return ferr
}

// intentErr maps an intent error to its exit code.
func intentErr(err error) error {
	var ie *tgruntime.IntentError
	var ve *tgruntime.ValidationError
	switch {
	case errors.As(err, &ie) && (ie.Code == "intent_malformed" || ie.Code == "intent_not_found"):
		return usageErr("%v", err)
	case errors.As(err, &ie):
		return &exitError{code: ExitDenied, err: err}
	case errors.As(err, &ve):
		return &exitError{code: ExitFailed, err: err}
	case errors.Is(err, tools.ErrToolNotFound), errors.Is(err, tools.ErrVersionNotFound):
		return usageErr("%v; 'toolgate tools' lists the registered tools", err)
	}
	return internalErr(err)
}

func newIntentProposeCmd(g *globals, stdio Stdio) *cobra.Command {
	var input, who string
	cmd := &cobra.Command{
		Use:   "propose TOOL[@VERSION]",
		Short: "Propose an invocation for approval; prints its id and hash",
		Long: `Propose an invocation for approval. The input is validated against the tool's
schema first (exit 3 if it does not match, and nothing is stored); the
version is pinned. Prints the intent's id and hash.

` + intentHelp,
		Example: `  toolgate intent propose file.write --input '{"path":"/srv/out/report.txt","content":"..."}'`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, version, _ := strings.Cut(args[0], "@")
			in, err := readInput(input, stdio.In)
			if err != nil {
				return usageErr("--input: %v", err)
			}
			reg, err := g.registry()
			if err != nil {
				return err
			}
			entry, err := reg.Lookup(id, version) // before the database is opened (and created)
			if err != nil {
				return usageErr("%v; 'toolgate tools' lists the registered tools", err)
			}
			if err := entry.ValidateInput(in); err != nil { // as Propose would, with no database
				return intentErr(&tgruntime.ValidationError{Phase: "input", Err: err})
			}
			if who == "" {
				who = principal()
			}
			return g.withRuntime(reg, func(rt *tgruntime.Runtime) error {
				it, err := rt.Propose(cmd.Context(), tgruntime.Invocation{Tool: id, Version: version, Input: in, Principal: who})
				if err != nil {
					return intentErr(err)
				}
				if g.json {
					return encodeJSON(stdio, it)
				}
				fmt.Fprintf(stdio.Out, "intent %s\nhash   %s\n", it.ID, it.Hash)
				fmt.Fprintf(stdio.Err, "proposed %s@%s, pending approval: toolgate intent approve %s\n", it.Tool, it.Version, it.ID)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&input, "input", "{}", "input JSON; @FILE reads it from FILE, - from stdin")
	cmd.Flags().StringVar(&who, "principal", "", "the proposer (default: cli:$USER)")
	return cmd
}

func newIntentListCmd(g *globals, stdio Stdio) *cobra.Command {
	var status string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List intents, oldest first",
		Long: `List intents, oldest proposal first.

` + inspectLockHelp,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			status = strings.ToLower(status) // as show prints it (PENDING) or as stored (pending)
			switch status {
			case "", tgruntime.IntentPending, tgruntime.IntentApproved, tgruntime.IntentRejected, tgruntime.IntentExecuted:
			default:
				return usageErr("--status: %q is not one of pending, approved, rejected, executed", status)
			}
			all := []*tgruntime.Intent{}
			if lc := g.localClient(cmd.Context(), stdio.Err); lc != nil { // held: ask the holder
				lc.note(stdio.Err)
				if err := lc.get(cmd.Context(), "/v1/intents", url.Values{"status": {status}}, &all); err != nil {
					return localErr(err, false)
				}
				return printIntents(g, stdio, all)
			}
			store, err := g.openReadOnly()
			if err != nil {
				return err
			}
			if store != nil { // else no database yet: no intents
				defer store.Close()
				if all, err = readIntents(cmd.Context(), store, status); err != nil {
					return err
				}
			}
			return printIntents(g, stdio, all)
		},
	}
	cmd.Flags().StringVar(&status, "status", "", "only intents in this status: pending, approved, rejected, executed")
	return cmd
}

func printIntents(g *globals, stdio Stdio, all []*tgruntime.Intent) error {
	if g.json {
		if all == nil {
			all = []*tgruntime.Intent{}
		}
		return encodeJSON(stdio, all)
	}
	tw := tabwriter.NewWriter(stdio.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "INTENT\tSTATUS\tTOOL\tPROPOSED\tBY")
	for _, it := range all {
		fmt.Fprintf(tw, "%s\t%s\t%s@%s\t%s\t%s\n", it.ID, it.Status, it.Tool, it.Version, it.ProposedAt.Local().Format(time.DateTime), it.Proposer)
	}
	return tw.Flush()
}

// intentView is an intent with what it would run.
type intentView struct {
	*tgruntime.Intent
	Process *tools.ProcessPreview `json:"process,omitempty"`
}

func viewOf(reg *tools.Registry, it *tgruntime.Intent) intentView {
	v := intentView{Intent: it}
	if e, err := reg.Lookup(it.Tool, it.Version); err == nil {
		if p, ok := e.Tool().(tools.Previewer); ok {
			v.Process, _ = p.Preview(it.Input)
		}
	}
	return v
}

func printIntent(w io.Writer, v intentView) {
	it := v.Intent
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "Intent:\t%s\n", it.ID)
	fmt.Fprintf(tw, "Hash:\t%s\n", it.Hash)
	fmt.Fprintf(tw, "Status:\t%s\n", strings.ToUpper(it.Status))
	fmt.Fprintf(tw, "Tool:\t%s@%s\n", it.Tool, it.Version)
	if p := v.Process; p != nil {
		path := p.Path
		if path == "" {
			path = p.Command + " (does not resolve now)"
		}
		fmt.Fprintf(tw, "Executable:\t%s\n", path)
		fmt.Fprintf(tw, "Argv:\t%s\n", explain.QuoteArgs(append([]string{p.Command}, p.Args...)))
		if p.Dir != "" {
			fmt.Fprintf(tw, "Directory:\t%s\n", p.Dir)
		}
		if p.Problem != "" {
			fmt.Fprintf(tw, "Problem:\t%s\n", p.Problem)
		}
	}
	tw.Flush()
	fmt.Fprintln(w, "Input:")
	writeJSON(w, it.Input)
	fmt.Fprintln(w, "History:")
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, e := range intentHistory(it) {
		fmt.Fprintf(tw, "  %s\t%s\n", e.at.Local().Format(time.RFC3339Nano), e.what)
	}
	tw.Flush()
}

type historyEntry struct {
	at   time.Time
	what string
}

// intentHistory is everything that happened to an intent, in time order
// (a refusal can come before the decision or the execution): proposal,
// decision, execution, refused execution requests. Equal times keep that
// order.
func intentHistory(it *tgruntime.Intent) []historyEntry {
	h := []historyEntry{{it.ProposedAt, "proposed by " + it.Proposer}}
	if d := it.Decision; d != nil {
		h = append(h, historyEntry{d.At, d.String()}) // the key's fingerprint: intent show --json
	}
	if x := it.Execution; x != nil {
		h = append(h, historyEntry{x.At, fmt.Sprintf("executed by %s: execution %s ('toolgate show %s')", x.Principal, x.ExecutionID, x.ExecutionID)})
	}
	for _, r := range it.Refusals {
		h = append(h, historyEntry{r.At, "refused to " + r.Principal + ": " + r.Code})
	}
	slices.SortStableFunc(h, func(a, b historyEntry) int { return a.at.Compare(b.at) })
	return h
}

// runHint is the command that runs an approved intent, with the --allow
// flags its tool requires, scoped to what this input touches where the
// input says it (a process tool's command and directory, a "path" field);
// PATH where it does not. A principal the policy already grants them to
// can leave them out.
// climbs reports whether a path has a ".." segment.
func climbs(path string) bool {
	return slices.Contains(strings.Split(filepath.ToSlash(path), "/"), "..")
}

func runHint(reg *tools.Registry, it *tgruntime.Intent) string {
	args := []string{"toolgate", "run", "--intent", it.ID, "--hash", it.Hash}
	e, err := reg.Lookup(it.Tool, it.Version)
	if err != nil {
		return explain.QuoteArgs(args)
	}
	var preview *tools.ProcessPreview
	if p, ok := e.Tool().(tools.Previewer); ok {
		preview, _ = p.Preview(it.Input)
	}
	var in struct {
		Path string `json:"path"`
	}
	_ = json.Unmarshal(it.Input, &in)
	d := e.Declaration()
	required, _, err := d.RequiredFor(it.Input, "") // with the scopes the input gives (a cwd)
	if err != nil {
		required = d.RequiredCapabilities
	}
	for _, c := range required {
		if c.IsFilesystem() && c.Scope != "" && slices.Contains(required, capability.Capability{Name: c.Name}) {
			continue // a file tool's path: the unscoped requirement names its directory
		}
		v := c.String()
		if c.Scope == "" {
			switch {
			case c.IsFilesystem() && preview != nil && preview.Dir != "":
				v += ":" + preview.Dir
			case c.IsFilesystem() && preview == nil && in.Path != "" && !climbs(in.Path):
				v += ":" + filepath.Dir(in.Path)
			case c.IsFilesystem() && preview == nil && in.Path != "":
				// A path that climbs out by "..": the hint names no place,
				// least of all where it climbs to; intent show says where
				// it leads and which grant it falls outside of.
				v += ":DIR"
			case c.IsFilesystem():
				v += ":PATH"
			case c.Name == "process.exec" && preview != nil && preview.Command != "":
				v += ":" + preview.Command
			}
		}
		args = append(args, "--allow", v)
	}
	return explain.QuoteArgs(args)
}

func newIntentShowCmd(g *globals, stdio Stdio) *cobra.Command {
	return &cobra.Command{
		Use:   "show ID",
		Short: "Show exactly what an intent would run, and its history",
		Long: `Show exactly what an intent would run (for a process tool, the resolved
executable and each argument), its status and its history. An unknown or
malformed id exits 2. An intent whose proposal, decision or execution does
not match the audit log was changed outside toolgate: show says so and exits 7.

` + inspectLockHelp,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			if err := checkIntentID(id); err != nil {
				return intentErr(err)
			}
			if err := g.intentDatabase(id); err != nil {
				return err
			}
			if lc := g.localClient(cmd.Context(), stdio.Err); lc != nil { // held: ask the holder
				lc.note(stdio.Err)
				var v localIntent
				if err := lc.get(cmd.Context(), "/v1/intents/"+id, nil, &v); err != nil {
					return localErr(err, false)
				}
				return showIntent(g, stdio, id, v.intentView, v.Discrepancies)
			}
			reg, err := g.registry()
			if err != nil {
				return err
			}
			store, err := g.openReadOnly()
			if err != nil {
				return err
			}
			if store == nil { // an empty file: a writer has just created it
				return intentErr(&tgruntime.IntentError{Code: "intent_not_found", IntentID: id, Reason: "no such intent"})
			}
			defer store.Close()
			it, err := readIntent(cmd.Context(), store, id)
			if err != nil {
				return intentErr(err)
			}
			ds, err := tgruntime.NewReader(store).VerifyIntent(cmd.Context(), it)
			if err != nil {
				return internalErr(fmt.Errorf("reading the audit log: %w", err))
			}
			return showIntent(g, stdio, id, viewOf(reg, it), ds)
		},
	}
}

// showIntent prints v, saying first what the audit log does not prove
// (ds), and then fails.
func showIntent(g *globals, stdio Stdio, id string, v intentView, ds []tgruntime.Discrepancy) error {
	var err error
	if g.json {
		err = encodeJSON(stdio, v)
	} else {
		if len(ds) > 0 {
			writeDiscrepancies(stdio.Out, "this intent", ds)
		}
		printIntent(stdio.Out, v)
	}
	if err != nil || len(ds) == 0 {
		return err
	}
	return unproven("intent "+id, ds)
}

func newIntentApproveCmd(g *globals, stdio Stdio) *cobra.Command {
	var (
		yes bool
		by  string
	)
	cmd := &cobra.Command{
		Use:   "approve ID",
		Short: "Approve an intent after seeing exactly what it will run",
		Long: `Show exactly what the intent will run and ask for confirmation (y/n) on a
terminal. --yes approves without asking, for scripts; without a terminal and
without --yes, nothing is approved. A decision is final.

` + localSocketHelp,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if by == "" {
				by = principal()
			}
			if err := checkIntentID(args[0]); err != nil {
				return intentErr(err)
			}
			if err := g.intentDatabase(args[0]); err != nil {
				return err
			}
			if lc := g.localClient(cmd.Context(), stdio.Err); lc != nil { // held: the holder records it
				lc.note(stdio.Err)
				if g.approvalKey != "" || os.Getenv("TOOLGATE_APPROVAL_KEY") != "" {
					fmt.Fprintf(stdio.Err, "toolgate: the approval is signed with the approval key of pid %d, not with this command's\n", lc.pid)
				}
				var v localIntent
				if err := lc.get(cmd.Context(), "/v1/intents/"+args[0], nil, &v); err != nil {
					return localErr(err, false)
				}
				if err := confirmApproval(stdio, v.intentView, by, yes); err != nil {
					return err
				}
				if err := lc.do(cmd.Context(), http.MethodPost, "/v1/intents/"+args[0]+"/approve", by, decideRequest{Hash: v.Hash}, &v); err != nil {
					return localErr(err, true)
				}
				if g.json {
					return encodeJSON(stdio, v.intentView)
				}
				fmt.Fprintf(stdio.Out, "approved %s\n%s\n", v.ID, lc.runAdvice(v.ID, v.Hash, v.RunHint))
				return nil
			}
			g.decides = true // the decision is signed with the approval key, if any
			return g.withRuntime(nil, func(rt *tgruntime.Runtime) error {
				it, err := rt.Intent(cmd.Context(), args[0])
				if err != nil {
					return intentErr(err)
				}
				if err := confirmApproval(stdio, viewOf(rt.Registry(), it), by, yes); err != nil {
					return err
				}
				it, err = rt.Approve(cmd.Context(), it.ID, by)
				if err != nil {
					return intentErr(err)
				}
				if g.json {
					return encodeJSON(stdio, viewOf(rt.Registry(), it))
				}
				fmt.Fprintf(stdio.Out, "approved %s\nrun it with: %s\n", it.ID, runHint(rt.Registry(), it))
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&yes, "yes", false, "approve without asking (for scripts)")
	cmd.Flags().StringVar(&by, "approver", "", "who approves (default: cli:$USER)")
	return cmd
}

// confirmApproval shows v on stderr, exactly what it would run, and asks
// whether by approves it, unless yes; it fails unless the answer is a yes
// and the intent is pending.
func confirmApproval(stdio Stdio, v intentView, by string, yes bool) error {
	printIntent(stdio.Err, v)
	if v.Status != tgruntime.IntentPending {
		return &exitError{code: ExitDenied, err: fmt.Errorf("intent %s is %s: a decision is final", v.ID, v.Status)}
	}
	if yes {
		return nil
	}
	if !stdio.terminal() {
		return usageErr("not approving without a terminal to ask on: run it in a terminal, or pass --yes")
	}
	fmt.Fprintf(stdio.Err, "Approve this intent as %s? [y/N] ", by)
	line, _ := readLine(stdio.In, maxAnswer) // too long, or no answer: not a yes
	if a := strings.ToLower(strings.TrimSpace(line)); a != "y" && a != "yes" {
		return &exitError{code: ExitDenied, err: errors.New("not approved")}
	}
	return nil
}

func newIntentRejectCmd(g *globals, stdio Stdio) *cobra.Command {
	var reason, by string
	cmd := &cobra.Command{
		Use:   "reject ID --reason TEXT",
		Short: "Reject an intent, with a reason",
		Long: `Reject an intent, with a reason. A decision is final.

` + localSocketHelp,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if strings.TrimSpace(reason) == "" {
				return usageErr("--reason is required")
			}
			if by == "" {
				by = principal()
			}
			if err := checkIntentID(args[0]); err != nil {
				return intentErr(err)
			}
			if err := g.intentDatabase(args[0]); err != nil {
				return err
			}
			if lc := g.localClient(cmd.Context(), stdio.Err); lc != nil { // held: the holder records it
				lc.note(stdio.Err)
				var v localIntent
				if err := lc.do(cmd.Context(), http.MethodPost, "/v1/intents/"+args[0]+"/reject", by, decideRequest{Reason: reason}, &v); err != nil {
					return localErr(err, true)
				}
				if g.json {
					return encodeJSON(stdio, v.intentView)
				}
				fmt.Fprintf(stdio.Out, "rejected %s\n", v.ID)
				return nil
			}
			g.decides = true // the decision is signed with the approval key, if any
			return g.withRuntime(nil, func(rt *tgruntime.Runtime) error {
				it, err := rt.Reject(cmd.Context(), args[0], by, reason)
				if err != nil {
					return intentErr(err)
				}
				if g.json {
					return encodeJSON(stdio, viewOf(rt.Registry(), it))
				}
				fmt.Fprintf(stdio.Out, "rejected %s\n", it.ID)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why (required)")
	cmd.Flags().StringVar(&by, "approver", "", "who rejects (default: cli:$USER)")
	return cmd
}
