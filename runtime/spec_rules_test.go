package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	goruntime "runtime"
	"runtime/debug"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/lifecycle"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
	"github.com/toolgate/toolgate/txn"
)

// RFC-0001 §5.1 rule 4: a transaction that cannot begin ends the invocation
// with a StateError, and the tool does not run. The store refuses the
// claim's update here because it was closed under the runtime (below the
// runtime's API, after the runtime's own checks): nothing is written, so
// the database holds no record, no claim and no audit event of the call.
func TestExecute_TransactionCannotBegin(t *testing.T) {
	var runs atomic.Int32
	counted := tool(decl("test.counted"), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
		runs.Add(1)
		return in, env.State.Put("test", "last", []byte(in.Msg))
	})
	rt, path := openRuntime(t, nil, counted)
	if err := tgruntime.StoreOf(rt).Close(); err != nil {
		t.Fatal(err)
	}

	res, err := rt.Execute(context.Background(), invoke("test.counted", `{"msg":"x"}`))
	var se *tgruntime.StateError
	if !errors.As(err, &se) || se.Op != "begin" || !errors.Is(err, txn.ErrClosed) || !errors.Is(err, tgruntime.ErrState) {
		t.Fatalf("err = %v; want a StateError of op begin wrapping the store's refusal", err)
	}
	if n := runs.Load(); n != 0 {
		t.Fatalf("the tool ran %d times without a transaction", n)
	}
	if res == nil || res.State == lifecycle.Completed || len(res.Output) != 0 || res.Error == nil || res.Error.Type != "StateError" {
		t.Fatalf("result %+v; want an attempt ended by the StateError, with no output", res)
	}
	if len(res.Attempts) != 1 {
		t.Fatalf("%d attempts; a StateError is never retried", len(res.Attempts))
	}
	for _, tr := range res.Attempts[0].Transitions {
		if tr.To == lifecycle.Executing {
			t.Fatalf("the attempt reached EXECUTING without a transaction: %+v", res.Attempts[0].Transitions)
		}
	}

	// Nothing reached the file.
	rt.Close(context.Background())
	rt2, err := tgruntime.Open(path, &tgruntime.Options{Registry: registry(t), Grants: grantAll, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rt2.Close(context.Background())
	if recs, err := rt2.Executions(context.Background(), txn.Filter{}); err != nil || len(recs) != 0 {
		t.Fatalf("records after a refused begin: %+v, %v", recs, err)
	}
	if log, err := rt2.AuditLog(context.Background(), 0, 0); err != nil || len(log) != 0 {
		t.Fatalf("audit events after a refused begin: %d, %v", len(log), err)
	}
	if v, ok := stateOf(t, rt2); ok {
		t.Fatalf("state written: %q", v)
	}
}

// RFC-0001 §7.2.3: every attempt releases what it acquired. The open file
// descriptors of this process are counted before and after many attempts
// of every ending (completed, tool error, panic, timeout, a handle's
// refusal, and process tools: a non-zero exit, a timeout_seconds kill, a
// command that cannot start). Each attempt opens a filesystem root through
// its Env; only the attempt environment's Close releases it. The garbage
// collector is off while counting, so a finalizer cannot be what closes a
// descriptor the runtime forgot.
func TestExecute_AttemptReleasesDescriptors(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "in.txt")
	if err := os.WriteFile(file, []byte("in"), 0o600); err != nil {
		t.Fatal(err)
	}
	exe := childBinary(t)
	fsCap := capability.MustParse("filesystem.read:" + dir)
	reads := func(d *tools.Declaration) { d.RequiredCapabilities = []capability.Capability{fsCap} }
	open := func(env *tools.Env) error {
		f, err := env.FS("filesystem.read").Open(file)
		if err != nil {
			return err
		}
		return f.Close()
	}
	ts := []tools.Tool{
		tool(decl("fd.ok", reads), func(ctx context.Context, env *tools.Env, in msg) (msg, error) { return in, open(env) }),
		tool(decl("fd.fail", reads), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
			return msg{}, errors.Join(open(env), errors.New("boom"))
		}),
		tool(decl("fd.panic", reads), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
			if err := open(env); err != nil {
				return msg{}, err
			}
			panic("boom")
		}),
		tool(decl("fd.slow", reads, limit(20*time.Millisecond)), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
			if err := open(env); err != nil {
				return msg{}, err
			}
			<-ctx.Done()
			return msg{}, ctx.Err()
		}),
		tool(decl("fd.boundary", reads), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
			if err := open(env); err != nil {
				return msg{}, err
			}
			_, err := env.FS("filesystem.read").Open(filepath.Join(filepath.Dir(dir), "elsewhere"))
			return msg{}, err
		}),
	}
	ts = append(ts, tools.ProcessTools()...)
	rt, _ := openRuntime(t, &tgruntime.Options{
		Grants: map[string][]capability.Capability{"tester": {fsCap, capability.MustParse("process.exec:" + exe), capability.MustParse("process.exec:" + filepath.Join(dir, "nope"))}},
		Retry:  tgruntime.RetryPolicy{MaxRetries: -1},
	}, ts...)
	proc := func(id string, in map[string]any) tgruntime.Invocation {
		b, _ := json.Marshal(in)
		return tgruntime.Invocation{Tool: id, Input: b, Principal: "tester"}
	}
	calls := []struct {
		inv   tgruntime.Invocation
		want  lifecycle.State
		code  string
		loose bool // on a loaded machine the timeout may come before the process started: any ending will do
	}{
		{invoke("fd.ok", `{"msg":"a"}`), lifecycle.Completed, "", false},
		{invoke("fd.fail", `{"msg":"a"}`), lifecycle.RolledBack, "tool_error", false},
		{invoke("fd.panic", `{"msg":"a"}`), lifecycle.RolledBack, "panic", false},
		{invoke("fd.slow", `{"msg":"a"}`), lifecycle.RolledBack, "timeout", false},
		{invoke("fd.boundary", `{"msg":"a"}`), lifecycle.RolledBack, "capability_boundary", false},
		{invoke("fd.ok", `{"msg":7}`), lifecycle.Failed, "invalid_input", false},
		{proc(tools.ExecStatusID, map[string]any{"command": exe, "args": []string{"exit", "3", "bad"}, "cwd": dir}), lifecycle.Completed, "", false},
		{proc(tools.ExecCaptureID, map[string]any{"command": exe, "args": []string{"sleep", "60"}, "cwd": dir, "timeout_seconds": 0.05}), lifecycle.Completed, "", true},
		{proc(tools.ExecCaptureID, map[string]any{"command": filepath.Join(dir, "nope"), "cwd": dir}), lifecycle.RolledBack, "not_found", false},
	}
	round := func() {
		t.Helper()
		for _, c := range calls {
			res, _ := rt.Execute(context.Background(), c.inv)
			if c.loose && res != nil && res.State.Terminal() {
				continue
			}
			if res == nil || res.State != c.want || (c.code != "" && (res.Error == nil || res.Error.Code != c.code)) {
				t.Fatalf("%s: %+v; want %s %s", c.inv.Tool, res, c.want, c.code)
			}
		}
	}
	round() // first use: lazily opened descriptors of the process (the poller, ...) are not the attempts'
	goruntime.GC()
	goruntime.GC() // the finalizers queued by the first run their course
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	before := openFDs(t)
	const rounds = 20
	for range rounds {
		round()
	}
	after := openFDs(t)
	var leaked []string
	for fd, target := range after {
		if _, ok := before[fd]; !ok {
			leaked = append(leaked, fd+" -> "+target)
		}
	}
	slices.Sort(leaked)
	if len(after) > len(before) {
		t.Fatalf("%d descriptors open before %d rounds of %d attempts, %d after; new ones:\n%v", len(before), rounds, len(calls), len(after), leaked)
	}
}

// openFDs lists this process's open file descriptors and what they name.
func openFDs(t *testing.T) map[string]string {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	out := map[string]string{}
	for _, e := range ents {
		target, _ := os.Readlink("/proc/self/fd/" + e.Name())
		out[e.Name()] = target
	}
	return out
}

// RFC-0001 §8.2 capability denials: a handle's refusal during execution
// (capability_boundary) is counted in toolgate.capability.denials, as a
// refusal at authorization (capability_denied) is.
func TestTelemetry_BoundaryDenialsCounted(t *testing.T) {
	boundary := tool(decl("test.boundary"), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
		return in, env.State.Put("not-granted", "k", []byte("v"))
	})
	tel := openTraced(t, nil, echo("test.echo"), boundary)
	res, err := tel.rt.Execute(context.Background(), invoke("test.boundary", `{"msg":"x"}`))
	if !errors.Is(err, tgruntime.ErrAuthorization) || res.State != lifecycle.RolledBack || res.Error.Code != "capability_boundary" {
		t.Fatalf("err = %v, state %s; want a handle's refusal (capability_boundary)", err, res.State)
	}
	denied := invoke("test.echo", `{"msg":"x"}`)
	denied.Principal = "nobody"
	if res, _ := tel.rt.Execute(context.Background(), denied); res.Error.Code != "capability_denied" {
		t.Fatalf("denied at authorization: %+v", res.Error)
	}

	var rm metricdata.ResourceMetrics
	if err := tel.metrics.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "toolgate.capability.denials" {
				continue
			}
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok || !sum.IsMonotonic {
				t.Fatalf("toolgate.capability.denials is %T, want a monotonic int64 sum", m.Data)
			}
			for _, dp := range sum.DataPoints {
				tool, _ := dp.Attributes.Value(attribute.Key("gen_ai.tool.name"))
				et, _ := dp.Attributes.Value(attribute.Key("error.type"))
				got[tool.Emit()+" "+et.Emit()] += dp.Value
			}
		}
	}
	want := map[string]int64{"test.boundary capability_boundary": 1, "test.echo capability_denied": 1}
	if len(got) != len(want) || got["test.boundary capability_boundary"] != 1 || got["test.echo capability_denied"] != 1 {
		t.Fatalf("toolgate.capability.denials = %v, want %v", got, want)
	}
}
