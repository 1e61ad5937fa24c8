package proc

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Identity names a started child so that a later process, after a crash
// of the one that started it, can find what is left of it and be sure it
// is the same: a pid alone may have been reused.
//
// A run's processes are its process group: the leader's pid is the group's
// id. The kernel never gives a pid to a new process while a process group
// of that id still has a member, so a live process with the recorded pid
// and a different start time means the whole group has ended.
type Identity struct {
	Pid       int    // the leader's pid, also the id of its process group
	StartTime uint64 // field 22 of /proc/<pid>/stat: clock ticks after boot
	Session   int    // the session of the group (field 6)
	BootID    string // /proc/sys/kernel/random/boot_id where it runs
	Host      string // the host name where it runs, for messages
	Cgroup    string // the run's own cgroup directory, "" without one
	Path      string // the program that ran, for messages
}

// bootID is this machine's boot id: start times count from that boot.
var bootID = sync.OnceValue(func() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
})

// Identify returns the identity of the process pid, for a process started
// otherwise than by Run (Run gives it to Spec.OnStart).
func Identify(pid int) (Identity, error) { return identify(pid, "", nil) }

// identify returns the identity of the child pid, which has not been
// reaped (a zombie still has its /proc entry).
func identify(pid int, path string, cg *cgroup) (Identity, error) {
	st, err := readStat(pid)
	if err != nil {
		return Identity{}, err
	}
	host, _ := os.Hostname()
	id := Identity{Pid: pid, StartTime: st.start, Session: st.session, BootID: bootID(), Host: host, Path: path}
	if cg != nil {
		id.Cgroup = cg.dir
	}
	return id, nil
}

// procStat is what Reap reads of /proc/<pid>/stat.
type procStat struct {
	state         byte // field 3: 'Z' is a zombie, 'X' dead
	pgid, session int
	start         uint64
}

func readStat(pid int) (procStat, error) {
	name := "/proc/" + strconv.Itoa(pid) + "/stat"
	// One read of a buffer that holds any stat line (52 fields of at most
	// 20 digits and a command name of at most 64 bytes), where os.ReadFile
	// would also stat the file and read again for the end.
	var buf [2048]byte
	fd, err := unix.Open(name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return procStat{}, &os.PathError{Op: "open", Path: name, Err: err}
	}
	n, err := unix.Read(fd, buf[:])
	unix.Close(fd)
	if err != nil {
		return procStat{}, &os.PathError{Op: "read", Path: name, Err: err}
	}
	b := buf[:max(n, 0)]
	if n == len(buf) { // never seen: read it whole
		if b, err = os.ReadFile(name); err != nil {
			return procStat{}, err
		}
	}
	st, ok := parseIdentityStat(b)
	if !ok {
		return procStat{}, fmt.Errorf("/proc/%d/stat: unexpected form", pid)
	}
	return st, nil
}

// parseIdentityStat reads fields 3 (state), 5 (process group), 6 (session) and 22
// (start time) of a /proc/<pid>/stat line, counting from the last ')' as
// the command name may hold any byte.
func parseIdentityStat(b []byte) (procStat, bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, false
	}
	f := bytes.Fields(b[i+1:]) // field k is f[k-3]
	if len(f) < 22-3+1 {
		return procStat{}, false
	}
	g, err1 := strconv.Atoi(string(f[5-3]))
	s, err2 := strconv.Atoi(string(f[6-3]))
	t, err3 := strconv.ParseUint(string(f[22-3]), 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return procStat{}, false
	}
	return procStat{state: f[0][0], pgid: g, session: s, start: t}, true
}

// Leftover is what Reap found of a recorded run.
type Leftover struct {
	// Killed is how many processes of the run were still running and
	// were killed (SIGKILL).
	Killed int
	// Remaining is how many of them were still there a second after the
	// kill (a process in uninterruptible sleep dies when it wakes).
	Remaining int
	// Unchecked says why the run could not be checked from here (it ran on
	// another machine), "" when it was.
	Unchecked string
}

// Reap kills what is left of the run id names: the process group, or the
// run's cgroup, when it is the same run. It never signals a process that
// is not the run's: on another boot or machine it signals nothing (and says
// so in Leftover.Unchecked), a live leader must have the recorded start
// time, and without a live leader only processes of the recorded group and
// session that started no earlier than the leader are killed.
//
// What it cannot tell apart: a group of the same id made after every
// process of the run had ended, in the same session, whose own leader
// has exited too. The pid must have been reused for that, in the time
// between the crash and the recovery.
func Reap(id Identity) (Leftover, error) {
	if id.Pid <= 1 {
		return Leftover{}, fmt.Errorf("proc: no process to reap (pid %d)", id.Pid)
	}
	if id.BootID == "" || id.BootID != bootID() {
		host, _ := os.Hostname()
		if id.Host != "" && id.Host == host {
			return Leftover{}, nil // this machine, restarted since: nothing of the run is left
		}
		return Leftover{Unchecked: fmt.Sprintf("ran on host %q, not this one (%q), and cannot be checked from here", id.Host, host)}, nil
	}
	var out Leftover
	if id.Cgroup != "" {
		n, err := reapCgroup(id.Cgroup)
		if err != nil {
			return out, err
		}
		out.Killed += n
	}
	n, err := reapGroup(id)
	out.Killed += n
	if err != nil {
		return out, err
	}
	if out.Killed > 0 {
		out.Remaining = waitGone(id, time.Second)
	}
	return out, nil
}

// reapCgroup kills the processes of a run's cgroup that still exists. The
// directory must be one Run makes (toolgate-proc-<random>) on a cgroup2
// filesystem: a record changed by hand cannot make us kill another cgroup.
func reapCgroup(dir string) (int, error) {
	if !filepath.IsAbs(dir) || !strings.HasPrefix(filepath.Base(dir), "toolgate-proc-") {
		return 0, fmt.Errorf("proc: %q is not a cgroup of a run", dir)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return 0, nil
		}
		return 0, err
	}
	if st.Type != unix.CGROUP2_SUPER_MAGIC {
		return 0, fmt.Errorf("proc: %s is not on a cgroup2 filesystem", dir)
	}
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return 0, nil // removed meanwhile
	}
	n := len(strings.Fields(string(b)))
	if n == 0 {
		return 0, nil
	}
	c := &cgroup{dir: dir, fd: -1}
	if err := c.kill(); err != nil {
		return 0, err
	}
	_ = unix.Rmdir(dir) // empty once the kill is done; else left for the next run's cleanup
	return n, nil
}

// reapGroup kills the processes of the run's process group.
func reapGroup(id Identity) (int, error) {
	fd, err := unix.PidfdOpen(id.Pid, 0)
	switch {
	case err == nil:
		defer unix.Close(fd)
		// The pidfd holds the pid: from now on it names this process or
		// none, never a new one.
		st, err := readStat(id.Pid)
		if err != nil {
			return 0, nil // ended meanwhile: what is left is a group without its leader
		}
		if st.start != id.StartTime {
			// Reused: the kernel gave the pid away, which it does only once
			// no process of our group is left.
			return 0, nil
		}
		n := len(members(id))
		if st.pgid != id.Pid && st.state != 'Z' && st.state != 'X' {
			n++ // a leader that left its group
		}
		// The leader is ours, so the group id is still ours.
		if err := unix.Kill(-id.Pid, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
			return 0, fmt.Errorf("proc: kill process group %d: %w", id.Pid, err)
		}
		_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
		return n, nil
	case errors.Is(err, unix.ESRCH):
		// No leader: what is left is its group's other members.
	case errors.Is(err, unix.ENOSYS):
		// Before Linux 5.3: read and kill, by start time, without a pidfd.
		if st, err := readStat(id.Pid); err == nil && st.start == id.StartTime {
			n := len(members(id))
			_ = unix.Kill(-id.Pid, unix.SIGKILL)
			_ = unix.Kill(id.Pid, unix.SIGKILL)
			return n, nil
		}
	default:
		return 0, fmt.Errorf("proc: open pid %d: %w", id.Pid, err)
	}
	killed := map[int]bool{}
	for range 100 { // members may fork while they are killed: until no new one is left
		fresh := 0
		for _, pid := range members(id) {
			if !killed[pid] && killMember(pid, id) {
				killed[pid] = true
				fresh++
			}
		}
		if fresh == 0 {
			break
		}
	}
	return len(killed), nil
}

// members returns the pids of the live processes of the run's group: in
// its process group and session, started no earlier than its leader, and
// not a zombie (dead already, waiting for its parent to reap it).
func members(id Identity) []int {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	var pids []int
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		if st, err := readStat(pid); err == nil && st.member(id) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func (st procStat) member(id Identity) bool {
	return st.pgid == id.Pid && st.session == id.Session && st.start >= id.StartTime &&
		st.state != 'Z' && st.state != 'X'
}

// killMember kills pid through a pidfd once it has checked, through that
// pidfd's hold on the pid, that it is still a member of the run.
func killMember(pid int, id Identity) bool {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		if errors.Is(err, unix.ENOSYS) {
			if st, err := readStat(pid); err == nil && st.member(id) && st.pgid != 0 {
				return unix.Kill(pid, unix.SIGKILL) == nil
			}
		}
		return false
	}
	defer unix.Close(fd)
	if st, err := readStat(pid); err != nil || !st.member(id) {
		return false
	}
	return unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0) == nil
}

// waitGone waits up to d for the run's processes to be gone, and returns
// how many are left.
func waitGone(id Identity, d time.Duration) int {
	deadline := time.Now().Add(d)
	for {
		n := len(members(id))
		if n == 0 || time.Now().After(deadline) {
			return n
		}
		time.Sleep(10 * time.Millisecond)
	}
}
