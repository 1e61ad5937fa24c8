package runtime_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/internal/testkit"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
	"github.com/toolgate/toolgate/txn"
)

const msgSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "properties": {"msg": {"type": "string", "description": "a message", "maxLength": 64}},
  "required": ["msg"],
  "additionalProperties": false
}`

// decl returns a declaration with {msg} input and output schemas; opts
// adjust it.
func decl(id string, opts ...func(*tools.Declaration)) tools.Declaration {
	d := tools.Declaration{
		ID: id, Version: "1.0.0", Name: id, Description: "test tool " + id,
		InputSchema: json.RawMessage(msgSchema), OutputSchema: json.RawMessage(msgSchema),
		RequiredCapabilities: []capability.Capability{capability.MustParse("state.write:test")},
		ResourceLimits:       tools.ResourceLimits{MaxExecutionTime: 5 * time.Second},
	}
	for _, o := range opts {
		o(&d)
	}
	return d
}

func idempotent(d *tools.Declaration) { d.Idempotent = true }

func limit(t time.Duration) func(*tools.Declaration) {
	return func(d *tools.Declaration) { d.ResourceLimits.MaxExecutionTime = t }
}

type msg struct {
	Msg string `json:"msg"`
}

// tool makes a typed {msg} tool whose body is fn.
func tool(d tools.Declaration, fn func(ctx context.Context, env *tools.Env, in msg) (msg, error)) tools.Tool {
	return tools.NewTyped(d, fn)
}

// echo writes its message to state test/last and returns it.
func echo(id string, opts ...func(*tools.Declaration)) tools.Tool {
	return tool(decl(id, opts...), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
		return in, env.State.Put("test", "last", []byte(in.Msg))
	})
}

// whyTamper is why a test that edits the database below the store's API
// runs on bbolt only.
const whyTamper = "it edits the bbolt file below the store's API, as someone with write access to the file could"

// whyKill is why a test that SIGKILLs a process holding the database runs
// on bbolt only.
const whyKill = "the next open of a bbolt file recovers a SIGKILLed process's claims at once, where Postgres waits for the dead node's lease to lapse (internal/nodetest SIGKILLs servers on Postgres)"

// grantAll is the principal "tester" with the test capability.
var grantAll = map[string][]capability.Capability{"tester": {capability.MustParse("state.write:test")}}

// registry returns a frozen-to-be registry holding echo("test.echo").
func registry(tb testing.TB) *tools.Registry {
	reg := tools.NewRegistry()
	if err := reg.Register(echo("test.echo")); err != nil {
		tb.Fatal(err)
	}
	return reg
}

// openRuntime opens a runtime on a fresh database (internal/testdb) with the
// given tools; when the test ends it is closed and its database verified
// (internal/testkit).
func openRuntime(t *testing.T, opts *tgruntime.Options, ts ...tools.Tool) (*tgruntime.Runtime, string) {
	t.Helper()
	reg := tools.NewRegistry()
	for _, tl := range ts {
		if err := reg.Register(tl); err != nil {
			t.Fatalf("Register: %v", err)
		}
	}
	if opts == nil {
		opts = &tgruntime.Options{}
	}
	opts.Registry = reg
	if opts.Grants == nil && opts.Policy == nil {
		opts.Grants = grantAll
	}
	opts.NoSync = true
	if opts.Retry.BaseDelay == 0 {
		opts.Retry.BaseDelay = time.Millisecond
	}
	return testkit.Open(t, opts)
}

func invoke(id, input string) tgruntime.Invocation {
	return tgruntime.Invocation{Tool: id, Input: json.RawMessage(input), Principal: "tester"}
}

// stateOf reads the committed value of test/last.
func stateOf(t *testing.T, rt *tgruntime.Runtime) (string, bool) {
	t.Helper()
	v, ok, err := rt.StateValue(context.Background(), "test", "last")
	if err != nil {
		t.Fatalf("StateValue: %v", err)
	}
	return string(v), ok
}

// record loads the stored record of an execution.
func record(t *testing.T, rt *tgruntime.Runtime, id string) *txn.Record {
	t.Helper()
	rec, err := rt.Execution(context.Background(), id)
	if err != nil {
		t.Fatalf("Get(%s): %v", id, err)
	}
	return rec
}

// auditEvents returns the audit events of one execution, decoded, in order.
func auditEventsOf(t *testing.T, rt *tgruntime.Runtime, executionID string) []audit.Event {
	t.Helper()
	log, err := rt.AuditLog(context.Background(), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []audit.Event
	for _, e := range log {
		var ev audit.Event
		if err := json.Unmarshal(e.Event, &ev); err != nil {
			t.Fatal(err)
		}
		if ev.ExecutionID == executionID {
			out = append(out, ev)
		}
	}
	return out
}

// path returns the states a record went through, starting at DECLARED.
func statePath(rec *txn.Record) []string {
	if len(rec.Transitions) == 0 {
		return nil
	}
	out := []string{rec.Transitions[0].From}
	for _, tr := range rec.Transitions {
		out = append(out, tr.To)
	}
	return out
}
