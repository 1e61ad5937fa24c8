package tools_test

import (
	"context"
	"encoding/json"
	"os/exec"
	"syscall"
	"testing"
	"time"

	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
)

// BenchmarkExecStatus_True runs `true` through exec_status and
// runtime.Execute (validation, authorization, the state transaction, the
// audit records; the database without fsync), and through a bare os/exec
// Run, alternately in the same loop, and reports both and their ratio:
//
//	go test ./tools -run '^$' -bench ExecStatus_True -benchtime 300x -count 5
//
// Between the two, untimed, it waits for what a call leaves in the
// background (the removal of the process's fresh working directory, the
// spare being made for the next call), so that this work is not counted
// in the bare run's time; bg-ns/op is how long that wait took. The
// -cpu-ns/op figures are the CPU time of this process (user and system,
// getrusage) in each part: steadier than wall time on a busy machine, and
// work moved to the background still counts in bg-cpu-ns/op (or in
// execute-cpu-ns/op, when it runs during the call).
func BenchmarkExecStatus_True(b *testing.B) {
	truePath, err := exec.LookPath("true")
	if err != nil {
		b.Skip("no true command on this machine")
	}
	rt := openExecRuntime(b, caps(b, "process.exec:true", "filesystem.read"))
	inv := tgruntime.Invocation{Tool: "exec_status", Input: json.RawMessage(`{"command":"true"}`), Principal: "tester"}
	ctx := context.Background()
	var viaExecute, bare, background, cpuExecute, cpuBare, cpuBackground time.Duration
	b.ResetTimer()
	for b.Loop() {
		start, cpu := time.Now(), cpuTime()
		res, err := rt.Execute(ctx, inv)
		viaExecute += time.Since(start)
		cpuExecute += cpuTime() - cpu
		if err != nil || !json.Valid(res.Output) {
			b.Fatal(err)
		}
		start, cpu = time.Now(), cpuTime()
		tools.WaitBackgroundDirs()
		background += time.Since(start)
		cpuBackground += cpuTime() - cpu
		start, cpu = time.Now(), cpuTime()
		if err := exec.Command(truePath).Run(); err != nil {
			b.Fatal(err)
		}
		bare += time.Since(start)
		cpuBare += cpuTime() - cpu
	}
	n := float64(b.N)
	b.ReportMetric(float64(viaExecute.Nanoseconds())/n, "execute-ns/op")
	b.ReportMetric(float64(bare.Nanoseconds())/n, "osexec-ns/op")
	b.ReportMetric(float64(background.Nanoseconds())/n, "bg-ns/op")
	b.ReportMetric(float64(cpuExecute.Nanoseconds())/n, "execute-cpu-ns/op")
	b.ReportMetric(float64(cpuBare.Nanoseconds())/n, "osexec-cpu-ns/op")
	b.ReportMetric(float64(cpuBackground.Nanoseconds())/n, "bg-cpu-ns/op")
	b.ReportMetric(float64(viaExecute)/float64(bare), "ratio")
}

// cpuTime is the user and system CPU time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
