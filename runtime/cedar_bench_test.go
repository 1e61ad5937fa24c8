package runtime_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/capability"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
)

// cedar100 is a policy set of 100 rules: forbids on the input, on the
// principal's group and on its token's claims, and @approval rules. With
// spread, they are over 25 tools, four each (test.echo's among them);
// without, all 100 are over test.echo, so that a call of it evaluates
// every one (the worst case: a rule for another tool is not evaluated).
func cedar100(tb testing.TB, spread bool) *capability.Policy {
	tb.Helper()
	var b strings.Builder
	for i := range 100 {
		tool := "test.echo"
		if spread && i/4 > 0 {
			tool = fmt.Sprintf("test.t%d", i/4)
		}
		fmt.Fprintf(&b, "@id(\"rule-%d\")\n", i)
		switch i % 4 {
		case 0:
			fmt.Fprintf(&b, "forbid(principal, action in Toolgate::Action::%q, resource) when { context.input.msg == \"blocked-%d\" };\n", tool, i)
		case 1:
			fmt.Fprintf(&b, "@approval(\"finance\")\nforbid(principal, action == Toolgate::Action::\"%s@1.0.0\", resource) when { context.input.msg like \"refund-%d-*\" };\n", tool, i)
		case 2:
			fmt.Fprintf(&b, "forbid(principal in Toolgate::Group::\"interns\", action in Toolgate::Action::%q, resource) when { context.input.msg == \"x%d\" };\n", tool, i)
		case 3:
			fmt.Fprintf(&b, "forbid(principal, action in [Toolgate::Action::%q], resource) when { principal.claims has team && principal.claims.team.contains(\"t%d\") };\n", tool, i)
		}
	}
	dir := tb.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rules.cedar"), []byte(b.String()), 0o600); err != nil {
		tb.Fatal(err)
	}
	pj := `{"version": 1, "principals": {"tester": ["state.write:test"]}, "cedar": ["rules.cedar"], "groups": {"finance": ["fiona"], "interns": ["ian"]}}`
	if err := os.WriteFile(filepath.Join(dir, "policy.json"), []byte(pj), 0o600); err != nil {
		tb.Fatal(err)
	}
	p, err := capability.LoadPolicy(filepath.Join(dir, "policy.json"))
	if err != nil {
		tb.Fatal(err)
	}
	if n := p.Rules().Len(); n != 100 {
		tb.Fatalf("%d rules", n)
	}
	return p
}

// benchRegistry holds test.echo and test.t1 to test.t24.
func benchRegistry(tb testing.TB) *tools.Registry {
	reg := registry(tb)
	for i := 1; i < 25; i++ {
		if err := reg.Register(echo(fmt.Sprintf("test.t%d", i))); err != nil {
			tb.Fatal(err)
		}
	}
	return reg
}

// BenchmarkCedar measures what a policy set of 100 rules adds to a call,
// in the same run as the call without Cedar: the decision alone
// (Runtime.DecideFor, the decision Execute makes at AUTHORIZED) and a whole
// Execute (nosync); cedar100 spreads the rules over 25 tools,
// cedar100-onetool puts all of them on the tool called. The issue's
// bound: at most 20µs more per decision.
//
//	go test -run '^$' -bench BenchmarkCedar -benchtime 20000x -count 3 ./runtime
func BenchmarkCedar(b *testing.B) {
	plain, err := capability.NewPolicy(grantAll)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		policy *capability.Policy
	}{{"none", plain}, {"cedar100", cedar100(b, true)}, {"cedar100-onetool", cedar100(b, false)}} {
		rt, err := tgruntime.Open(filepath.Join(b.TempDir(), "b.db"), &tgruntime.Options{Registry: benchRegistry(b), Policy: c.policy, NoSync: true})
		if err != nil {
			b.Fatal(err)
		}
		e, err := rt.Registry().Lookup("test.echo", "")
		if err != nil {
			b.Fatal(err)
		}
		inv := invoke("test.echo", `{"msg":"hello"}`)
		if d := rt.Decide(inv.Principal, e, inv.Input, nil); !d.Allowed() {
			b.Fatalf("%s: denied: %s", c.name, d.Reason)
		}
		b.Run("decide/"+c.name, func(b *testing.B) {
			b.ReportAllocs()
			cpu := cpuClock(b)
			for b.Loop() {
				if d := rt.Decide(inv.Principal, e, inv.Input, nil); !d.Allowed() {
					b.Fatal(d.Reason)
				}
			}
			cpu()
		})
		b.Run("execute/"+c.name, func(b *testing.B) {
			b.ReportAllocs()
			cpu := cpuClock(b)
			for b.Loop() {
				if _, err := rt.Execute(context.Background(), inv); err != nil {
					b.Fatal(err)
				}
			}
			cpu()
		})
		rt.Close(context.Background())
	}
}

// cpuClock starts counting the process's CPU time (user and system); the
// function it returns reports it per operation as cpu-ns/op. On a machine
// shared with other work, wall time (ns/op) counts the time the benchmark
// waited for a CPU; CPU time does not.
func cpuClock(b *testing.B) func() {
	start := cpuNow()
	return func() {
		b.ReportMetric(float64(cpuNow()-start)/float64(b.N), "cpu-ns/op")
	}
}

func cpuNow() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
