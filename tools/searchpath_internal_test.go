package tools

import (
	"context"
	"testing"

	"github.com/toolgate/toolgate/capability"
)

// A registry tool with its own search path runs its program through an Env
// derived from the attempt's: the process is still recorded for recovery
// (OnProcessStart) and observed (OnProcess).
func TestWithSearchPath_KeepsTheProcessHooks(t *testing.T) {
	var started, ended, observed int
	e := &Env{
		Grants:         []capability.Capability{capability.MustParse("process.exec:true")},
		OnProcess:      func(*ProcessResult) { observed++ },
		OnProcessStart: func(RunningProcess) func() { started++; return func() { ended++ } },
	}
	sub := e.withSearchPath("/usr/bin:/bin")
	defer sub.Close()
	if _, err := sub.Run(context.Background(), Command{Name: "true"}); err != nil {
		t.Fatal(err)
	}
	WaitProcessDirs()
	if started != 1 || ended != 1 || observed != 1 {
		t.Fatalf("started %d, ended %d, observed %d; want 1 each", started, ended, observed)
	}
}
