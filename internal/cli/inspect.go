package cli

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/spf13/cobra"

	"github.com/toolgate/toolgate/lifecycle"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/txn"
)

// defaultLimit is how many records 'toolgate executions' lists by default.
const defaultLimit = 50

// timeMillis is RFC 3339 with milliseconds.
const timeMillis = "2006-01-02T15:04:05.000Z07:00"

const inspectLockHelp = `The database is opened read-only and never created. A read-only open takes a
shared lock, which cannot coexist with the exclusive lock of a writer (a
running 'toolgate serve' or 'toolgate run'): it then fails after a second
(--wait D: after D) with a "locked" error (exit 1) that names the holder, its
pid and a server's address. 'toolgate show' reads through a local server's
HTTP API instead, with --token or $TOOLGATE_TOKEN.

` + localSocketHelp

func newExecutionsCmd(g *globals, stdio Stdio) *cobra.Command {
	var (
		state, tool, call string
		limit             int
	)
	cmd := &cobra.Command{
		Use:   "executions",
		Short: "List stored execution attempts, oldest first",
		Long: `List the stored record of every execution attempt, oldest first: the newest
--limit records (default 50, 0 for all) that match the filters. With --json,
print the records as stored.

` + inspectLockHelp,
		Example: `  toolgate executions --state ROLLED_BACK
  toolgate executions --tool file.read --limit 0 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			f := txn.Filter{CallID: call}
			if state != "" {
				s := lifecycle.State(strings.ToUpper(state))
				if !s.Valid() {
					names := make([]string, 0, len(lifecycle.States()))
					for _, v := range lifecycle.States() {
						names = append(names, string(v))
					}
					return usageErr("--state: unknown state %q; valid states: %s", state, strings.Join(names, ", "))
				}
				f.State = string(s)
			}
			toolID, version, _ := strings.Cut(tool, "@")
			f.ToolID = toolID
			if limit < 0 {
				return usageErr("--limit: %d is negative (0 lists every record)", limit)
			}
			var all []*txn.Record
			if lc := g.localClient(cmd.Context(), stdio.Err); lc != nil { // held: ask the holder
				lc.note(stdio.Err)
				q := url.Values{"state": {f.State}, "tool": {f.ToolID}, "call": {f.CallID}}
				if err := lc.get(cmd.Context(), "/v1/executions", q, &all); err != nil {
					return localErr(err, false)
				}
			} else {
				store, err := g.openReadOnly()
				if err != nil {
					return err
				}
				if store != nil {
					defer store.Close()
					// txn.Filter.Limit keeps the oldest records; the newest are wanted.
					if all, err = store.List(cmd.Context(), f); err != nil {
						return internalErr(err)
					}
				}
			}
			recs := []*txn.Record{}
			for _, r := range all {
				if version == "" || r.ToolVersion == version {
					recs = append(recs, r)
				}
			}
			if limit > 0 && len(recs) > limit {
				recs = recs[len(recs)-limit:]
			}
			if g.json {
				return encodeJSON(stdio, recs)
			}
			if len(recs) == 0 {
				fmt.Fprintln(stdio.Err, "no executions")
				return nil
			}
			return writeExecutions(stdio.Out, recs)
		},
	}
	cmd.Flags().StringVar(&state, "state", "", "only records in this lifecycle state, e.g. ROLLED_BACK")
	cmd.Flags().StringVar(&tool, "tool", "", "only records of this tool (TOOL or TOOL@VERSION)")
	cmd.Flags().StringVar(&call, "call", "", "only the attempts of this call id")
	cmd.Flags().IntVar(&limit, "limit", defaultLimit, "keep the newest N records; 0 keeps all")
	return cmd
}

func writeExecutions(w io.Writer, recs []*txn.Record) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "EXECUTION\tCALL\tTOOL\tATTEMPT\tSTATE\tSTARTED\tDURATION\tERROR")
	for _, r := range recs {
		errCode := "-"
		if r.Error != nil {
			errCode = r.Error.Code
			if errCode == "" {
				errCode = r.Error.Type
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s@%s\t%d\t%s\t%s\t%s\t%s\n",
			clean(r.ExecutionID), clean(r.CallID), clean(r.ToolID), clean(r.ToolVersion), r.Attempt,
			clean(r.State), formatTime(r.StartedAt, time.RFC3339), duration(r), clean(errCode))
	}
	return tw.Flush()
}

func newShowCmd(g *globals, stdio Stdio) *cobra.Command {
	var stack bool
	cmd := &cobra.Command{
		Use:   "show EXECUTION_ID",
		Short: "Show one stored execution attempt with its transitions",
		Long: `Show the stored record of one execution attempt: its tool, trace id,
principal, state, timing, granted capabilities, hashes, output, error,
write-set, audit event ids, and every lifecycle transition with its reason. With --json, print the record as
stored. An unknown execution id exits 2.

The record is checked against the audit events of its attempt (state path,
principal, capabilities, input and output hashes, error). A record that does
not match them was changed outside toolgate: show says so before the record,
names each field that disagrees, and exits 7.

` + inspectLockHelp,
		Example: `  toolgate show 503e2686-8db3-4949-a623-c754fb676010
  toolgate show 503e2686-8db3-4949-a623-c754fb676010 --json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			if lc := g.localClient(cmd.Context(), stdio.Err); lc != nil { // held: ask the holder
				return g.showThroughSocket(cmd.Context(), lc, stdio, id, func(rec *txn.Record) error {
					if g.json {
						return encodeJSON(stdio, rec)
					}
					return writeRecord(stdio.Out, rec, stack)
				})
			}
			store, err := g.openReadOnly()
			if held := heldBy(err); held != nil { // a local server holds it: ask it
				return g.showThroughServer(cmd.Context(), held, stdio, id, func(rec *txn.Record) error {
					if g.json {
						return encodeJSON(stdio, rec)
					}
					return writeRecord(stdio.Out, rec, stack)
				})
			}
			if err != nil {
				return err
			}
			if store == nil {
				return usageErr("no execution %s", clean(id))
			}
			defer store.Close()
			rec, ds, err := tgruntime.NewReader(store).ReadExecution(cmd.Context(), id)
			if errors.Is(err, txn.ErrNotFound) {
				return usageErr("no execution %s", clean(id))
			}
			if errors.Is(err, txn.ErrCorrupt) {
				return &exitError{code: ExitVerify, err: fmt.Errorf("execution %s cannot be shown: %v", clean(id), err)}
			}
			if err != nil {
				return internalErr(err)
			}
			if len(ds) > 0 && !g.json {
				writeDiscrepancies(stdio.Out, "this record", ds)
			}
			if g.json {
				err = encodeJSON(stdio, rec)
			} else {
				err = writeRecord(stdio.Out, rec, stack)
			}
			if err != nil || len(ds) == 0 {
				return err
			}
			return unproven("execution "+clean(id), ds)
		},
	}
	cmd.Flags().BoolVar(&stack, "stack", false, "also print the error's stack trace, if one was recorded")
	return cmd
}

func writeRecord(w io.Writer, r *txn.Record, stack bool) error {
	field := func(name, value string) { fmt.Fprintf(w, "%-13s %s\n", name+":", value) }
	field("Execution", clean(r.ExecutionID))
	field("Call", clean(r.CallID))
	field("Trace", orDash(clean(r.TraceID)))
	field("Tool", clean(r.ToolID)+"@"+clean(r.ToolVersion))
	field("Attempt", strconv.Itoa(r.Attempt))
	field("Principal", orDash(clean(r.Principal)))
	field("State", clean(r.State))
	field("Started", formatTime(r.StartedAt, timeMillis))
	field("Ended", formatTime(r.EndedAt, timeMillis))
	field("Duration", duration(r))
	caps := make([]string, len(r.Capabilities))
	for i, c := range r.Capabilities {
		caps[i] = clean(c)
	}
	if len(caps) == 0 {
		caps = []string{"(none)"}
	}
	field("Capabilities", strings.Join(caps, ", "))
	field("Input hash", orDash(clean(r.InputHash)))
	field("Output hash", orDash(clean(r.OutputHash)))
	if len(r.Output) > 0 {
		fmt.Fprintln(w, "Output:")
		if err := writeJSON(w, r.Output); err != nil {
			return err
		}
	}
	if e := r.Error; e != nil {
		code := ""
		if e.Code != "" {
			code = " (" + clean(e.Code) + ")"
		}
		field("Error", clean(e.Type)+code+": "+clean(e.Message))
		switch {
		case e.Stack != "" && stack:
			fmt.Fprintln(w, "Stack:")
			fmt.Fprintln(w, cleanLines(strings.TrimRight(e.Stack, "\n")))
		case e.Stack != "":
			fmt.Fprintln(w, "              (a stack trace was recorded; --stack prints it)")
		}
	}
	field("Write-set", writeSet(r))
	if len(r.AuditEvents) > 0 {
		field("Audit events", strings.Join(r.AuditEvents, ", "))
	}
	fmt.Fprintln(w, "\nTransitions:")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FROM -> TO\tEVENT\tAT\t+DELTA\tREASON")
	for _, t := range r.Transitions {
		fmt.Fprintf(tw, "%s -> %s\t%s\t%s\t+%v\t%s\n", clean(t.From), clean(t.To), clean(t.Event),
			formatTime(t.At, timeMillis), roundDuration(t.At.Sub(r.Transitions[0].At)), orDash(clean(t.Reason)))
	}
	return tw.Flush()
}

// openReadOnly opens the database for inspection, without creating it. A
// database that does not exist yet (no file, or no toolgate schema in the
// Postgres database), or is still empty (a writer has just created it),
// yields a nil store and no error: there is nothing to inspect.
func (g *globals) openReadOnly() (*txn.Store, error) {
	path, err := g.dbPath()
	if err != nil {
		return nil, usageErr("%v", err)
	}
	pg := txn.IsPostgresURL(path)
	if !pg {
		fi, err := os.Stat(path)
		if errors.Is(err, fs.ErrNotExist) || (err == nil && fi.Mode().IsRegular() && fi.Size() == 0) {
			return nil, nil
		}
	}
	store, err := g.openShared(path) // holder.go: --wait, and who holds it
	switch {
	case err == nil:
		return store, nil
	case errors.Is(err, fs.ErrNotExist): // removed since the Stat; on Postgres, no schema yet
		return nil, nil
	case errors.Is(err, txn.ErrNoSchema): // a new Postgres database: empty, as a missing file
		return nil, nil
	case heldBy(err) != nil:
		return nil, err
	}
	return nil, internalErr(err)
}

func writeSet(r *txn.Record) string {
	ws := r.WriteSet
	if ws == nil {
		if r.State == string(lifecycle.Executing) {
			return "pending (the attempt has not ended)"
		}
		return "none (the tool did not run)"
	}
	ns := "no namespaces"
	if len(ws.Namespaces) > 0 {
		names := slices.Clone(ws.Namespaces)
		for i := range names {
			names[i] = clean(names[i])
		}
		ns = "namespaces " + strings.Join(names, ", ")
	}
	verdict := "discarded"
	if ws.Committed {
		verdict = "committed"
	}
	return fmt.Sprintf("%s, %s, %s; %s", plural(ws.Puts, "put"), plural(ws.Deletes, "delete"), ns, verdict)
}

// duration is how long the attempt took, or "-" while it has not ended.
func duration(r *txn.Record) string {
	if r.EndedAt.IsZero() || r.State == string(lifecycle.Executing) {
		return "-"
	}
	return roundDuration(r.EndedAt.Sub(r.StartedAt)).String()
}

func roundDuration(d time.Duration) time.Duration {
	switch {
	case d >= time.Minute:
		return d.Round(time.Second)
	case d >= time.Second:
		return d.Round(time.Millisecond)
	}
	return d.Round(time.Microsecond)
}

func formatTime(t time.Time, layout string) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format(layout)
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// clean makes a stored string safe for one cell or line of a terminal:
// control characters (newlines, tabs, escapes) become spaces.
func clean(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
}

// cleanLines is clean, keeping newlines and tabs.
func cleanLines(s string) string {
	return strings.Map(func(r rune) rune {
		if r != '\n' && r != '\t' && unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
}

// writeDiscrepancies prints, before a record, that the audit log does not
// prove it, and why.
func writeDiscrepancies(w io.Writer, what string, ds []tgruntime.Discrepancy) {
	fmt.Fprintf(w, "NOT PROVEN: %s does not match the audit log; it was changed outside toolgate:\n", what)
	for _, d := range ds {
		fmt.Fprintf(w, "  %s: %s\n", clean(d.Field), clean(d.Detail))
	}
	fmt.Fprintln(w)
}

// unproven is the exit of a record shown that the audit log does not prove.
func unproven(what string, ds []tgruntime.Discrepancy) error {
	fields := make([]string, 0, len(ds))
	for _, d := range ds {
		fields = append(fields, clean(d.Field))
	}
	return &exitError{code: ExitVerify, err: fmt.Errorf("%s does not match the audit log (%s): run 'toolgate audit verify'", what, strings.Join(fields, ", "))}
}
