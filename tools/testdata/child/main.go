// Command child is the process the process tools' tests run. It is built
// without the race detector, once per test run.
//
//	child argv ARGS...        print ARGS as a JSON array on stdout
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
	case "pwd":
		d, _ := os.Getwd()
		fmt.Print(d)
	default:
		fmt.Fprintln(os.Stderr, "unknown mode", os.Args[1])
		os.Exit(2)
	}
}
