// Command toolgate runs tools under RFC-0001 from the command line. See
// `toolgate --help`, and the README for the exit codes.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/toolgate/toolgate/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// The first signal cancels the invocation (recorded ABORTED); restoring
	// the default handler lets a second one end the process at once.
	context.AfterFunc(ctx, stop)
	code := cli.Main(ctx, os.Args[1:], cli.Stdio{In: os.Stdin, Out: os.Stdout, Err: os.Stderr})
	stop()
	os.Exit(code)
}
