package proc

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Capabilities says which limits this machine lets a Runner enforce, and
// how. It is what a `toolgate doctor` shows.
type Capabilities struct {
	ProcessGroups Support // new process group per run, killed as a whole
	Prlimit       Support // prlimit(2) on the child: RLIMIT_FSIZE, RLIMIT_AS
	RSSWatchdog   Support // /proc readable: the process group's resident memory can be sampled
	CgroupMemory  Support // cgroup v2 memory.max on a child cgroup per run
	CgroupParent  string  // where per-run cgroups are made; "" if CgroupMemory is not OK
	// Memory is the method Run uses for Spec.MaxMemory: MemoryCgroup,
	// MemoryPrlimit, or "" if neither works (Run then refuses, unless the
	// spec accepts the best-effort MemoryWatchdog).
	Memory string
}

// Support is whether one mechanism is usable, and why or why not.
type Support struct {
	OK     bool
	Detail string
}

// Memory enforcement methods, as reported in Capabilities.Memory and
// Result.Memory.
const (
	MemoryCgroup   = "cgroup2"          // memory.max on a per-run child cgroup; OOM kills counted by the kernel
	MemoryPrlimit  = "prlimit+watchdog" // RLIMIT_AS on the child plus the group RSS watchdog
	MemoryWatchdog = "watchdog"         // the RSS watchdog alone (Spec.BestEffortMemory)
)

// Probe finds out which limits can be enforced here. It reads
// /proc/self/cgroup, /proc/self/mountinfo and the candidate cgroup's control
// files; it changes nothing. A nil opts means DefaultOptions.
func Probe(opts *Options) Capabilities {
	if opts == nil {
		opts = DefaultOptions()
	}
	var c Capabilities
	c.ProcessGroups = Support{OK: true, Detail: "setpgid at fork; the group is killed with kill(-pgid, SIGKILL)"}

	var lim unix.Rlimit
	if err := unix.Prlimit(0, unix.RLIMIT_FSIZE, nil, &lim); err != nil {
		c.Prlimit = Support{Detail: fmt.Sprintf("prlimit(2) unusable: %v", err)}
	} else {
		c.Prlimit = Support{OK: true, Detail: "prlimit(2) on the child right after it starts (RLIMIT_AS, RLIMIT_FSIZE)"}
		if tr := trampoline(); tr != "" {
			c.Prlimit.Detail = "RLIMIT_AS and RLIMIT_FSIZE set before the command runs, by " + tr + " (util-linux), and again with prlimit(2) once it started"
		}
	}
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		c.RSSWatchdog = Support{Detail: fmt.Sprintf("/proc unreadable: %v", err)}
	} else {
		c.RSSWatchdog = Support{OK: true, Detail: fmt.Sprintf("/proc/<pid>/stat of the process group, every %v", opts.WatchdogInterval)}
	}

	switch {
	case opts.NoCgroup:
		c.CgroupMemory = Support{Detail: "disabled by Options.NoCgroup"}
	default:
		parent := opts.CgroupParent
		if parent == "" {
			self, err1 := os.ReadFile("/proc/self/cgroup")
			mounts, err2 := os.ReadFile("/proc/self/mountinfo")
			if err1 != nil || err2 != nil {
				c.CgroupMemory = Support{Detail: fmt.Sprintf("cannot read /proc/self/cgroup or mountinfo: %v %v", err1, err2)}
				break
			}
			p, err := ownCgroup2(string(self), string(mounts))
			if err != nil {
				c.CgroupMemory = Support{Detail: err.Error()}
				break
			}
			parent = p
		}
		if err := checkCgroupParent(parent); err != nil {
			c.CgroupMemory = Support{Detail: err.Error()}
			break
		}
		c.CgroupMemory = Support{OK: true, Detail: "memory.max on a child cgroup of " + parent + " per run, started into it with CLONE_INTO_CGROUP"}
		c.CgroupParent = parent
	}

	switch {
	case c.CgroupMemory.OK:
		c.Memory = MemoryCgroup
	case c.Prlimit.OK && c.RSSWatchdog.OK:
		c.Memory = MemoryPrlimit
	}
	return c
}
