package proc

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ownCgroup2 returns the directory of this process's cgroup in the cgroup
// v2 hierarchy, from the contents of /proc/self/cgroup and
// /proc/self/mountinfo.
func ownCgroup2(selfCgroup, mountinfo string) (string, error) {
	var rel string
	found := false
	for line := range strings.Lines(selfCgroup) {
		if p, ok := strings.CutPrefix(strings.TrimSpace(line), "0::"); ok {
			rel, found = p, true
			break
		}
	}
	if !found {
		return "", errors.New("this process has no cgroup v2 membership (no 0:: line in /proc/self/cgroup)")
	}
	for line := range strings.Lines(mountinfo) {
		// id parent maj:min root mountpoint options [optional...] - fstype source superoptions
		pre, post, ok := strings.Cut(strings.TrimSpace(line), " - ")
		if !ok {
			continue
		}
		if fstype, _, _ := strings.Cut(post, " "); fstype != "cgroup2" {
			continue
		}
		f := strings.Fields(pre)
		if len(f) < 5 {
			continue
		}
		root, mnt := unescapeMount(f[3]), unescapeMount(f[4])
		sub := rel
		if root != "/" {
			var ok bool
			if sub, ok = strings.CutPrefix(rel, root); !ok || (sub != "" && sub[0] != '/') {
				continue // this mount does not show our cgroup
			}
		}
		return filepath.Join(mnt, sub), nil
	}
	return "", errors.New("no cgroup2 filesystem is mounted")
}

// unescapeMount undoes the octal escapes of /proc/self/mountinfo (\040 for
// a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// checkCgroupParent reports whether per-run child cgroups with memory.max
// can be made under dir, and why not.
func checkCgroupParent(dir string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	if st.Type != unix.CGROUP2_SUPER_MAGIC {
		return fmt.Errorf("%s is not on a cgroup2 filesystem", dir)
	}
	controllers, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return err
	}
	if !slices.Contains(strings.Fields(string(controllers)), "memory") {
		return fmt.Errorf("the memory controller is not available in %s (controllers: %q); on a cgroup v1 or hybrid machine memory is managed by v1",
			dir, strings.TrimSpace(string(controllers)))
	}
	subtree, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	if err != nil {
		return err
	}
	if !slices.Contains(strings.Fields(string(subtree)), "memory") {
		return fmt.Errorf("memory is not enabled for children of %s (cgroup.subtree_control: %q); delegate a cgroup with +memory in its subtree_control and give it as Options.CgroupParent",
			dir, strings.TrimSpace(string(subtree)))
	}
	if err := unix.Access(dir, unix.W_OK); err != nil {
		return fmt.Errorf("%s is not writable: %w", dir, err)
	}
	return nil
}

// cgroup is the child cgroup of one run.
type cgroup struct {
	dir string
	fd  int // an open descriptor of dir, for SysProcAttr.CgroupFD
}

// newCgroup makes a child cgroup under parent. If memMax > 0 it sets
// memory.max, turns swap off for it where the kernel has swap accounting,
// and asks the kernel to kill the whole cgroup on an OOM.
func newCgroup(parent string, memMax int64) (_ *cgroup, err error) {
	var rnd [8]byte
	_, _ = rand.Read(rnd[:]) // never fails (crypto/rand)
	dir := filepath.Join(parent, "toolgate-proc-"+hex.EncodeToString(rnd[:]))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = unix.Rmdir(dir)
		}
	}()
	if memMax > 0 {
		if err := writeCgroupFile(dir, "memory.max", strconv.FormatInt(memMax, 10)); err != nil {
			return nil, err
		}
		for _, f := range []string{"memory.swap.max", "memory.oom.group"} {
			v := "0"
			if f == "memory.oom.group" {
				v = "1"
			}
			if err := writeCgroupFile(dir, f, v); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil, err
			}
		}
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", dir, err)
	}
	return &cgroup{dir: dir, fd: fd}, nil
}

func writeCgroupFile(dir, name, value string) error {
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// events reads a counter of memory.events ("oom_kill", "max", ...).
func (c *cgroup) events(key string) (int64, error) {
	f, err := os.Open(filepath.Join(c.dir, "memory.events"))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return parseKeyed(bufio.NewScanner(f), key)
}

func parseKeyed(sc *bufio.Scanner, key string) (int64, error) {
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if ok && k == key {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no %q counter", key)
}

// peak reads memory.peak (Linux 5.19+), or 0.
func (c *cgroup) peak() int64 {
	b, err := os.ReadFile(filepath.Join(c.dir, "memory.peak"))
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n
}

// kill SIGKILLs every process in the cgroup: cgroup.kill (Linux 5.14+),
// else each pid of cgroup.procs.
func (c *cgroup) kill() error {
	err := writeCgroupFile(c.dir, "cgroup.kill", "1")
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	b, err := os.ReadFile(filepath.Join(c.dir, "cgroup.procs"))
	if err != nil {
		return err
	}
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
	}
	return nil
}

// remove kills what is left in the cgroup and removes it. The kernel
// refuses to remove a cgroup while a dying process is still in it, so it
// retries for up to a second.
func (c *cgroup) remove() error {
	_ = unix.Close(c.fd)
	var err error
	for range 100 {
		if err = unix.Rmdir(c.dir); err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) {
			break
		}
		_ = c.kill()
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("proc: remove cgroup %s: %w", c.dir, err)
}
