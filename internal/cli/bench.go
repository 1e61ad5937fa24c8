package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/toolgate/toolgate/internal/bench"
	"github.com/toolgate/toolgate/txn"
)

func newBenchCmd(g *globals, stdio Stdio) *cobra.Command {
	var (
		callers  int
		duration time.Duration
		sync     bool
		profile  string
		gateway  bool
		calls    int
		warmup   int
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure the runtime's overhead over bare bbolt on this disk, or bare Postgres",
		Long: `Measure what an invocation costs on this machine, against fresh temporary
databases (in $TMPDIR, removed afterwards), or, with --db postgres://..., on
that Postgres server (each phase in a scratch schema, dropped afterwards:
the user needs CREATE on the database; toolgate's own tables are not
touched; the floor is then bare pgx transactions writing the same rows,
and there is no fsync phase):

  fsync    the disk's fsync latency (4 KiB overwritten and fsynced)
  floor    bare bbolt doing the writes of one invocation: the EXECUTING
           claim and the commit, one bbolt update each, no batching
  runtime  a no-op tool with a small schema run through the whole
           lifecycle (validation, authorization, claim, tool, commit)

Floor and runtime each run with 1 caller and with --callers concurrent
callers, for --duration each. VS FLOOR w1 is a phase's throughput over the
floor's with one caller. --sync=false skips fsync on commit, as the
runtime's NoSync option does: faster, and not durable.

--cpuprofile DIR writes a CPU profile of each measured phase to DIR
(floor-w1.pprof, floor-wN.pprof, runtime-w1.pprof, runtime-wN.pprof), to
see where the time goes with 'go tool pprof'.

--gateway measures instead what an agent feels of toolgate as an MCP
gateway: an MCP client (the Go SDK's, in this process) calls the echo tool
of an upstream MCP server (a stdio server built from the Go SDK, run from
this binary) directly, and through 'toolgate mcp' (this binary, a fresh
durable database, a registry file putting that server behind it). After
--warmup calls of each, direct and gateway calls alternate, --calls of
each, and it prints the p50 of each and their ratio. --cpuprofile DIR then
writes DIR/gateway.pprof, the profile of the 'toolgate mcp' process.`,
		Example: `  toolgate bench
  toolgate bench --callers 16 --duration 1s --json
  toolgate bench --sync=false --cpuprofile /tmp/prof && go tool pprof -top /tmp/prof/runtime-w1.pprof
  toolgate bench --gateway
  toolgate bench --gateway --calls 2000 --cpuprofile /tmp/prof && go tool pprof -top /tmp/prof/gateway.pprof`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if gateway {
				return runGatewayBench(cmd, g, stdio, calls, warmup, profile)
			}
			for _, f := range []string{"calls", "warmup"} {
				if cmd.Flags().Changed(f) {
					return usageErr("--%s goes with --gateway", f)
				}
			}
			opts := bench.Options{Callers: callers, Duration: duration, Sync: sync, ProfileDir: profile}
			if g.db != "" {
				if !txn.IsPostgresURL(g.db) {
					return usageErr("--db: bench measures bbolt in temporary files of its own; --db takes only a postgres:// URL")
				}
				opts.DB = g.db
			}
			if callers < 1 {
				return usageErr("--callers must be at least 1")
			}
			if duration <= 0 {
				return usageErr("--duration must be positive")
			}
			if profile != "" {
				if err := os.MkdirAll(profile, 0o755); err != nil {
					return usageErr("--cpuprofile: %v", err)
				}
			}
			p := newProgress(stdio.Err)
			opts.Progress = p.show
			rep, err := bench.Run(cmd.Context(), opts)
			p.clear()
			if errors.Is(err, bench.ErrInterrupted) {
				return internalErr(errors.New("bench interrupted; no results"))
			}
			if err != nil {
				return internalErr(err)
			}
			if g.json {
				return encodeJSON(stdio, rep)
			}
			return printBench(stdio.Out, rep, duration)
		},
	}
	cmd.Flags().IntVar(&callers, "callers", 64, "concurrent callers of the many-caller phases")
	cmd.Flags().Var(newDurationValue(&duration, 3*time.Second), "duration", "how long each of the four measured phases runs")
	cmd.Flags().BoolVar(&sync, "sync", true, "fsync every commit (--sync=false: NoSync, not durable)")
	cmd.Flags().StringVar(&profile, "cpuprofile", "", "write a CPU profile of each measured phase to this `directory`")
	cmd.Flags().BoolVar(&gateway, "gateway", false, "measure an MCP call through 'toolgate mcp' against the same call made directly")
	cmd.Flags().IntVar(&calls, "calls", 500, "with --gateway: measured calls of each kind")
	cmd.Flags().IntVar(&warmup, "warmup", 20, "with --gateway: calls of each kind made first, not measured")
	return cmd
}

// toolgateBinary is the toolgate binary bench --gateway runs as the
// gateway and as the upstream server (a test sets it to a built one).
var toolgateBinary = os.Executable

func runGatewayBench(cmd *cobra.Command, g *globals, stdio Stdio, calls, warmup int, profile string) error {
	for _, f := range []string{"callers", "duration", "sync"} {
		if cmd.Flags().Changed(f) {
			return usageErr("--%s does not go with --gateway: it measures one agent's calls on a durable database", f)
		}
	}
	if g.db != "" {
		return usageErr("--db does not go with --gateway: it measures a fresh database of its own")
	}
	if calls < 1 {
		return usageErr("--calls must be at least 1")
	}
	if warmup < 0 {
		return usageErr("--warmup must not be negative")
	}
	bin, err := toolgateBinary()
	if err != nil {
		return internalErr(fmt.Errorf("cannot find the toolgate binary: %v", err))
	}
	opts := bench.GatewayOptions{Toolgate: bin, Calls: calls, Warmup: warmup}
	if profile != "" {
		if err := os.MkdirAll(profile, 0o755); err != nil {
			return usageErr("--cpuprofile: %v", err)
		}
		abs, err := filepath.Abs(filepath.Join(profile, "gateway.pprof"))
		if err != nil {
			return usageErr("--cpuprofile: %v", err)
		}
		opts.ProfileFile = abs
	}
	p := newProgress(stdio.Err)
	opts.Progress = p.show
	rep, err := bench.RunGateway(cmd.Context(), opts)
	p.clear()
	if errors.Is(err, bench.ErrInterrupted) {
		return internalErr(errors.New("bench interrupted; no results"))
	}
	if err != nil {
		return internalErr(err)
	}
	if g.json {
		return encodeJSON(stdio, rep)
	}
	return printGatewayBench(stdio.Out, rep)
}

func printGatewayBench(w io.Writer, r *bench.GatewayReport) error {
	fmt.Fprintf(w, "MCP echo call, %d calls of each after %d warm-up, alternated; durable database, fsync p50 %s\n",
		r.Calls, r.Warmup, fmtMicros(r.FsyncP50us))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CALL\tP50\tP90\tP99\tMEAN")
	for _, row := range []struct {
		name string
		l    bench.Latency
	}{{"direct", r.Direct}, {"gateway", r.Gateway}} {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", row.name, fmtMicros(row.l.P50us), fmtMicros(row.l.P90us), fmtMicros(row.l.P99us), fmtMicros(row.l.MeanUs))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	cpu := ""
	if r.GatewayCPUus > 0 {
		cpu = fmt.Sprintf("; toolgate mcp used %s of CPU per call", fmtMicros(r.GatewayCPUus))
	}
	if _, err := fmt.Fprintf(w, "gateway / direct p50: %.2fx (%s added per call%s)\n", r.RatioP50, fmtMicros(r.AddedP50us), cpu); err != nil {
		return err
	}
	if r.Profile != "" {
		if _, err := fmt.Fprintf(w, "CPU profile of toolgate mcp: %s\n", r.Profile); err != nil {
			return err
		}
	}
	return nil
}

// newBenchEchoCmd is the upstream MCP server of bench --gateway, hidden:
// it serves one echo tool on standard input and output.
func newBenchEchoCmd(stdio Stdio) *cobra.Command {
	return &cobra.Command{
		Use:    bench.EchoCommand,
		Short:  "The upstream MCP server of 'toolgate bench --gateway' (one echo tool, on stdio)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := bench.ServeEcho(cmd.Context(), readCloser(stdio.In), nopWriteCloser{stdio.Out}); err != nil {
				return internalErr(err)
			}
			return nil
		},
	}
}

func printBench(w io.Writer, r *bench.Report, perPhase time.Duration) error {
	if r.Backend == "postgres" {
		fmt.Fprintf(w, "postgres %s (sync=%v, callers=%d, %v per phase)\n", r.ServerVersion, r.Sync, r.Callers, perPhase)
	} else {
		fmt.Fprintf(w, "fsync p50 %s p99 %s (sync=%v, callers=%d, %v per phase)\n",
			fmtMicros(r.FsyncP50us), fmtMicros(r.FsyncP99us), r.Sync, r.Callers, perPhase)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PHASE\tCALLERS\tOPS/S\tP50\tP99\tVS FLOOR w1\tSYNCS/OP")
	for _, row := range []struct {
		name string
		p    bench.Phase
	}{{"floor", r.Floor.W1}, {"floor", r.Floor.WN}, {"runtime", r.Runtime.W1}, {"runtime", r.Runtime.WN}, {"read-only", r.ReadOnly.W1}, {"read-only", r.ReadOnly.WN}} {
		vs := "-"
		if r.Floor.W1.OpsPerS > 0 {
			vs = fmt.Sprintf("%.2fx", row.p.OpsPerS/r.Floor.W1.OpsPerS)
		}
		syncs := "-"
		if row.p.SyncsPerOp > 0 {
			syncs = fmt.Sprintf("%.2f", row.p.SyncsPerOp)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%s\t%s\t%s\t%s\n", row.name, row.p.Callers, row.p.OpsPerS, fmtMicros(row.p.P50us), fmtMicros(row.p.P99us), vs, syncs)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	floor := "2 bbolt updates"
	if r.Backend == "postgres" {
		floor = "2 pgx transactions"
	}
	if _, err := fmt.Fprintf(w, "records: claim %d bytes, final %d bytes; floor = %s per op, runtime = 1 Execute per op (read-only: of a tool that only reads, stored once, unclaimed)\n",
		r.ClaimBytes, r.FinalBytes, floor); err != nil {
		return err
	}
	for _, p := range r.Profiles {
		if _, err := fmt.Fprintf(w, "CPU profile: %s\n", p); err != nil {
			return err
		}
	}
	return nil
}

// fmtMicros prints a latency in microseconds with three significant digits.
func fmtMicros(us float64) string {
	d := time.Duration(us * float64(time.Microsecond))
	unit := time.Duration(1)
	for v := d; v >= 1000; v /= 10 {
		unit *= 10
	}
	return d.Round(unit).String()
}

// progress writes a self-overwriting status line to a terminal; to anything
// else it writes nothing.
type progress struct {
	w    io.Writer // nil: not a terminal
	last int       // length of the line on screen
}

func newProgress(w io.Writer) *progress {
	f, ok := w.(*os.File)
	if !ok {
		return &progress{}
	}
	if fi, err := f.Stat(); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return &progress{}
	}
	return &progress{w: w}
}

func (p *progress) show(msg string) {
	if p.w == nil {
		return
	}
	pad := max(p.last-len(msg), 0)
	fmt.Fprintf(p.w, "\r%s%s", msg, strings.Repeat(" ", pad))
	p.last = len(msg)
}

func (p *progress) clear() {
	if p.w == nil || p.last == 0 {
		return
	}
	fmt.Fprintf(p.w, "\r%s\r", strings.Repeat(" ", p.last))
	p.last = 0
}
