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
// So every child is forked by one goroutine, started once, locked to its
// OS thread and never returning: that thread lives as long as the process,
// and its death, which kills the children, is the process's death. The
// other goroutines hand it the start and wait for the answer. os/exec's
// fork is a vfork (CLONE_VFORK|CLONE_VM): the parent thread waits only for
// the child's exec, so the one thread is no bottleneck.
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
