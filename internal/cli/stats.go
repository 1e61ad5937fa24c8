package cli

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/toolgate/toolgate/lifecycle"
	"github.com/toolgate/toolgate/txn"
)

func newStatsCmd(g *globals, stdio Stdio) *cobra.Command {
	var (
		since time.Duration
		tool  string
	)
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Execution statistics per tool, from the stored records",
		Long: `Summarize the stored execution records per tool, and in total, for users
without a metrics backend. Every stored attempt counts; --since keeps the
attempts started within the given duration (30m, 24h, 1d, 2w, 1d12h: units ms,
s, m, h, d for a day and w for a week),
--tool those of one tool (TOOL or TOOL@VERSION).

  CALLS        invocations: distinct call ids (all attempts of a call share it)
  ATTEMPTS     stored attempts; RETRIES are the attempts numbered 2 or more
  COMPLETED, FAILED, DENIED, ROLLED_BACK
               attempts by final state; ABORTED is the part of ROLLED_BACK
               that went through ABORTED (a timeout, a limit, or a cancel)
  EXECUTING    attempts that have not ended (running, or left by a crash
               until the next 'toolgate run' recovers them)
  SUCCESS      COMPLETED / finished attempts (every state but EXECUTING);
               FAILURE is FAILED + DENIED + ROLLED_BACK / finished attempts
  CALL_SUCCESS calls whose last attempt COMPLETED / calls whose last attempt
               finished: a call that succeeded on a retry counts as a success
  P50 P95 P99  latency (end - start) of the finished attempts, nearest rank

Then, for tools declared deterministic, any input (by its canonical hash)
whose COMPLETED attempts returned different outputs (RFC-0001 4.2.5): the
tool broke its declaration.

With --json, print {"since": CUTOFF or null, "tools": {TOOL: STATS}, "total":
STATS}: counts, rates as fractions from 0 to 1 (0 when there is nothing to
divide), and p50_ms, p95_ms, p99_ms in milliseconds (0 without samples;
latency_samples says how many).

` + inspectLockHelp,
		Example: `  toolgate stats
  toolgate stats --since 1d --tool file.read
  toolgate stats --since 1h --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if since < 0 {
				return usageErr("--since: %v is negative (use e.g. 1h for the last hour)", since)
			}
			toolID, version, _ := strings.Cut(tool, "@")
			var cutoff time.Time
			if since > 0 {
				cutoff = time.Now().Add(-since)
			}
			st := newStatsSet()
			reg, err := g.registry()
			if err != nil {
				return err
			}
			deterministic := map[string]bool{}
			for _, e := range reg.Entries() {
				if d := e.Declaration(); d.Deterministic {
					deterministic[d.Key()] = true
				}
			}
			dc := newDeterminismCheck(deterministic)
			store, err := g.openReadOnly()
			if err != nil {
				return err
			}
			if store != nil {
				defer store.Close()
				recs, err := store.List(cmd.Context(), txn.Filter{ToolID: toolID})
				if err != nil {
					return internalErr(err)
				}
				for _, r := range recs {
					if version != "" && r.ToolVersion != version {
						continue
					}
					if !cutoff.IsZero() && r.StartedAt.Before(cutoff) {
						continue
					}
					st.add(r)
					dc.add(r)
				}
			}
			rep := st.report(cutoff)
			rep.Nondeterministic = dc.result()
			if g.json {
				return encodeJSON(stdio, rep)
			}
			if err := writeStats(stdio.Out, rep, cutoff, since); err != nil {
				return err
			}
			writeDivergences(stdio.Out, rep.Nondeterministic)
			return nil
		},
	}
	cmd.Flags().Var(newDurationValue(&since, 0), "since", "only attempts started within this duration, e.g. 30m, 24h, 1d or 2w (units ms, s, m, h, d, w; default: all)")
	cmd.Flags().StringVar(&tool, "tool", "", "only attempts of this tool (TOOL or TOOL@VERSION)")
	return cmd
}

// statsReport is the output of 'toolgate stats --json'.
type statsReport struct {
	Since *string               `json:"since"` // the cutoff, RFC 3339; null without --since
	Tools map[string]*toolStats `json:"tools"`
	Total *toolStats            `json:"total"`
	// Nondeterministic lists the inputs of tools declared deterministic
	// that gave different outputs (RFC-0001 4.2.5).
	Nondeterministic []divergence `json:"nondeterministic"`
}

// toolStats are the statistics of a set of attempts.
type toolStats struct {
	Invocations int `json:"invocations"` // distinct call ids
	Attempts    int `json:"attempts"`
	Retries     int `json:"retries"` // attempts numbered 2 or more
	Completed   int `json:"completed"`
	Failed      int `json:"failed"`
	Denied      int `json:"denied"`
	RolledBack  int `json:"rolled_back"`
	Aborted     int `json:"aborted"`   // of RolledBack, through ABORTED
	Executing   int `json:"executing"` // not ended
	Finished    int `json:"finished"`  // attempts - executing

	SuccessRate           float64 `json:"success_rate"`            // completed / finished
	FailureRate           float64 `json:"failure_rate"`            // (failed + denied + rolled_back) / finished
	InvocationSuccessRate float64 `json:"invocation_success_rate"` // calls whose last attempt completed / calls whose last attempt finished

	LatencySamples int     `json:"latency_samples"`
	P50Ms          float64 `json:"p50_ms"`
	P95Ms          float64 `json:"p95_ms"`
	P99Ms          float64 `json:"p99_ms"`

	callsFinished int              // calls whose last attempt finished
	p             [3]time.Duration // p50, p95, p99 for the text output
}

// statsAcc accumulates the attempts of one tool, or of all.
type statsAcc struct {
	s       toolStats
	calls   map[string]lastAttempt // by call
	latency []time.Duration
}

type lastAttempt struct {
	attempt int
	state   string
}

func newStatsAcc() *statsAcc { return &statsAcc{calls: map[string]lastAttempt{}} }

// add counts one attempt of the call call.
func (a *statsAcc) add(r *txn.Record, call string) {
	s := &a.s
	s.Attempts++
	if r.Attempt > 1 {
		s.Retries++
	}
	finished := true
	switch lifecycle.State(r.State) {
	case lifecycle.Completed:
		s.Completed++
	case lifecycle.Failed:
		s.Failed++
	case lifecycle.Denied:
		s.Denied++
	case lifecycle.RolledBack:
		s.RolledBack++
		if slices.ContainsFunc(r.Transitions, func(t txn.Transition) bool { return t.To == string(lifecycle.Aborted) }) {
			s.Aborted++
		}
	default: // EXECUTING; a stored record is in no other state
		s.Executing++
		finished = false
	}
	if finished {
		s.Finished++
		if !r.EndedAt.IsZero() && !r.StartedAt.IsZero() {
			a.latency = append(a.latency, max(r.EndedAt.Sub(r.StartedAt), 0))
		}
	}
	// Records come in creation order: on a tie the later attempt wins.
	if last, ok := a.calls[call]; !ok || r.Attempt >= last.attempt {
		a.calls[call] = lastAttempt{r.Attempt, r.State}
	}
}

// result computes the invocation counts, the rates and the percentiles.
func (a *statsAcc) result() *toolStats {
	s := a.s
	s.Invocations = len(a.calls)
	callsCompleted := 0
	for _, last := range a.calls {
		if last.state == string(lifecycle.Completed) {
			callsCompleted++
		}
		if lifecycle.State(last.state).Terminal() {
			s.callsFinished++
		}
	}
	s.SuccessRate = ratio(s.Completed, s.Finished)
	s.FailureRate = ratio(s.Failed+s.Denied+s.RolledBack, s.Finished)
	s.InvocationSuccessRate = ratio(callsCompleted, s.callsFinished)
	slices.Sort(a.latency)
	s.LatencySamples = len(a.latency)
	for i, p := range []int{50, 95, 99} {
		s.p[i] = percentile(a.latency, p)
	}
	s.P50Ms, s.P95Ms, s.P99Ms = millis(s.p[0]), millis(s.p[1]), millis(s.p[2])
	return &s
}

func ratio(n, d int) float64 {
	if d == 0 {
		return 0
	}
	return float64(n) / float64(d)
}

// percentile is the nearest-rank p-th percentile of sorted: the smallest
// value with at least p% of the values at or below it. Zero if empty.
func percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := (p*len(sorted) + 99) / 100 // ceil(p/100 * n)
	return sorted[max(rank, 1)-1]
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// statsSet accumulates per tool and in total.
type statsSet struct {
	tools map[string]*statsAcc
	total *statsAcc
}

func newStatsSet() *statsSet {
	return &statsSet{tools: map[string]*statsAcc{}, total: newStatsAcc()}
}

func (st *statsSet) add(r *txn.Record) {
	call := r.CallID
	if call == "" { // not written by the runtime: the attempt is its own call
		call = "\x00" + r.ExecutionID
	}
	acc := st.tools[r.ToolID]
	if acc == nil {
		acc = newStatsAcc()
		st.tools[r.ToolID] = acc
	}
	acc.add(r, call)
	st.total.add(r, r.ToolID+"\x00"+call) // a call belongs to one tool
}

func (st *statsSet) report(cutoff time.Time) *statsReport {
	rep := &statsReport{Tools: make(map[string]*toolStats, len(st.tools)), Total: st.total.result()}
	if !cutoff.IsZero() {
		s := cutoff.UTC().Format(timeMillis)
		rep.Since = &s
	}
	for id, acc := range st.tools {
		rep.Tools[id] = acc.result()
	}
	return rep
}

func writeStats(w io.Writer, rep *statsReport, cutoff time.Time, since time.Duration) error {
	if !cutoff.IsZero() {
		fmt.Fprintf(w, "Attempts started since %s (the last %v)\n\n", formatTime(cutoff, timeMillis), since)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOOL\tCALLS\tATTEMPTS\tRETRIES\tCOMPLETED\tFAILED\tDENIED\tROLLED_BACK\tABORTED\tEXECUTING\tSUCCESS\tFAILURE\tCALL_SUCCESS\tP50\tP95\tP99")
	row := func(name string, s *toolStats) {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", name,
			s.Invocations, s.Attempts, s.Retries, s.Completed, s.Failed, s.Denied, s.RolledBack, s.Aborted, s.Executing,
			percent(s.SuccessRate, s.Finished), percent(s.FailureRate, s.Finished), percent(s.InvocationSuccessRate, s.callsFinished),
			latency(s, 0), latency(s, 1), latency(s, 2))
	}
	ids := make([]string, 0, len(rep.Tools))
	for id := range rep.Tools {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		row(clean(id), rep.Tools[id])
	}
	row("TOTAL", rep.Total)
	return tw.Flush()
}

// percent formats a rate, or "-" when it had nothing to divide.
func percent(rate float64, denominator int) string {
	if denominator == 0 {
		return "-"
	}
	return strconv.FormatFloat(rate*100, 'f', 1, 64) + "%"
}

func latency(s *toolStats, i int) string {
	if s.LatencySamples == 0 {
		return "-"
	}
	return roundDuration(s.p[i]).String()
}
