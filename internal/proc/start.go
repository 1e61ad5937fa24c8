package proc

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// StartSpec is a long-running child that a program talks with over its
// standard input and output (an MCP server over stdio), bounded as a run
// is: argv only, exactly its environment, its own process group killed as
// a whole, and RLIMIT_AS and RLIMIT_FSIZE from its first instruction when
// prlimit(1) is installed (else set right after start, see "The prlimit
// race"). Output is not captured: it is the conversation.
type StartSpec struct {
	// Path is the absolute path of the program; Args follow argv[0].
	Path string
	Args []string
	// Dir is the working directory; "" means this process's.
	Dir string
	// Env is the whole environment; nil means an empty one.
	Env []string
	// Stderr receives the child's standard error; nil discards it.
	Stderr io.Writer
	// MaxMemory (RLIMIT_AS) and MaxFileSize (RLIMIT_FSIZE) in bytes; 0 is
	// no limit. A limit that cannot be set refuses the start.
	MaxMemory, MaxFileSize int64
	// Grace is how long Close lets the child exit once its standard input
	// is closed, before it kills the group; default 2s.
	Grace time.Duration
}

// Process is a started StartSpec: Read reads its standard output, Write
// writes its standard input, Close ends it. When the leader exits, on its
// own or killed, what is left of its group is killed before the leader is
// reaped: no process of the group outlives it.
type Process struct {
	Pid int

	stdin, stdout *os.File // our ends
	grace         time.Duration
	k             *killer
	done          chan struct{}
	state         *os.ProcessState
	closeOnce     sync.Once
}

// Start starts spec. The child leads a new process group.
func Start(spec StartSpec) (*Process, error) {
	if spec.Path == "" || spec.Path[0] != '/' {
		return nil, &SpecError{Field: "Path", Reason: "must be an absolute path"}
	}
	if spec.MaxMemory < 0 || spec.MaxFileSize < 0 {
		return nil, &SpecError{Field: "MaxMemory", Reason: "limits are non-negative"}
	}
	if spec.Grace <= 0 {
		spec.Grace = 2 * time.Second
	}
	cmd := exec.Command(spec.Path, spec.Args...)
	if tr := trampoline(); tr != "" && (spec.MaxFileSize > 0 || spec.MaxMemory > 0) {
		var args []string
		if spec.MaxFileSize > 0 {
			args = append(args, "--fsize="+strconv.FormatInt(spec.MaxFileSize, 10))
		}
		if spec.MaxMemory > 0 {
			args = append(args, "--as="+strconv.FormatInt(spec.MaxMemory, 10))
		}
		cmd = exec.Command(tr, append(append(args, "--", spec.Path), spec.Args...)...)
	}
	cmd.Env = append([]string{}, spec.Env...) // never nil: nil would inherit ours
	cmd.Dir = spec.Dir
	cmd.Stderr = spec.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 500 * time.Millisecond // a grandchild that left the group may hold stderr

	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	cmd.Stdin, cmd.Stdout = inR, outW
	err = startChild(cmd)
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, &LaunchError{Kind: KindOther, Command: spec.Path, Reason: spec.Path, Err: err}
	}
	p := &Process{Pid: cmd.Process.Pid, stdin: inW, stdout: outR, grace: spec.Grace, k: &killer{}, done: make(chan struct{})}
	var setupErr error
	for _, l := range []struct {
		resource int
		v        int64
		name     string
	}{{unix.RLIMIT_FSIZE, spec.MaxFileSize, LimitFileSize}, {unix.RLIMIT_AS, spec.MaxMemory, LimitMemory}} {
		if l.v > 0 && setupErr == nil {
			if err := setRlimit(p.Pid, l.resource, l.v); err != nil && !errors.Is(err, unix.ESRCH) {
				setupErr = &UnenforceableError{Limit: l.name, Reason: fmt.Sprintf("prlimit on pid %d: %v", p.Pid, err)}
			}
		}
	}
	p.k.started(p.Pid)
	go func() {
		// Wait for the leader without reaping it, so that its pid, the
		// group's id, cannot be reused while the rest of the group is killed.
		var info unix.Siginfo
		for {
			if err := unix.Waitid(unix.P_PID, p.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil); !errors.Is(err, unix.EINTR) {
				break
			}
		}
		p.k.finish()
		cmd.Wait()
		p.state = cmd.ProcessState
		close(p.done)
	}()
	if setupErr != nil {
		p.Close()
		return nil, setupErr
	}
	return p, nil
}

// Read reads the child's standard output.
func (p *Process) Read(b []byte) (int, error) { return p.stdout.Read(b) }

// Write writes the child's standard input.
func (p *Process) Write(b []byte) (int, error) { return p.stdin.Write(b) }

// Done is closed once the leader has exited and the group was killed.
func (p *Process) Done() <-chan struct{} { return p.done }

// State is how the leader ended, once Done is closed.
func (p *Process) State() *os.ProcessState {
	<-p.done
	return p.state
}

// Close closes the child's standard input, lets it exit within the grace
// period, then kills its group, and waits for it. It may be called more
// than once, from any goroutine.
func (p *Process) Close() error {
	p.closeOnce.Do(func() {
		p.stdin.Close()
		t := time.NewTimer(p.grace)
		select {
		case <-p.done:
		case <-t.C:
			p.k.kill("closed", 0, "")
		}
		t.Stop()
		<-p.done
		p.stdout.Close()
	})
	<-p.done
	return nil
}
