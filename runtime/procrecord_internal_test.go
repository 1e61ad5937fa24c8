package runtime

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/proc"
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
