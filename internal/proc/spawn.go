package proc

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// The parent-death signal
//
// Every child gets SysProcAttr.Pdeathsig = SIGKILL, so it dies with the
// process that started it, even when that one is killed with SIGKILL and
// can clean nothing up. Linux ties the signal to the parent *thread*, not
// the process (prctl(2), PR_SET_PDEATHSIG: "the parent thread"): the child
// is killed when the OS thread that forked it exits. Under Go's thread
// model a goroutine moves between threads, and the runtime ends a thread
// when a goroutine locked to it (runtime.LockOSThread) returns without
// unlocking: a child forked from such a thread would be killed early,
// while we still wait for it (golang.org/issue/27505).
//
// So the thread that forks a child must outlive it. Two ways:
//
//   - Runner.Run forks from its own thread: it locks its goroutine to its
//     OS thread before the fork and unlocks it only once it has reaped the
//     child. While a goroutine is locked to a thread no other goroutine
//     runs there, so none can end it, and Run does not return before the
//     reap: the thread outlives the child. This costs no thread switch; its
//     waits are system calls (poll, waitid), where a locked thread simply
//     blocks.
//   - Start, whose Process outlives the call, hands the fork to one
//     goroutine, started once, locked to its OS thread and never returning:
//     that thread lives as long as the process, and its death, which kills
//     the children, is the process's death. os/exec's fork is a vfork
//     (CLONE_VFORK|CLONE_VM): the parent thread waits only for the child's
//     exec, so the one thread is no bottleneck. Handing it the fork and
//     taking the answer back are two thread switches (about 100 µs of CPU
//     on a virtual machine), which Run spares itself.
//
// What the signal does not cover:
//   - Only the direct child gets it: a process it starts is not killed when
//     we die (the kernel clears the setting in a fork). The group (and the
//     run's cgroup, if any) is what the recovery of an interrupted
//     execution kills later, from the identity the claim recorded
//     (Identity, Reap).
//   - The kernel clears it when the child execs a set-user-ID or
//     set-group-ID program, or one with file capabilities.
//   - Go's fork code checks, in the child, whether the parent died before
//     the signal was set, and then kills the child: there is no window.

// startLocked starts cmd from the calling goroutine's OS thread, with
// SIGKILL as its parent-death signal. The caller has locked the goroutine
// to its thread (runtime.LockOSThread) and unlocks it only once it has
// reaped the child.
func startLocked(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	return cmd.Start()
}

// spawnReq is one Start for the spawner thread to run.
type spawnReq struct {
	cmd  *exec.Cmd
	done chan error
}

var (
	spawnOnce sync.Once
	spawnCh   chan spawnReq
)

// startChild starts cmd from the spawner thread, with SIGKILL as its
// parent-death signal.
func startChild(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	spawnOnce.Do(func() {
		spawnCh = make(chan spawnReq)
		go spawner(spawnCh)
	})
	r := spawnReq{cmd: cmd, done: make(chan error, 1)}
	spawnCh <- r
	return <-r.done
}

// spawner runs every Start on its own OS thread, which it never gives
// back: the goroutine never returns, so the runtime never ends the thread.
func spawner(reqs <-chan spawnReq) {
	runtime.LockOSThread()
	for r := range reqs {
		r.done <- r.cmd.Start()
	}
}
