package runtime

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"github.com/toolgate/toolgate/tools"
	"github.com/toolgate/toolgate/txn"
)

// procRecord keeps the running processes of one attempt in its claim
// (txn.Tx.SetProcesses), so that the recovery after a crash kills what is
// left of them before it records the attempt as interrupted.
type procRecord struct {
	r       *Runtime
	tx      *txn.Tx
	tool    string
	mu      sync.Mutex
	running []txn.Process
}

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
		pr.store()
	}
}

// store writes the running processes into the claim; pr.mu is held. A
// failure is logged, not fatal: the process still dies with us (its
// parent-death signal); only what it started would outlive a crash.
func (pr *procRecord) store() {
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
