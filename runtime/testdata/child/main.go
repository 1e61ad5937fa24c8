// Command child is the process the runtime's process tests run: it is
// built without the race detector, whose shadow memory would not start
// under a small RLIMIT_AS.
//
//	child alloc MiB        touch MiB of memory in 8 MiB steps, then sleep
//	child write FILE BYTES write BYTES to FILE
//	child fork             start a grandchild that sleeps holding stdout, print its pid, sleep
//	child sleep SECONDS    print "partial", sleep
//	child echo ARGS...     print each argument on its own line
package main

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: child MODE ARGS...")
		os.Exit(2)
	}
	arg := func(i int) int64 {
		if i+2 >= len(os.Args) {
			return 0
		}
		n, _ := strconv.ParseInt(os.Args[i+2], 10, 64)
		return n
	}
	switch os.Args[1] {
	case "alloc":
		var keep [][]byte
		for i := int64(0); i < arg(0)/8; i++ {
			b := make([]byte, 8<<20)
			for j := 0; j < len(b); j += 4096 {
				b[j] = 1
			}
			keep = append(keep, b)
			time.Sleep(time.Millisecond)
		}
		fmt.Println("allocated", len(keep)*8, "MiB")
		time.Sleep(time.Minute)
	case "write":
		f, err := os.Create(os.Args[2])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		buf := make([]byte, 64<<10)
		for left := arg(1); left > 0; {
			k := min(left, int64(len(buf)))
			if _, err := f.Write(buf[:k]); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			left -= k
		}
		if err := f.Close(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	case "fork":
		exe, err := os.Executable()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		g := exec.Command(exe, "sleep", "60")
		g.Stdout = os.Stdout // the very pipe the runner reads
		if err := g.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Printf("gpid=%d\n", g.Process.Pid)
		time.Sleep(time.Minute)
	case "sleep":
		fmt.Println("partial")
		time.Sleep(time.Duration(arg(0)) * time.Second)
	case "echo":
		for _, a := range os.Args[2:] {
			fmt.Println(a)
		}
	default:
		fmt.Fprintln(os.Stderr, "unknown mode", os.Args[1])
		os.Exit(2)
	}
}
