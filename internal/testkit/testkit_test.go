package testkit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/internal/testdb"
	"github.com/toolgate/toolgate/internal/testkit"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
	"github.com/toolgate/toolgate/txn"
)

// recorder is a testing.TB whose failures, logs and cleanups are its own,
// so that a test can see what Check does to the test it checks.
type recorder struct {
	testing.TB
	errors, logs []string
	cleanups     []func()
}

func (r *recorder) Helper()          {}
func (r *recorder) Cleanup(f func()) { r.cleanups = append(r.cleanups, f) }
func (r *recorder) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}
func (r *recorder) Logf(format string, args ...any) {
	r.logs = append(r.logs, fmt.Sprintf(format, args...))
}

// end runs r's cleanups as the testing package does, last registered first.
func (r *recorder) end() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
}

const schema = `{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","properties":{"msg":{"type":"string","description":"a message","maxLength":64}},"required":["msg"],"additionalProperties":false}`

type msg struct {
	Msg string `json:"msg"`
}

// hang returns a tool that runs until its context ends, saying when it
// started on started.
func hang(started chan<- struct{}) tools.Tool {
	return tools.NewTyped(tools.Declaration{
		ID: "test.hang", Version: "1.0.0", Name: "hang", Description: "Runs until it is stopped.",
		InputSchema: json.RawMessage(schema), OutputSchema: json.RawMessage(schema),
		RequiredCapabilities: []capability.Capability{capability.MustParse("state.write:test")},
		ResourceLimits:       tools.ResourceLimits{MaxExecutionTime: time.Minute},
	}, func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
		started <- struct{}{}
		<-ctx.Done()
		return msg{}, ctx.Err()
	})
}

// open opens a runtime with the hang tool on a fresh database of t's
// backend, for r to check.
func open(t *testing.T, r *recorder, started chan<- struct{}) (*tgruntime.Runtime, string) {
	t.Helper()
	reg := tools.NewRegistry()
	if err := reg.Register(hang(started)); err != nil {
		t.Fatal(err)
	}
	path := testdb.Path(t, "toolgate.db")
	rt, err := tgruntime.Open(path, &tgruntime.Options{
		Registry: reg, NoSync: true,
		Grants: map[string][]capability.Capability{"tester": {capability.MustParse("state.write:test")}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close(context.Background()) })
	testkit.Check(r, rt, path)
	return rt, path
}

// propose makes an intent and approves it, and returns its id.
func propose(t *testing.T, rt *tgruntime.Runtime) string {
	t.Helper()
	ctx := context.Background()
	in, err := rt.Propose(ctx, tgruntime.Invocation{Tool: "test.hang", Input: json.RawMessage(`{"msg":"hi"}`), Principal: "tester"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Approve(ctx, in.ID, "alice"); err != nil {
		t.Fatal(err)
	}
	return in.ID
}

// changeDecision rewrites the stored decision of intent id below the
// runtime's API, once the runtime is closed, as someone with write access
// to the database could: its approver is no longer the one the audit log
// recorded.
func changeDecision(t *testing.T, path, id string) {
	t.Helper()
	ctx := context.Background()
	store, err := txn.Open(path, &txn.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	raw, ok, err := store.StateValue(ctx, "toolgate.intent.decisions", id)
	if err != nil || !ok {
		t.Fatalf("the stored decision: %v, %v", ok, err)
	}
	changed := strings.Replace(string(raw), `"alice"`, `"mallory"`, 1)
	if changed == string(raw) {
		t.Fatalf("the stored decision %s does not name alice", raw)
	}
	if err := store.PutState(ctx, "toolgate.intent.decisions", id, []byte(changed)); err != nil {
		t.Fatal(err)
	}
}

// A database that audit verify would refuse fails the test at its end,
// naming the record and the field; one it accepts does not.
func TestCheck_VerifiesTheDatabase(t *testing.T) {
	r := &recorder{TB: t}
	rt, path := open(t, r, nil)
	id := propose(t, rt)
	if err := rt.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if found := testkit.Verify(context.Background(), path, nil); found != nil {
		t.Fatalf("an untouched database: %q", found)
	}
	changeDecision(t, path, id)
	r.end()
	if len(r.errors) != 1 || !strings.Contains(r.errors[0], "intent "+id) || !strings.Contains(r.errors[0], "mallory") {
		t.Errorf("the test's failures: %q, want one naming intent %s and its approver", r.errors, id)
	}
}

// A test that says it tampers is not verified, and its log says why.
func TestCheck_Tampers(t *testing.T) {
	r := &recorder{TB: t}
	rt, path := open(t, r, nil)
	id := propose(t, rt)
	testkit.Tampers(r, "it changes an approver")
	rt.Close(context.Background())
	changeDecision(t, path, id)
	r.end()
	if len(r.errors) != 0 {
		t.Errorf("a test that said it tampers failed: %q", r.errors)
	}
	if len(r.logs) != 1 || !strings.Contains(r.logs[0], "it changes an approver") {
		t.Errorf("the test's log: %q, want the reason", r.logs)
	}
}

// Close's error fails the test, also when the test closed the runtime
// itself and dropped it; unless the test says it closes with an error.
func TestCheck_CloseError(t *testing.T) {
	for _, optOut := range []bool{false, true} {
		t.Run(fmt.Sprint("optOut=", optOut), func(t *testing.T) {
			r := &recorder{TB: t}
			started := make(chan struct{}, 1)
			rt, _ := open(t, r, started)
			if optOut {
				testkit.CloseFails(r, "it closes with an ended context")
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				rt.Execute(context.Background(), tgruntime.Invocation{Tool: "test.hang", Input: json.RawMessage(`{"msg":"hi"}`), Principal: "tester"})
			}()
			<-started
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			rt.Close(ctx) // aborts the call; its error is dropped here
			<-done
			r.end()
			switch {
			case optOut && len(r.errors) != 0:
				t.Errorf("a test that said its Close fails failed: %q", r.errors)
			case !optOut && (len(r.errors) != 1 || !strings.Contains(r.errors[0], "context canceled")):
				t.Errorf("the test's failures: %q, want Close's context canceled", r.errors)
			}
		})
	}
}

// An opt-out without a reason fails the test.
func TestOptOut_NeedsAReason(t *testing.T) {
	for name, optOut := range map[string]func(testing.TB, string){"Tampers": testkit.Tampers, "CloseFails": testkit.CloseFails} {
		r := &fatalRecorder{recorder: recorder{TB: t}}
		func() {
			defer func() { _ = recover() }()
			optOut(r, " ")
		}()
		if !r.fatal {
			t.Errorf("%s without a reason did not fail the test", name)
		}
	}
}

type fatalRecorder struct {
	recorder
	fatal bool
}

func (r *fatalRecorder) Fatal(args ...any) { r.fatal = true; panic("fatal") }
