package proc_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/toolgate/toolgate/internal/proc"
)

func ExampleRunner_Run() {
	r, err := proc.New(nil) // probes once what this machine can enforce
	if err != nil {
		fmt.Println(err)
		return
	}
	res, err := r.Run(context.Background(), proc.Spec{
		Path:      "echo", // resolved in Options.SearchPath: Env has no PATH
		Args:      []string{"hello;", "$HOME", "never a shell"},
		Env:       []string{"LANG=C"},
		MaxStdout: 64,
		MaxStderr: 64,
		Timeout:   10 * time.Second,
	})
	if err != nil {
		fmt.Println(proc.ErrorType(err), err)
		return
	}
	fmt.Printf("%q exit=%d truncated=%v\n", res.Stdout.Data, res.ExitCode, res.Stdout.Truncated)
	// Output: "hello; $HOME never a shell\n" exit=0 truncated=false
}

func ExampleErrorType() {
	_, err := proc.Run(context.Background(), proc.Spec{Path: "no-such-command-toolgate"})
	fmt.Println(proc.ErrorType(err), errors.Is(err, proc.ErrNotFound))
	// Output: not_found true
}
