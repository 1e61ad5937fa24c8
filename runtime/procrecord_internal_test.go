package runtime

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/proc"
	"github.com/toolgate/toolgate/tools"
	"github.com/toolgate/toolgate/txn"
)

// What recovery says of an interrupted attempt's processes: what it killed,
// what it could not check and why, in the user's terms; and, asked again
// about the same processes (a Postgres sweep whose transaction is retried),
// the same, though nothing is left to kill the second time.
func TestReapLeftovers_Says(t *testing.T) {
	r := &Runtime{opts: Options{Logger: txn.DefaultLogger()}}
	host, _ := os.Hostname()

	// A process that is still running, recorded with its identity.
	cmd := exec.Command("sleep", "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	id, err := proc.Identify(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	p := txn.Process{Pid: id.Pid, StartTime: id.StartTime, Session: id.Session, BootID: id.BootID, Host: id.Host, Command: "/usr/bin/sleep"}
	rec := &txn.Record{ExecutionID: "x", Processes: []txn.Process{p}}
	for i := range 2 {
		if got := r.reapLeftovers(rec); got != "1 process it left running was killed at recovery" {
			t.Fatalf("look %d: %q", i+1, got)
		}
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the recorded process was not killed")
	}

	for _, tc := range []struct {
		p    txn.Process
		want string
	}{
		{txn.Process{Pid: 4242, StartTime: 1, BootID: "another-boot", Host: "elsewhere", Command: "/usr/bin/sleep"},
			`it may still be running: /usr/bin/sleep (pid 4242) ran on host "elsewhere", not this one`},
		{txn.Process{Pid: 4243, StartTime: 1, BootID: "another-boot", Host: host, Command: "/usr/bin/sleep"}, ""}, // this host, rebooted since
		{txn.Process{Pid: 1, Command: "/usr/bin/sleep"}, "its processes could not be checked, and may still be running: /usr/bin/sleep (pid 1): no process to reap (pid 1)"},
	} {
		got := r.reapLeftovers(&txn.Record{ExecutionID: "y", Processes: []txn.Process{tc.p}})
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) || strings.Contains(got, "proc: ") {
			t.Errorf("%+v: %q, want %q", tc.p, got, tc.want)
		}
	}
}

// A process is in the claim from its start. Once it has ended it stays
// there until the next write of the claim: for a tool that returns at once,
// as a process tool does, that is the attempt's commit or rollback, so the
// call writes its claim once per process fewer; for a tool that goes on, a
// write of its own endGrace later.
func TestProcRecord_EndedProcessLeavesTheClaim(t *testing.T) {
	ctx := context.Background()
	s, err := txn.Open(filepath.Join(t.TempDir(), "t.db"), &txn.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := &Runtime{opts: Options{Logger: txn.DefaultLogger()}}
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	claim := func(id string) *txn.Tx {
		tx, err := s.Begin(ctx, &txn.Record{ExecutionID: id, CallID: "c-" + id, Attempt: 1, ToolID: "t", ToolVersion: "1.0.0",
			State: "EXECUTING", Transitions: []txn.Transition{{From: "AUTHORIZED", To: "EXECUTING", Event: "run", At: at}}, StartedAt: at})
		if err != nil {
			t.Fatal(err)
		}
		return tx
	}
	inClaim := func(id string) int {
		rec, err := s.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return len(rec.Processes)
	}
	p := tools.RunningProcess{Pid: 4242, StartTime: 99, Session: 7, BootID: "b", Host: "h", Path: "/usr/bin/true"}

	// A tool that returns as its process ends.
	pr := &procRecord{r: r, tx: claim("a"), tool: "t"}
	ended := pr.started(p)
	if n := inClaim("a"); n != 1 {
		t.Fatalf("a started process is not in the claim (%d)", n)
	}
	ended()
	if n := inClaim("a"); n != 1 {
		t.Fatal("the end of the process wrote the claim at once; the commit that follows rewrites it anyway")
	}
	pr.returned()
	time.Sleep(3 * endGrace)
	if n := inClaim("a"); n != 1 {
		t.Fatal("the claim was written after the tool returned: its commit is what takes the process out")
	}

	// A tool that goes on after its process ended.
	pr = &procRecord{r: r, tx: claim("b"), tool: "t"}
	pr.started(p)()
	deadline := time.Now().Add(10 * time.Second)
	for inClaim("b") != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("an ended process stayed in the claim of a tool that went on for 10s (endGrace %v)", endGrace)
		}
		time.Sleep(endGrace / 5)
	}
	// A second process started meanwhile is written with the first gone.
	pr = &procRecord{r: r, tx: claim("c"), tool: "t"}
	pr.started(p)()
	q := p
	q.Pid = 4343
	defer pr.started(q)()
	if rec, _ := s.Get(ctx, "c"); len(rec.Processes) != 1 || rec.Processes[0].Pid != 4343 {
		t.Fatalf("claim after the second start: %+v", rec.Processes)
	}
	pr.returned()
}
