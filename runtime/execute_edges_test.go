package runtime_test

import (
	"context"
	"errors"
	"testing"

	"github.com/toolgate/toolgate/audit"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
)

// Rule 9's output limit: an output of exactly MaxOutputBytes is committed;
// one byte more is a ResourceError (output_limit) that aborts and rolls the
// attempt back, its writes discarded.
func TestExecute_OutputAtTheLimit(t *testing.T) {
	const out = `{"msg":"12345"}` // 15 bytes, as the echo returns it
	rt, _ := openRuntime(t, nil, echo("test.out", func(d *tools.Declaration) { d.ResourceLimits.MaxOutputBytes = int64(len(out)) }))
	ctx := context.Background()
	res, err := rt.Execute(ctx, invoke("test.out", out))
	if err != nil || res.State != "COMPLETED" || string(res.Output) != out {
		t.Fatalf("an output of MaxOutputBytes: %+v, %v", res, err)
	}
	res, err = rt.Execute(ctx, invoke("test.out", `{"msg":"123456"}`))
	var re *tgruntime.ResourceError
	if !errors.As(err, &re) || re.Resource != "output_limit" || res.State != "ROLLED_BACK" || res.Output != nil {
		t.Fatalf("an output one byte over: %+v, %v; want an output_limit ResourceError, ROLLED_BACK", res, err)
	}
	if v, _ := stateOf(t, rt); v != "12345" {
		t.Fatalf("the over-limit attempt's write was kept: %q", v)
	}
}

// The input hash of an input within MaxInputBytes, up to exactly that
// size, is the hash of its canonical form: the same input in any JSON form
// hashes the same. (Only an input over the bound, which rule 1 refuses, is
// hashed as raw bytes: TestExecute_OversizedInputRefusedBeforeHashing.)
func TestExecute_InputHashAtTheSizeLimit(t *testing.T) {
	const compact = `{"msg":"x"}`
	const spaced = ` { "msg" : "x" } ` // 17 bytes
	rt, _ := openRuntime(t, &tgruntime.Options{MaxInputBytes: len(spaced)}, echo("test.echo"))
	want, err := audit.Hash([]byte(compact))
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range []string{compact, spaced} {
		res, err := rt.Execute(context.Background(), invoke("test.echo", in))
		if err != nil {
			t.Fatal(err)
		}
		if got := record(t, rt, res.ExecutionID).InputHash; got != want {
			t.Errorf("input %q hashed %s; want the canonical hash %s", in, got, want)
		}
	}
}

// BypassIdempotency without an idempotency key bypasses nothing: the
// call's audit events do not say it bypassed a key.
func TestExecute_BypassWithoutAKey(t *testing.T) {
	rt, _ := openRuntime(t, nil, echo("test.echo"))
	inv := invoke("test.echo", `{"msg":"x"}`)
	inv.BypassIdempotency = true
	res, err := rt.Execute(context.Background(), inv)
	if err != nil {
		t.Fatal(err)
	}
	evs := auditEventsOf(t, rt, res.ExecutionID)
	if len(evs) == 0 {
		t.Fatal("no events")
	}
	for _, e := range evs {
		if e.IdempotencyBypass || e.IdempotencyKey != "" {
			t.Errorf("%s event says a key was bypassed: %+v", e.State, e)
		}
	}
}

// An attempt that ends before it runs (an invalid input, a denial) and is
// recorded returns its own error alone: it is not a StateError, which
// says the record could not be written.
func TestExecute_EndedBeforeRunningIsNoStateError(t *testing.T) {
	rt, _ := openRuntime(t, nil, echo("test.echo"))
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		inv  tgruntime.Invocation
		want error
	}{
		{"invalid", invoke("test.echo", `{"msg":1}`), tgruntime.ErrValidation},
		{"denied", tgruntime.Invocation{Tool: "test.echo", Input: []byte(`{"msg":"x"}`), Principal: "stranger"}, tgruntime.ErrAuthorization},
	} {
		res, err := rt.Execute(ctx, tc.inv)
		if !errors.Is(err, tc.want) || errors.Is(err, tgruntime.ErrState) {
			t.Fatalf("%s: err = %v; want %v alone, no StateError", tc.name, err, tc.want)
		}
		if res == nil || res.ExecutionID == "" {
			t.Fatalf("%s: result %+v; want the attempt recorded", tc.name, res)
		}
		if rec := record(t, rt, res.ExecutionID); rec.State != string(res.State) {
			t.Fatalf("%s: stored %s, returned %s", tc.name, rec.State, res.State)
		}
	}
}
