package proc

import (
	"bytes"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// setRlimit sets a hard and soft limit on another process, never on our
// own.
func setRlimit(pid, resource int, v int64) error {
	lim := unix.Rlimit{Cur: uint64(v), Max: uint64(v)}
	return unix.Prlimit(pid, resource, &lim, nil)
}

// watchdog samples the resident memory of every process in a process group
// and calls over once when the sum passes max.
type watchdog struct {
	pgid     int
	max      int64
	interval time.Duration
	over     func(rss int64)
	peak     atomic.Int64
	stop     chan struct{}
	done     chan struct{}
	page     int64
	buf      []byte
}

func startWatchdog(pgid int, max int64, interval time.Duration, over func(int64)) *watchdog {
	w := &watchdog{pgid: pgid, max: max, interval: interval, over: over,
		stop: make(chan struct{}), done: make(chan struct{}),
		page: int64(os.Getpagesize()), buf: make([]byte, 1024)}
	go w.run()
	return w
}

func (w *watchdog) run() {
	defer close(w.done)
	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		rss, members := w.sample()
		if rss > w.peak.Load() {
			w.peak.Store(rss)
		}
		if rss > w.max {
			w.over(rss)
			return
		}
		if members == 0 {
			return // the group is gone
		}
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
	}
}

// halt stops the watchdog and returns the highest sum it saw.
func (w *watchdog) halt() int64 {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
	return w.peak.Load()
}

// sample returns the summed RSS in bytes of the processes of the group and
// how many there are, from /proc/<pid>/stat (field 5 is the process group,
// field 24 the resident set in pages).
func (w *watchdog) sample() (rss int64, members int) {
	d, err := os.Open("/proc")
	if err != nil {
		return 0, 1 // cannot see: keep watching, do not claim the group is gone
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	for _, name := range names {
		if name[0] < '0' || name[0] > '9' {
			continue
		}
		pgid, pages, ok := w.stat(name)
		if !ok || pgid != w.pgid {
			continue
		}
		members++
		rss += pages * w.page
	}
	return rss, members
}

func (w *watchdog) stat(pid string) (pgid int, rssPages int64, ok bool) {
	fd, err := unix.Open("/proc/"+pid+"/stat", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, 0, false
	}
	n, err := unix.Read(fd, w.buf)
	unix.Close(fd)
	if err != nil || n <= 0 {
		return 0, 0, false
	}
	return parseStat(w.buf[:n])
}

// parseStat reads the process group and RSS of a /proc/<pid>/stat line.
// The command name, in parentheses, may hold spaces and parentheses, so
// fields are counted from the last ')'.
func parseStat(b []byte) (pgid int, rssPages int64, ok bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	// After ") ": field 3 (state) is index 0, so field k is index k-3.
	f := bytes.Fields(b[i+1:])
	if len(f) < 22 {
		return 0, 0, false
	}
	g, err1 := strconv.Atoi(string(f[5-3]))
	r, err2 := strconv.ParseInt(string(f[24-3]), 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return g, r, true
}
