package proc

import (
	"errors"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// outputPipes are the child's stdout and stderr pipes, which the goroutine
// that runs it reads itself while it waits for the leader (drain): no
// goroutine per stream, no registration with the runtime's poller, as
// os/exec would make for a Cmd.Stdout that is not a file.
type outputPipes struct {
	r [2]int      // our read ends, -1 once closed
	w [2]*os.File // the child's write ends, closed once it has started
}

// newOutputPipes makes the two pipes, close-on-exec on our side (the child
// gets its ends as fds 1 and 2 from os/exec).
func newOutputPipes() (*outputPipes, error) {
	p := &outputPipes{r: [2]int{-1, -1}}
	for i, name := range []string{"stdout", "stderr"} {
		var fds [2]int
		if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
			p.close()
			return nil, os.NewSyscallError("pipe2", err)
		}
		p.r[i], p.w[i] = fds[0], os.NewFile(uintptr(fds[1]), name)
	}
	return p, nil
}

// started closes our copies of the child's ends, so that the read ends see
// EOF once every process holding them has closed them or ended.
func (p *outputPipes) started() {
	for i, f := range p.w {
		if f != nil {
			f.Close()
			p.w[i] = nil
		}
	}
}

// close closes what is still open.
func (p *outputPipes) close() {
	p.started()
	for i, fd := range p.r {
		if fd >= 0 {
			unix.Close(fd)
			p.r[i] = -1
		}
	}
}

// drain copies the pipes into out[0] and out[1] until the leader pid has
// exited and both pipes are at EOF, or until wait after the exit (a process
// that left the group may hold them); exited is called once, as soon as
// the leader has exited (it is a zombie: not reaped, so its pid, the
// group's id, is not reused). It waits in poll(2) on the pipes and on a
// pidfd of the leader; where the kernel has no pidfd (before Linux 5.3), it
// looks at the leader every 10 ms instead.
func (p *outputPipes) drain(pid int, usePidfd bool, out [2]*capture, wait time.Duration, exited func()) {
	defer p.close()
	pidfd := -1
	if usePidfd {
		if fd, err := unix.PidfdOpen(pid, 0); err == nil {
			pidfd = fd
			defer unix.Close(pidfd)
		}
	}
	fds := []unix.PollFd{{Fd: int32(p.r[0]), Events: unix.POLLIN}, {Fd: int32(p.r[1]), Events: unix.POLLIN}, {Fd: int32(pidfd), Events: unix.POLLIN}}
	buf := make([]byte, 32<<10)
	var deadline time.Time // wait after the exit
	done := false          // the leader has exited
	for {
		if done && p.r[0] < 0 && p.r[1] < 0 {
			return
		}
		timeout := -1
		if done {
			left := time.Until(deadline)
			if left <= 0 {
				return
			}
			timeout = int((left + time.Millisecond - 1) / time.Millisecond)
		} else if pidfd < 0 {
			timeout = 10
		}
		if _, err := unix.Poll(fds, timeout); err != nil && !errors.Is(err, unix.EINTR) {
			// Cannot happen with valid descriptors. Stop reading, and close
			// the pipes first, so that a child writing to a full one is not
			// stuck (it gets EPIPE) while we wait for it to exit.
			p.close()
			if !done {
				waitExit(pid)
				exited()
			}
			return
		}
		for i := range 2 {
			if p.r[i] < 0 || fds[i].Revents == 0 {
				continue
			}
			n, err := unix.Read(p.r[i], buf)
			if n > 0 {
				out[i].Write(buf[:n])
			}
			if n == 0 || (err != nil && !errors.Is(err, unix.EINTR) && !errors.Is(err, unix.EAGAIN)) {
				unix.Close(p.r[i])
				p.r[i], fds[i].Fd = -1, -1
			}
		}
		if !done && ((pidfd >= 0 && fds[2].Revents != 0) || (pidfd < 0 && hasExited(pid))) {
			waitExit(pid) // at once: it has exited
			done, deadline, fds[2].Fd = true, time.Now().Add(wait), -1
			exited()
		}
	}
}

// waitExit waits for the leader pid to exit, without reaping it.
func waitExit(pid int) {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			return
		}
	}
}

// hasExited reports whether the leader pid has exited, without reaping it.
func hasExited(pid int) bool {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT|unix.WNOHANG, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return err != nil || info.Signo != 0 // an error: nothing to wait for
	}
}
