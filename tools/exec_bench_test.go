package tools_test

import (
	"context"
	"encoding/json"
	"os/exec"
	"testing"
	"time"

	tgruntime "github.com/toolgate/toolgate/runtime"
)

// BenchmarkExecStatus_True runs `true` through exec_status and
// runtime.Execute (validation, authorization, the state transaction, the
// audit records; the database without fsync), and through a bare os/exec
// Run, alternately in the same loop, and reports both and their ratio:
//
//	go test ./tools -run '^$' -bench ExecStatus_True -benchtime 200x
func BenchmarkExecStatus_True(b *testing.B) {
	truePath, err := exec.LookPath("true")
	if err != nil {
		b.Skip("no true command on this machine")
	}
	rt := openExecRuntime(b, caps(b, "process.exec:true", "filesystem.read"))
	inv := tgruntime.Invocation{Tool: "exec_status", Input: json.RawMessage(`{"command":"true"}`), Principal: "tester"}
	ctx := context.Background()
	var viaExecute, bare time.Duration
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		res, err := rt.Execute(ctx, inv)
		viaExecute += time.Since(start)
		if err != nil || !json.Valid(res.Output) {
			b.Fatal(err)
		}
		start = time.Now()
		if err := exec.Command(truePath).Run(); err != nil {
			b.Fatal(err)
		}
		bare += time.Since(start)
	}
	n := float64(b.N)
	b.ReportMetric(float64(viaExecute.Nanoseconds())/n, "execute-ns/op")
	b.ReportMetric(float64(bare.Nanoseconds())/n, "osexec-ns/op")
	b.ReportMetric(float64(viaExecute)/float64(bare), "ratio")
}
