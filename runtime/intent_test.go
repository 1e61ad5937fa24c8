package runtime_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/toolgate/toolgate/internal/testdb"
	"github.com/toolgate/toolgate/internal/testkit"
	"github.com/toolgate/toolgate/lifecycle"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
)

func intentCode(err error) string {
	var ie *tgruntime.IntentError
	if errors.As(err, &ie) {
		return ie.Code
	}
	return ""
}

func execIntent(rt *tgruntime.Runtime, id, hash string) (*tgruntime.Result, error) {
	return rt.Execute(context.Background(), tgruntime.Invocation{IntentID: id, IntentHash: hash, Principal: "tester"})
}

// The checks of an intent's execution, in order, each with its own code;
// the approved, unchanged intent runs once, and a replay returns the stored
// outcome without running anything.
func TestIntent_Lifecycle(t *testing.T) {
	var runs int
	var mu sync.Mutex
	counted := tool(decl("test.counted"), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
		mu.Lock()
		runs++
		mu.Unlock()
		return in, env.State.Put("test", "last", []byte(in.Msg))
	})
	rt, _ := openRuntime(t, nil, counted)
	ctx := context.Background()

	if _, err := rt.Propose(ctx, tgruntime.Invocation{Tool: "test.counted", Input: []byte(`{"msg":7}`), Principal: "agent"}); !errors.Is(err, tgruntime.ErrValidation) {
		t.Fatalf("invalid input proposed: %v", err)
	}
	if all, _ := rt.Intents(ctx, tgruntime.IntentFilter{}); len(all) != 0 {
		t.Fatalf("a refused proposal was stored: %v", all)
	}
	in, err := rt.Propose(ctx, tgruntime.Invocation{Tool: "test.counted", Input: []byte(`{"msg": "go"}`), Principal: "agent"})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := tgruntime.IntentHash("test.counted", "1.0.0", []byte(`{"msg":"go"}`))
	if in.Status != tgruntime.IntentPending || in.Version != "1.0.0" || in.Hash != want || len(in.Hash) != 64 || in.Proposer != "agent" {
		t.Fatalf("proposed %+v", in)
	}

	for _, tc := range []struct {
		name, id, hash, code string
	}{
		{"malformed id", "not-a-uuid", in.Hash, "intent_malformed"},
		{"uppercase id", strings.ToUpper(in.ID), in.Hash, "intent_malformed"},
		{"malformed hash", in.ID, "abc", "intent_malformed"},
		{"not found", "0f8fad5b-d9cb-469f-a165-70867728950e", in.Hash, "intent_not_found"},
		{"pending", in.ID, in.Hash, "intent_pending"},
	} {
		if _, err := execIntent(rt, tc.id, tc.hash); intentCode(err) != tc.code || !errors.Is(err, tgruntime.ErrAuthorization) {
			t.Errorf("%s: err = %v; want %s", tc.name, err, tc.code)
		}
	}
	if _, err := rt.Approve(ctx, in.ID, "alice"); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Reject(ctx, in.ID, "bob", "changed my mind"); intentCode(err) != "intent_decided" {
		t.Errorf("a second decision: %v", err)
	}
	other := strings.Repeat("0", 64)
	if _, err := execIntent(rt, in.ID, other); intentCode(err) != "intent_hash_mismatch" {
		t.Errorf("wrong hash: %v", err)
	}
	if _, err := rt.Execute(ctx, tgruntime.Invocation{IntentID: in.ID, IntentHash: in.Hash, Input: []byte(`{"msg":"other"}`)}); intentCode(err) != "intent_hash_mismatch" {
		t.Errorf("other input with the right hash: %v", err)
	}
	if runs != 0 {
		t.Fatal("the tool ran before the intent was eligible")
	}

	res, err := execIntent(rt, in.ID, in.Hash)
	if err != nil || res.State != lifecycle.Completed || res.IntentID != in.ID || res.Replayed {
		t.Fatalf("approved intent: %v, %+v", err, res)
	}
	again, err := execIntent(rt, in.ID, in.Hash)
	if intentCode(err) != "intent_already_executed" || again == nil || !again.Replayed || again.ExecutionID != res.ExecutionID ||
		again.State != lifecycle.Completed || string(again.Output) != string(res.Output) {
		t.Fatalf("replay: %v, %+v", err, again)
	}
	if runs != 1 {
		t.Fatalf("the tool ran %d times", runs)
	}
	got, err := rt.Intent(ctx, in.ID)
	if err != nil || got.Status != tgruntime.IntentExecuted || got.Execution == nil || got.Execution.ExecutionID != res.ExecutionID ||
		got.Decision == nil || got.Decision.By != "alice" {
		t.Fatalf("intent after execution: %+v, %v", got, err)
	}
	var codes []string
	for _, r := range got.Refusals {
		codes = append(codes, r.Code)
	}
	if strings.Join(codes, ",") != "intent_pending,intent_hash_mismatch,intent_hash_mismatch,intent_already_executed" {
		t.Errorf("recorded refusals = %v", codes)
	}
}

func TestIntent_Rejected(t *testing.T) {
	rt, _ := openRuntime(t, nil, echo("test.echo"))
	ctx := context.Background()
	in, err := rt.Propose(ctx, invoke("test.echo", `{"msg":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Reject(ctx, in.ID, "bob", ""); intentCode(err) != "intent_malformed" {
		t.Errorf("a rejection without a reason: %v", err)
	}
	if _, err := rt.Reject(ctx, in.ID, "bob", "not today"); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Approve(ctx, in.ID, "alice"); intentCode(err) != "intent_decided" {
		t.Errorf("approved after a rejection: %v", err)
	}
	if _, err := execIntent(rt, in.ID, in.Hash); intentCode(err) != "intent_rejected" || !strings.Contains(err.Error(), "not today") {
		t.Errorf("rejected intent: %v", err)
	}
	if l, _ := rt.Intents(ctx, tgruntime.IntentFilter{Status: tgruntime.IntentRejected}); len(l) != 1 {
		t.Errorf("Intents(rejected) = %d", len(l))
	}
}

// An intent pins its tool version: if that version is no longer
// registered, it does not run (not even a newer version).
func TestIntent_ToolChanged(t *testing.T) {
	path := testdb.Path(t, "toolgate.db")
	open := func(version string) *tgruntime.Runtime {
		reg := tools.NewRegistry()
		if err := reg.Register(echo("test.echo", func(d *tools.Declaration) { d.Version = version })); err != nil {
			t.Fatal(err)
		}
		rt, err := tgruntime.Open(path, &tgruntime.Options{Registry: reg, Grants: grantAll, NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		return rt
	}
	rt := open("1.0.0")
	ctx := context.Background()
	in, err := rt.Propose(ctx, invoke("test.echo", `{"msg":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Approve(ctx, in.ID, "alice"); err != nil {
		t.Fatal(err)
	}
	rt.Close(ctx)
	rt = open("1.1.0")
	defer rt.Close(ctx)
	if _, err := execIntent(rt, in.ID, in.Hash); intentCode(err) != "intent_tool_changed" {
		t.Fatalf("err = %v; want intent_tool_changed", err)
	}
}

// A tool that requires approval is DENIED, and audited, unless it runs as
// an approved intent.
func TestIntent_RequiresApproval(t *testing.T) {
	rt, _ := openRuntime(t, nil, echo("test.guarded", func(d *tools.Declaration) { d.RequiresApproval = true }))
	ctx := context.Background()
	res, err := rt.Execute(ctx, invoke("test.guarded", `{"msg":"x"}`))
	if !errors.Is(err, tgruntime.ErrAuthorization) || res.State != lifecycle.Denied || !strings.Contains(err.Error(), "requires an approved intent") {
		t.Fatalf("without an intent: %v, %v", err, res.State)
	}
	if ev := eventIn(t, rt, res.ExecutionID, lifecycle.Denied); ev.Decision == nil || !strings.Contains(ev.Decision.Reason, "approved intent") {
		t.Errorf("the denial's audit event: %+v", ev.Decision)
	}
	in, err := rt.Propose(ctx, invoke("test.guarded", `{"msg":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Approve(ctx, in.ID, "alice"); err != nil {
		t.Fatal(err)
	}
	if res, err := execIntent(rt, in.ID, in.Hash); err != nil || res.State != lifecycle.Completed {
		t.Fatalf("as an approved intent: %v", err)
	}
}

// Executing never creates an intent (the execution adapter document (000):
// the adapter does not create new intents): only Propose does. A direct
// call of a tool that requires approval is DENIED, not turned into an
// intent; refused, run and replayed executions of an intent leave the
// intents as they were.
func TestIntent_ExecutionCreatesNoIntent(t *testing.T) {
	rt, _ := openRuntime(t, nil, echo("test.guarded", func(d *tools.Declaration) { d.RequiresApproval = true }))
	ctx := context.Background()
	in, err := rt.Propose(ctx, invoke("test.guarded", `{"msg":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	ids := func() []string {
		all, err := rt.Intents(ctx, tgruntime.IntentFilter{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, it := range all {
			out = append(out, it.ID)
		}
		return out
	}
	for _, step := range []struct {
		name string
		run  func() error
	}{
		{"direct call", func() error { _, err := rt.Execute(ctx, invoke("test.guarded", `{"msg":"y"}`)); return err }},
		{"pending", func() error { _, err := execIntent(rt, in.ID, in.Hash); return err }},
		{"unknown id", func() error { _, err := execIntent(rt, "0f8fad5b-d9cb-469f-a165-70867728950e", in.Hash); return err }},
		{"approve", func() error { _, err := rt.Approve(ctx, in.ID, "alice"); return err }},
		{"wrong hash", func() error { _, err := execIntent(rt, in.ID, strings.Repeat("0", 64)); return err }},
		{"run", func() error { _, err := execIntent(rt, in.ID, in.Hash); return err }},
		{"replay", func() error { _, err := execIntent(rt, in.ID, in.Hash); return err }},
	} {
		step.run()
		if got := ids(); len(got) != 1 || got[0] != in.ID {
			t.Fatalf("after %s: intents %v; want only the proposed %s", step.name, got, in.ID)
		}
	}
	if got, err := rt.Intent(ctx, in.ID); err != nil || got.Status != tgruntime.IntentExecuted {
		t.Fatalf("the intent after its run: %+v, %v", got, err)
	}
}

// 1,000 concurrent executions of one approved intent run the tool exactly
// once; the tool counts its runs in a file it appends to with fsync. The
// others get the stored outcome or an in-flight refusal.
func TestIntent_ConcurrentExecutionsRunOnce(t *testing.T) {
	runsFile := filepath.Join(t.TempDir(), "runs")
	counted := tool(decl("test.once"), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
		f, err := os.OpenFile(runsFile, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			return msg{}, err
		}
		defer f.Close()
		if _, err := f.WriteString("ran\n"); err != nil {
			return msg{}, err
		}
		return in, f.Sync()
	})
	rt, _ := openRuntime(t, &tgruntime.Options{MaxConcurrent: 2048}, counted)
	ctx := context.Background()
	in, err := rt.Propose(ctx, invoke("test.once", `{"msg":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Approve(ctx, in.ID, "alice"); err != nil {
		t.Fatal(err)
	}
	const n = 1000
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[string]int{}
	for range n {
		wg.Go(func() {
			res, err := execIntent(rt, in.ID, in.Hash)
			code := intentCode(err)
			switch {
			case err == nil && res.State == lifecycle.Completed:
				code = "ran"
			case code == "intent_already_executed" && res != nil && res.Replayed:
			case code == "intent_in_flight":
			default:
				t.Errorf("unexpected outcome: %v", err)
			}
			mu.Lock()
			codes[code]++
			mu.Unlock()
		})
	}
	wg.Wait()
	b, err := os.ReadFile(runsFile)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(string(b), "ran\n"); got != 1 || codes["ran"] != 1 {
		t.Fatalf("the tool ran %d times (%v)", got, codes)
	}
	t.Logf("outcomes of %d executions: %v", n, codes)
}

// An intent changed in the database (outside toolgate) is refused: the
// stored hash is checked against the stored content, not trusted; an
// unreadable record fails closed.
func TestIntent_CorruptRecord(t *testing.T) {
	rt, _ := openRuntime(t, nil, echo("test.echo"))
	testkit.Tampers(t, "it overwrites an approved intent's record with bytes that are not one")
	ctx := context.Background()
	in, err := rt.Propose(ctx, invoke("test.echo", `{"msg":"rm nothing"}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Approve(ctx, in.ID, "alice"); err != nil {
		t.Fatal(err)
	}
	store := tgruntime.StoreOf(rt)
	raw, _, _ := store.StateValue(ctx, "toolgate.intents", in.ID)
	tampered := strings.Replace(string(raw), "rm nothing", "rm everything", 1)
	if err := store.PutState(ctx, "toolgate.intents", in.ID, []byte(tampered)); err != nil {
		t.Fatal(err)
	}
	if _, err := execIntent(rt, in.ID, in.Hash); intentCode(err) != "intent_corrupt" {
		t.Fatalf("a tampered intent: %v", err)
	}
	if v, _ := stateOf(t, rt); v != "" {
		t.Fatalf("the tampered intent ran: %q", v)
	}
	if err := store.PutState(ctx, "toolgate.intents", in.ID, []byte(`{"id":`)); err != nil {
		t.Fatal(err)
	}
	if _, err := execIntent(rt, in.ID, in.Hash); !errors.Is(err, tgruntime.ErrState) {
		t.Fatalf("an unreadable intent: %v", err)
	}
}
