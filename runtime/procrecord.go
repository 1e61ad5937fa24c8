package runtime

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/toolgate/toolgate/tools"
	"github.com/toolgate/toolgate/txn"
)

// procRecord keeps the running processes of one attempt in its claim
// (txn.Tx.SetProcesses), so that the recovery after a crash kills what is
// left of them before it records the attempt as interrupted.
//
// A process is written into the claim once it has started, before Run
// waits for it. One that has ended leaves the claim with the next write of
// it: the next process's start, the commit or rollback that ends the
// attempt (at once for a process tool, which returns as its process ends),
// or a write of its own when the tool is still running endGrace later. So
// a process tool's call writes its claim three times, not four. Until then
// a crash leaves the ended process in the claim, and the recovery finds it
// gone: proc.Reap kills nothing of a run whose leader ended (its pid is
// free, or another process's with another start time) but what is left in
// its group and session, and nothing is, since the group was killed before
// its leader was reaped; what Reap cannot tell apart (a new group of that
// id in the same session, whose own leader has exited too) is as likely as
// during the run, for at most endGrace more.
type procRecord struct {
	r       *Runtime
	tx      *txn.Tx
	tool    string
	mu      sync.Mutex
	running []txn.Process
	stale   *time.Timer // writes the claim endGrace after a process ended, unless something else wrote it first
	done    bool        // the tool has returned: the end of the attempt rewrites the claim
}

// endGrace is how long an ended process may stay in the claim while its
// tool goes on.
const endGrace = 50 * time.Millisecond

// started records p in the claim; the function it returns takes it out
// once the process has ended.
func (pr *procRecord) started(p tools.RunningProcess) func() {
	tp := txn.Process{Pid: p.Pid, StartTime: p.StartTime, Session: p.Session, BootID: p.BootID, Host: p.Host, Cgroup: p.Cgroup, Command: p.Path}
	pr.mu.Lock()
	pr.running = append(pr.running, tp)
	pr.store()
	pr.mu.Unlock()
	return func() {
		pr.mu.Lock()
		defer pr.mu.Unlock()
		if i := slices.Index(pr.running, tp); i >= 0 {
			pr.running = slices.Delete(pr.running, i, i+1)
		}
		if pr.done {
			return
		}
		if pr.stale == nil {
			pr.stale = time.AfterFunc(endGrace, pr.flush)
		} else {
			pr.stale.Reset(endGrace)
		}
	}
}

// returned says that the tool has returned: no process of it runs any
// more, and the attempt's commit or rollback writes the claim next.
func (pr *procRecord) returned() {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	pr.done = true
	if pr.stale != nil {
		pr.stale.Stop()
	}
}

// flush writes the claim without the processes that have ended, for a tool
// still running endGrace after the last one ended.
func (pr *procRecord) flush() {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if !pr.done {
		pr.store()
	}
}

// store writes the running processes into the claim; pr.mu is held. A
// failure is logged, not fatal: the process still dies with us (its
// parent-death signal); only what it started would outlive a crash.
func (pr *procRecord) store() {
	if pr.stale != nil {
		pr.stale.Stop() // this write takes the ended processes out
	}
	err := pr.tx.SetProcesses(context.Background(), pr.running)
	if err != nil && pr.tx.Active() {
		pr.r.opts.Logger.LogAttrs(context.Background(), slog.LevelWarn,
			fmt.Sprintf("could not record the running processes of execution %s (%s) in its claim: after a crash, what they started may outlive it: %v", pr.tx.ID(), pr.tool, err),
			slog.String("execution", pr.tx.ID()), slog.String("tool", pr.tool), slog.Any("error", err))
	}
}

// reapOutcome is what reapLeftovers found of one recorded process.
type reapOutcome struct {
	tools.ProcessLeftover
	failed string // why it could not be checked, "" if it was
}

// reapKey names one recorded process.
type reapKey struct {
	pid   int
	start uint64
	boot  string
}

// reapLeftovers kills what a crash left running of rec's processes and
// returns a sentence saying so for the record ("" when nothing was left).
// The outcome of each process is kept: a Postgres sweep may run its
// function again when its transaction is retried, and the second look, with
// nothing left to kill, must still say what the first did.
func (r *Runtime) reapLeftovers(rec *txn.Record) string {
	var killed, remaining int
	var unchecked, failed []string
	for _, p := range rec.Processes {
		k := reapKey{p.Pid, p.StartTime, p.BootID}
		r.reapMu.Lock()
		o, ok := r.reaped[k]
		if !ok {
			var err error
			o.ProcessLeftover, err = tools.ReapProcess(tools.RunningProcess{Pid: p.Pid, StartTime: p.StartTime, Session: p.Session,
				BootID: p.BootID, Host: p.Host, Cgroup: p.Cgroup, Path: p.Command})
			if err != nil {
				o.failed = Message(err)
			}
			if r.reaped == nil {
				r.reaped = map[reapKey]reapOutcome{}
			}
			r.reaped[k] = o
		}
		r.reapMu.Unlock()
		l := o.ProcessLeftover
		if o.failed != "" {
			failed = append(failed, fmt.Sprintf("%s (pid %d): %s", p.Command, p.Pid, o.failed))
		}
		killed += l.Killed
		remaining += l.Remaining
		if l.Unchecked != "" {
			unchecked = append(unchecked, fmt.Sprintf("%s (pid %d) %s", p.Command, p.Pid, l.Unchecked))
		}
		if l.Killed > 0 {
			r.opts.Logger.LogAttrs(context.Background(), slog.LevelWarn,
				fmt.Sprintf("killed %s that the interrupted execution %s of %s left running (%s, process group %d)",
					plural(l.Killed, "process", "processes"), rec.ExecutionID, rec.ToolID, p.Command, p.Pid),
				slog.String("execution", rec.ExecutionID), slog.String("command", p.Command), slog.Int("pid", p.Pid), slog.Int("killed", l.Killed))
		}
	}
	var says []string
	if killed > 0 {
		verb := "were"
		if killed == 1 {
			verb = "was"
		}
		says = append(says, fmt.Sprintf("%s it left running %s killed at recovery", plural(killed, "process", "processes"), verb))
	}
	if remaining > 0 {
		says = append(says, fmt.Sprintf("%s still ran a second after SIGKILL", plural(remaining, "process", "processes")))
	}
	if len(unchecked) > 0 {
		says = append(says, "it may still be running: "+strings.Join(unchecked, "; "))
	}
	if len(failed) > 0 {
		says = append(says, "its processes could not be checked, and may still be running: "+strings.Join(failed, "; "))
	}
	return strings.Join(says, "; ")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
