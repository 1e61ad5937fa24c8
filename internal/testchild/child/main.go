// Command child is the process the tests of process tools and limits run
// (see package testchild). It is built without the race detector, whose
// shadow memory would not start under a small RLIMIT_AS, once per test run.
//
//	child argv ARGS...        print ARGS as a JSON array on stdout
//	child echo ARGS...        print each argument on its own line
//	child alloc MIB           touch MIB of memory in 8 MiB steps, then sleep
//	child write FILE BYTES    write BYTES to FILE
//	child env                 print the environment, one entry a line, sorted
//	child cat                 copy stdin to stdout
//	child exit CODE MESSAGE   print MESSAGE on stderr, exit with CODE
//	child flood BYTES         write BYTES to stdout and to stderr at once
//	child sleep SECONDS       print "partial", sleep
//	child pwd                 print the working directory
//	child fork                start a grandchild that sleeps holding stdout, print its pid, sleep
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: child MODE ARGS...")
		os.Exit(2)
	}
	num := func(i int) int64 {
		if len(os.Args) <= i {
			return 0
		}
		n, _ := strconv.ParseInt(os.Args[i], 10, 64)
		return n
	}
	switch os.Args[1] {
	case "argv":
		b, _ := json.Marshal(append([]string{}, os.Args[2:]...))
		os.Stdout.Write(b)
	case "env":
		env := os.Environ()
		slices.Sort(env)
		for _, e := range env {
			fmt.Println(e)
		}
	case "cat":
		io.Copy(os.Stdout, os.Stdin)
	case "exit":
		if len(os.Args) > 3 {
			fmt.Fprintln(os.Stderr, os.Args[3])
		}
		os.Exit(int(num(2)))
	case "flood":
		var wg sync.WaitGroup
		for _, f := range []*os.File{os.Stdout, os.Stderr} {
			wg.Go(func() {
				buf := make([]byte, 64<<10)
				for i := range buf {
					buf[i] = 'x'
				}
				for left := num(2); left > 0; {
					k := min(left, int64(len(buf)))
					if _, err := f.Write(buf[:k]); err != nil {
						os.Exit(3)
					}
					left -= k
				}
			})
		}
		wg.Wait()
	case "sleep":
		fmt.Println("partial")
		time.Sleep(time.Duration(num(2)) * time.Second)
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
	case "echo":
		for _, a := range os.Args[2:] {
			fmt.Println(a)
		}
	case "alloc":
		var keep [][]byte
		for i := int64(0); i < num(2)/8; i++ {
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
		if len(os.Args) < 4 {
			fmt.Fprintln(os.Stderr, "usage: child write FILE BYTES")
			os.Exit(2)
		}
		f, err := os.Create(os.Args[2])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		buf := make([]byte, 64<<10)
		for left := num(3); left > 0; {
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
	case "pwd":
		d, _ := os.Getwd()
		fmt.Print(d)
	default:
		fmt.Fprintln(os.Stderr, "unknown mode", os.Args[1])
		os.Exit(2)
	}
}
