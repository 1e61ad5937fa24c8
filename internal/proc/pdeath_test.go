package proc_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/toolgate/toolgate/internal/proc"
)

// runner is the "runner" child: it runs a "fork wait" child through
// proc.Run and prints the identity OnStart gave it as "id=<json>".
func runner(args []string) int {
	exe, _ := os.Executable()
	spec := proc.Spec{Path: exe, Args: []string{"wait"}, Env: []string{childVar + "=fork"}, MaxStdout: 1 << 10, MaxStderr: 1 << 10}
	spec.OnStart = func(id proc.Identity) {
		b, _ := json.Marshal(id)
		fmt.Printf("id=%s\n", b)
	}
	_, err := proc.Run(context.Background(), spec)
	fmt.Fprintln(os.Stderr, "the run ended:", err)
	return 1
}

// threadStart is the "threadstart" child.
func threadStart() int {
	// Keep this goroutine on the main thread, so the one below runs on
	// another: the runtime wedges the main thread rather than end it.
	runtime.LockOSThread()
	exe, _ := os.Executable()
	started := make(chan int)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		p, err := proc.Start(proc.StartSpec{Path: exe, Args: []string{"60"}, Env: []string{childVar + "=sleep"}})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			started <- 0
			return
		}
		started <- p.Pid
	}()
	pid := <-started
	if pid == 0 {
		return 1
	}
	fmt.Printf("pid=%d\n", pid)
	time.Sleep(60 * time.Second)
	return 0
}

// threadChurn is the "threadchurn" child: it runs a child sleeping 1 s
// through proc.Run while goroutines keep locking their threads and
// returning locked, so that the runtime ends thread after thread; OnStart
// sleeps, which parks the goroutine that runs it and would free its thread
// for them, were it not locked. It prints "ended=<signal> <exit code>".
func threadChurn() int {
	// Keep this goroutine on the main thread, which the runtime never ends,
	// so that Run runs on another.
	runtime.LockOSThread()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				ended := make(chan struct{})
				go func() {
					runtime.LockOSThread()
					close(ended)
				}()
				<-ended
			}
		})
	}
	exe, _ := os.Executable()
	spec := proc.Spec{Path: exe, Args: []string{"1"}, Env: []string{childVar + "=sleep"}, MaxStdout: 1 << 10, MaxStderr: 1 << 10}
	spec.OnStart = func(proc.Identity) { time.Sleep(200 * time.Millisecond) }
	var res *proc.Result
	var err error
	ran := make(chan struct{})
	go func() {
		res, err = proc.Run(context.Background(), spec)
		close(ran)
	}()
	<-ran
	close(stop)
	wg.Wait()
	if res == nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("ended=%d %d\n", int(res.Signal), res.ExitCode)
	return 0
}

// startParent starts the test binary as the child kind and returns it and
// the first line it prints with the prefix.
func startParent(t *testing.T, kind, prefix string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(testExe(t))
	cmd.Env = []string{childVar + "=" + kind}
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), prefix); ok {
				line <- v
				break
			}
		}
		io.Copy(io.Discard, out)
	}()
	select {
	case v := <-line:
		return cmd, v
	case <-time.After(30 * time.Second):
		t.Fatalf("the %s child printed no %q line", kind, prefix)
	}
	return nil, ""
}

// alive reports whether pid is a process that has not ended (a zombie has).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i > 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
}

// reapWithin waits for pid, an orphan reparented to the test process (a
// subreaper, see TestMain), to end within d, and checks that SIGKILL
// ended it.
func reapWithin(t *testing.T, pid int, d time.Duration, what string) {
	t.Helper()
	deadline := time.Now().Add(d)
	var ws unix.WaitStatus
	for {
		got, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil)
		if err == nil && got == pid {
			break
		}
		if err != nil && !alive(pid) {
			return // reaped by another (its parent still lived)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s (pid %d) still runs %v after it should have been killed", what, pid, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !ws.Signaled() || ws.Signal() != unix.SIGKILL {
		t.Errorf("%s (pid %d) ended with %v, want SIGKILL", what, pid, ws)
	}
}

// wrote reports whether pid has written at least n bytes (/proc/<pid>/io).
func wrote(pid int, n int64) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/io")
	if err != nil {
		return false
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "wchar: "); ok {
			w, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return w >= n
		}
	}
	return false
}

// grandchildren waits for the "fork" child pgid to have started its
// grandchild, and for that one to have printed its line (so that it does
// not die writing into a closed pipe later), and returns them.
func grandchildren(t *testing.T, pgid int) []int {
	t.Helper()
	for i := 0; ; i++ {
		if i == 3000 {
			t.Fatal("the child started no grandchild")
		}
		time.Sleep(10 * time.Millisecond)
		if g := groupMembers(pgid); len(g) > 0 && wrote(g[0], int64(len("partial\n"))) {
			return g
		}
	}
}

// groupMembers returns the live processes of process group pgid but pgid.
func groupMembers(pgid int) []int {
	d, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range d {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == pgid || !alive(pid) {
			continue
		}
		if g, err := unix.Getpgid(pid); err == nil && g == pgid {
			pids = append(pids, pid)
		}
	}
	return pids
}

// The process that runs a tool is killed with SIGKILL: the tool's process
// dies with it, within a second (the parent-death signal); its grandchild,
// which the signal does not reach, is killed by Reap from the identity
// OnStart gave, and Reap then finds nothing more to kill.
func TestPdeathsig_ChildDiesWithItsParent(t *testing.T) {
	parent, line := startParent(t, "runner", "id=")
	var id proc.Identity
	if err := json.Unmarshal([]byte(line), &id); err != nil {
		t.Fatal(err)
	}
	// The tool's process keeps the session it was started in (Setpgid, not
	// Setsid): this test's own, which is 0 where the test runs outside any
	// session (a CI machine's daemon).
	sid, err := unix.Getsid(0)
	if err != nil {
		t.Fatal(err)
	}
	if id.Pid <= 0 || id.StartTime == 0 || id.BootID == "" || id.Session != sid {
		t.Fatalf("identity %+v, want session %d", id, sid)
	}
	grand := grandchildren(t, id.Pid)

	if err := parent.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	parent.Wait()
	reapWithin(t, id.Pid, time.Second, "the tool's process")
	for _, g := range grand {
		if !alive(g) {
			t.Fatalf("grandchild %d ended with its parent: this test expects the parent-death signal to reach only the direct child", g)
		}
	}

	got, err := proc.Reap(id)
	if err != nil {
		t.Fatal(err)
	}
	if got.Killed != len(grand) || got.Remaining != 0 || got.Unchecked != "" {
		t.Errorf("Reap = %+v, want %d killed", got, len(grand))
	}
	for _, g := range grand {
		reapWithin(t, g, time.Second, "the grandchild")
	}
	if got, err := proc.Reap(id); err != nil || got != (proc.Leftover{}) {
		t.Errorf("Reap again = %+v, %v, want nothing", got, err)
	}
}

// A child started from a goroutine locked to its OS thread, which then
// returns locked (so the runtime ends the thread), is not killed: the
// parent-death signal is tied to the thread that forked, and every child
// is forked from one thread that lives as long as the process.
func TestPdeathsig_SurvivesTheStartingThread(t *testing.T) {
	parent, line := startParent(t, "threadstart", "pid=")
	pid, err := strconv.Atoi(line)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if !alive(pid) {
		t.Fatal("the child was killed when the thread that started it ended")
	}
	if err := parent.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	parent.Wait()
	reapWithin(t, pid, time.Second, "the child")
}

// A child of Run is not killed while other goroutines end their threads:
// the thread that forked it is locked to the goroutine that runs it until
// it is reaped, so no other goroutine can end it.
func TestPdeathsig_RunSurvivesThreadsEnding(t *testing.T) {
	_, line := startParent(t, "threadchurn", "ended=")
	if line != "0 0" {
		t.Fatalf("the child ended with signal and exit code %s, want 0 0: killed when the thread that forked it ended", line)
	}
}

// Reap never signals a process that is not the recorded one: not a pid
// with another start time (reused), not on another machine or boot; and a
// group whose leader has ended is found by its group, session and start
// time.
func TestReap_Identity(t *testing.T) {
	start := func() (*exec.Cmd, proc.Identity, []int) {
		t.Helper()
		cmd := exec.Command(testExe(t), "wait")
		cmd.Env = []string{childVar + "=fork"}
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Kill(-cmd.Process.Pid, unix.SIGKILL); cmd.Wait() })
		id, err := proc.Identify(cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		return cmd, id, grandchildren(t, id.Pid)
	}

	cmd, id, grand := start()
	for _, wrong := range []proc.Identity{
		func() proc.Identity { w := id; w.StartTime++; return w }(),
		func() proc.Identity { w := id; w.BootID = "another-boot"; return w }(),
		func() proc.Identity { w := id; w.BootID, w.Host = "another-boot", "another-host"; return w }(),
	} {
		got, err := proc.Reap(wrong)
		if err != nil || got.Killed != 0 {
			t.Errorf("Reap(%+v) = %+v, %v: killed a process that is not the recorded one", wrong, got, err)
		}
		if (wrong.Host == "another-host") != (got.Unchecked != "") {
			t.Errorf("Reap(%+v): Unchecked = %q", wrong, got.Unchecked)
		}
	}
	if !alive(id.Pid) || !alive(grand[0]) {
		t.Fatal("a wrong identity killed the run")
	}
	got, err := proc.Reap(id)
	if err != nil || got.Killed != 1+len(grand) || got.Remaining != 0 {
		t.Errorf("Reap(leader alive) = %+v, %v, want %d killed", got, err, 1+len(grand))
	}
	cmd.Wait()
	for _, g := range grand {
		reapWithin(t, g, time.Second, "the grandchild")
	}

	// The leader ended; its grandchild is left, in the group.
	cmd, id, grand = start()
	cmd.Process.Kill()
	cmd.Wait()
	if got, err := proc.Reap(func() proc.Identity { w := id; w.StartTime = ^uint64(0); return w }()); err != nil || got.Killed != 0 {
		t.Errorf("Reap(leaderless, later start time) = %+v, %v: killed processes started before the run", got, err)
	}
	got, err = proc.Reap(id)
	if err != nil || got.Killed != len(grand) || got.Remaining != 0 {
		t.Errorf("Reap(leaderless) = %+v, %v, want %d killed", got, err, len(grand))
	}
	for _, g := range grand {
		reapWithin(t, g, time.Second, "the grandchild")
	}
	if _, err := proc.Reap(proc.Identity{Pid: 1}); err == nil {
		t.Error("Reap of pid 1: no error")
	}
	if _, err := proc.Reap(proc.Identity{Pid: id.Pid, BootID: id.BootID, Cgroup: "/sys/fs/cgroup/system.slice"}); err == nil {
		t.Error("Reap of a cgroup that is no run's: no error")
	}
	if !errors.Is(unix.Kill(id.Pid, 0), unix.ESRCH) && alive(id.Pid) {
		t.Error("the leader is alive")
	}
}
