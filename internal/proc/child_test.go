package proc_test

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The test binary is also every child process the tests run: TestMain
// switches on PROC_TEST_CHILD before any test runs.
const childVar = "PROC_TEST_CHILD"

func TestMain(m *testing.M) {
	if kind := os.Getenv(childVar); kind != "" {
		os.Exit(child(kind, os.Args[1:]))
	}
	// Orphaned grandchildren are reparented to us, so a test can reap one
	// and see how it died.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "PR_SET_CHILD_SUBREAPER:", err)
		os.Exit(2)
	}
	os.Exit(m.Run())
}

func child(kind string, args []string) int {
	arg := func(i int) int64 {
		if i >= len(args) {
			return 0
		}
		n, _ := strconv.ParseInt(args[i], 10, 64)
		return n
	}
	switch kind {
	case "env":
		fmt.Print(strings.Join(os.Environ(), "\n"))
	case "stdin":
		if _, err := io.Copy(os.Stdout, os.Stdin); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	case "exit":
		fmt.Fprint(os.Stderr, "exiting")
		return int(arg(0))
	case "signal":
		signal.Reset()
		syscall.Kill(os.Getpid(), syscall.SIGTERM)
		time.Sleep(10 * time.Second)
	case "sleep":
		fmt.Println("partial")
		time.Sleep(time.Duration(arg(0)) * time.Second)
	case "fork":
		// A grandchild that sleeps holding our stdout; then wait or exit.
		exe, _ := os.Executable()
		g := exec.Command(exe, "30")
		g.Env = []string{childVar + "=sleep"}
		g.Stdout = os.Stdout // the very pipe the runner reads
		if slices.Contains(args, "escape") {
			g.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // leaves the process group
		}
		if err := g.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Printf("gpid=%d\n", g.Process.Pid)
		if slices.Contains(args, "wait") {
			time.Sleep(60 * time.Second)
		}
	case "flood":
		n := arg(0)
		done := make(chan struct{})
		flood := func(w io.Writer) {
			buf := []byte(strings.Repeat("x", 64<<10))
			for left := n; left > 0; {
				k := min(left, int64(len(buf)))
				w.Write(buf[:k])
				left -= k
			}
			done <- struct{}{}
		}
		go flood(os.Stdout)
		go flood(os.Stderr)
		<-done
		<-done
	case "alloc":
		// Touch memory in 8 MiB steps until arg(0) MiB (0: forever), then sleep.
		var keep [][]byte
		for i := int64(0); arg(0) == 0 || i < arg(0)/8; i++ {
			b := make([]byte, 8<<20)
			for j := 0; j < len(b); j += 4096 {
				b[j] = 1
			}
			keep = append(keep, b)
		}
		fmt.Println("allocated", len(keep)*8, "MiB")
		time.Sleep(60 * time.Second)
	case "forkalloc":
		// arg(0) grandchildren, each touching arg(1) MiB then sleeping.
		exe, _ := os.Executable()
		for range arg(0) {
			g := exec.Command(exe, strconv.FormatInt(arg(1), 10))
			g.Env = []string{childVar + "=alloc"}
			g.Stdout, g.Stderr = os.Stdout, os.Stderr
			if err := g.Start(); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
		}
		time.Sleep(60 * time.Second)
	case "write":
		// Write arg(1) bytes to the file args[0].
		f, err := os.Create(args[0])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		buf := make([]byte, 64<<10)
		for left := arg(1); left > 0; {
			k := min(left, int64(len(buf)))
			if _, err := f.Write(buf[:k]); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			left -= k
		}
		f.Close()
	case "runner":
		// Run a "fork wait" child through proc, print its identity, and
		// wait for it: a toolgate process running a tool, to be killed.
		return runner(args)
	case "threadchurn":
		// Run a child while other goroutines end their threads, and say
		// how it ended.
		return threadChurn()
	case "threadstart":
		// Start a sleeping child from a goroutine locked to its thread,
		// which then returns locked: the runtime ends that thread.
		return threadStart()
	default:
		fmt.Fprintln(os.Stderr, "unknown child", kind)
		return 99
	}
	return 0
}
