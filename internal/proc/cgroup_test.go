package proc

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestOwnCgroup2(t *testing.T) {
	const (
		hybridCgroup = "4:memory:/x\n1:cpu:/\n0::/user.slice/session-1.scope\n"
		hybridMounts = "30 25 0:26 / /sys/fs/cgroup/unified rw,nosuid shared:10 - cgroup2 cgroup2 rw,nsdelegate\n" +
			"31 25 0:27 / /sys/fs/cgroup/memory rw shared:11 - cgroup cgroup rw,memory\n"
		unifiedMounts = "35 24 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw\n"
		// In a container whose mount shows a sub-tree of the hierarchy.
		subtreeMounts = "600 500 0:30 /docker/abc /sys/fs/cgroup ro,nosuid - cgroup2 cgroup rw\n"
		spaceMounts   = "35 24 0:30 / /mnt/cg\\040v2 rw - cgroup2 cgroup2 rw\n"
	)
	for _, tc := range []struct {
		name, self, mounts, want string
	}{
		{"hybrid", hybridCgroup, hybridMounts, "/sys/fs/cgroup/unified/user.slice/session-1.scope"},
		{"unified", "0::/system.slice/toolgate.service\n", unifiedMounts, "/sys/fs/cgroup/system.slice/toolgate.service"},
		{"root", "0::/\n", unifiedMounts, "/sys/fs/cgroup"},
		{"mount root", "0::/docker/abc/app\n", subtreeMounts, "/sys/fs/cgroup/app"},
		{"escaped mount point", "0::/a\n", spaceMounts, "/mnt/cg v2/a"},
		{"no v2 membership", "4:memory:/x\n", hybridMounts, ""},
		{"no cgroup2 mount", "0::/a\n", "31 25 0:27 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n", ""},
		{"mount shows another tree", "0::/other\n", subtreeMounts, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ownCgroup2(tc.self, tc.mounts)
			if tc.want == "" {
				if err == nil {
					t.Fatalf("ownCgroup2 = %q, want an error", got)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ownCgroup2 = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestParseKeyed(t *testing.T) {
	events := "low 0\nhigh 0\nmax 12\noom 2\noom_kill 1\noom_group_kill 1\n"
	for key, want := range map[string]int64{"oom_kill": 1, "max": 12, "low": 0} {
		if got, err := parseKeyed(bufio.NewScanner(strings.NewReader(events)), key); err != nil || got != want {
			t.Errorf("%s = %d, %v; want %d", key, got, err, want)
		}
	}
	if _, err := parseKeyed(bufio.NewScanner(strings.NewReader(events)), "oom_kil"); err == nil {
		t.Error("a missing key parsed")
	}
}

func TestParseStat(t *testing.T) {
	// A command name with spaces and a parenthesis; pgrp 4242, rss 1234.
	line := "4243 (a b) c) S 4242 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 123 456789 1234 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0\n"
	pgid, rss, ok := parseStat([]byte(line))
	if !ok || pgid != 4242 || rss != 1234 {
		t.Errorf("parseStat = %d, %d, %v; want 4242, 1234, true", pgid, rss, ok)
	}
	if _, _, ok := parseStat([]byte("12 (x) S 1 2")); ok {
		t.Error("a short line parsed")
	}
}

func TestScanner(t *testing.T) {
	s := newScanner(markOOM)
	// The phrase is split across writes, after a long unkept stream.
	s.write([]byte(strings.Repeat("x", 100000) + "fatal error: runtime: out of mem"))
	if s.found[markOOM] != "" {
		t.Fatal("found before the phrase was complete")
	}
	s.write([]byte("o"))
	s.write([]byte("ry\n"))
	if s.found[markOOM] != "out of memory" {
		t.Errorf("found %q", s.found[markOOM])
	}
	s = newScanner(markEFBIG)
	s.write([]byte("write /tmp/x: file too large"))
	if s.found[markEFBIG] == "" || s.found[markOOM] != "" {
		t.Errorf("found %q", s.found)
	}
}

// writableCgroup2 returns this process's cgroup v2 directory if it can hold
// child cgroups (the memory controller is not needed), else skips.
func writableCgroup2(t *testing.T) string {
	t.Helper()
	self, err1 := os.ReadFile("/proc/self/cgroup")
	mounts, err2 := os.ReadFile("/proc/self/mountinfo")
	if err1 != nil || err2 != nil {
		t.Skipf("cgroup mechanics not tested: cannot read /proc/self: %v %v", err1, err2)
	}
	dir, err := ownCgroup2(string(self), string(mounts))
	if err != nil {
		t.Skipf("cgroup mechanics not tested: %v", err)
	}
	if err := unix.Access(dir, unix.W_OK); err != nil {
		t.Skipf("cgroup mechanics not tested: %s not writable: %v", dir, err)
	}
	// A parent of the test's own, so that what it leaves behind is its own
	// (other test processes may share ours).
	var rnd [8]byte
	rand.Read(rnd[:])
	mine := filepath.Join(dir, "toolgate-test-"+hex.EncodeToString(rnd[:]))
	if err := os.Mkdir(mine, 0o755); err != nil {
		t.Skipf("cgroup mechanics not tested: cannot make a cgroup under %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Rmdir(mine); err != nil {
			t.Errorf("removing the test's cgroup %s: %v (something was left in it)", mine, err)
		}
	})
	return mine
}

// The cgroup path without the memory controller, which this machine may
// lack: a run started into its own cgroup (CLONE_INTO_CGROUP), a timeout
// that kills through cgroup.kill a grandchild that left the process group,
// and the cgroup removed after.
func TestRun_CgroupMechanics(t *testing.T) {
	parent := writableCgroup2(t)
	cg, err := newCgroup(parent, 0)
	if err != nil {
		t.Skipf("cgroup mechanics not tested: cannot make a child cgroup under %s: %v", parent, err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(nil)
	if err != nil {
		t.Fatal(err)
	}
	spec := &Spec{Path: exe, Args: []string{"escape", "wait"}, Env: []string{"PROC_TEST_CHILD=fork"},
		MaxStdout: 4096, Timeout: 500 * time.Millisecond}
	res, err := r.run(context.Background(), spec, exe, "absolute path", "", cg)
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("err = %v, want a timeout", err)
	}
	m := regexp.MustCompile(`gpid=(\d+)`).FindSubmatch(res.Stdout.Data)
	if m == nil {
		t.Fatalf("no gpid in %q", res.Stdout.Data)
	}
	gpid, _ := strconv.Atoi(string(m[1]))
	// The grandchild called setsid: kill(-pgid) missed it, cgroup.kill did not.
	var ws unix.WaitStatus
	for i := 0; ; i++ {
		if got, err := unix.Wait4(gpid, &ws, unix.WNOHANG, nil); err != nil || got == gpid {
			if err != nil {
				t.Fatalf("wait4(%d): %v", gpid, err)
			}
			break
		}
		if i == 500 {
			unix.Kill(gpid, unix.SIGKILL)
			t.Fatalf("the grandchild that left the group survived the cgroup kill")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if ws.Signal() != syscall.SIGKILL {
		t.Errorf("grandchild ended with %v", ws)
	}
	if err := cg.remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(cg.dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cgroup %s not removed: %v", cg.dir, err)
	}
}

// The child really starts inside the new cgroup.
func TestNewCgroup_CloneInto(t *testing.T) {
	parent := writableCgroup2(t)
	cg, err := newCgroup(parent, 0)
	if err != nil {
		t.Skipf("cgroup mechanics not tested: cannot make a child cgroup under %s: %v", parent, err)
	}
	defer cg.remove()
	r, err := New(nil)
	if err != nil {
		t.Fatal(err)
	}
	spec := &Spec{Path: "/bin/cat", Args: []string{"/proc/self/cgroup"}, MaxStdout: 4096}
	res, err := r.run(context.Background(), spec, "/bin/cat", "absolute path", "", cg)
	if err != nil {
		t.Fatal(err)
	}
	rel := "/" + filepath.Base(cg.dir)
	if !strings.Contains(string(res.Stdout.Data), "0::") || !strings.Contains(string(res.Stdout.Data), rel+"\n") {
		t.Errorf("child's /proc/self/cgroup = %q, want it in %s", res.Stdout.Data, rel)
	}
}

// A memory limit through a cgroup that cannot take memory.max is refused,
// not skipped.
func TestRun_CgroupSetupFailureRefuses(t *testing.T) {
	parent := writableCgroup2(t)
	if checkCgroupParent(parent) == nil {
		t.Skip("the memory controller is available here; TestRun_CgroupMemory covers it")
	}
	r, err := New(nil)
	if err != nil {
		t.Fatal(err)
	}
	r.caps.Memory, r.caps.CgroupParent = MemoryCgroup, parent // pretend Probe said yes
	res, err := r.Run(context.Background(), Spec{Path: "true", MaxMemory: 64 << 20})
	var ue *UnenforceableError
	if !errors.As(err, &ue) || res != nil {
		t.Fatalf("Run = %v, %v; want an *UnenforceableError", res, err)
	}
	left, _ := filepath.Glob(filepath.Join(parent, "toolgate-proc-*"))
	if len(left) != 0 {
		t.Errorf("cgroups left behind: %v", left)
	}
}

// The real thing, where a cgroup v2 memory controller is delegated to us.
func TestRun_CgroupMemory(t *testing.T) {
	r, err := New(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := r.Capabilities()
	if c.Memory != MemoryCgroup {
		t.Skipf("no writable cgroup v2 memory controller here, so the prlimit path is what runs: %s", c.CgroupMemory.Detail)
	}
	const limit = 64 << 20
	res, err := r.Run(context.Background(), Spec{Path: "sort", Args: []string{"/dev/zero"}, MaxMemory: limit, MaxStderr: 4096, Timeout: 10 * time.Second})
	if !errors.Is(err, ErrMemoryLimit) || res.Memory != MemoryCgroup || !strings.Contains(res.Evidence, "oom_kill") {
		t.Fatalf("err = %v, result %+v; want memory_limit from the cgroup's oom_kill", err, res)
	}
	left, _ := filepath.Glob(filepath.Join(c.CgroupParent, "toolgate-proc-*"))
	if len(left) != 0 {
		t.Errorf("cgroups left behind: %v", left)
	}
}
