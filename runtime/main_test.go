package runtime_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/toolgate/toolgate/internal/testchild"
)

// TestMain fails a suite that passed when goroutines are left once every
// test has ended (goleak retries for a while, so goroutines that are
// ending are not counted): a runtime, store or tool that does not stop
// what it started. It then removes the test child program.
//
// One goroutine is meant to stay: the one that forks every process tool's
// child from a thread that lives as long as the process, so that the
// child's parent-death signal fires only when toolgate dies
// (internal/proc, spawn.go).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/toolgate/toolgate/internal/proc.spawner"), goleak.Cleanup(func(code int) {
		testchild.Cleanup()
		os.Exit(code)
	}))
}
