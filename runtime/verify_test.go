package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/internal/testdb"
	"github.com/toolgate/toolgate/internal/testkit"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
	"github.com/toolgate/toolgate/txn"
)

// tamper edits the database file at path below the store's API, with bbolt
// itself, as someone with write access to the file could.
func tamper(t *testing.T, path string, edit func(tx *bolt.Tx) error) {
	t.Helper()
	testdb.BboltOnly(t, whyTamper)
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(edit); err != nil {
		t.Fatal(err)
	}
}

// discrepancies verifies every record of the database at path.
func discrepancies(t *testing.T, path string) []tgruntime.Discrepancy {
	t.Helper()
	s, err := txn.Open(path, &txn.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var out []tgruntime.Discrepancy
	if _, err := tgruntime.NewReader(s).VerifyRecords(context.Background(), func(d tgruntime.Discrepancy) error {
		out = append(out, d)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func hasDiscrepancy(ds []tgruntime.Discrepancy, kind, id, field string) bool {
	return slices.ContainsFunc(ds, func(d tgruntime.Discrepancy) bool {
		return d.Kind == kind && d.ID == id && d.Field == field
	})
}

// putRecord stores rec under key, below the store's API.
func putRecord(key string, rec *txn.Record) func(tx *bolt.Tx) error {
	return func(tx *bolt.Tx) error {
		b, err := txn.EncodeRecord(rec)
		if err != nil {
			return err
		}
		return tx.Bucket([]byte("executions")).Put([]byte(key), b)
	}
}

// An execution record is proven by the audit events of its attempt: a
// record edited, deleted, or moved to another id in the database file is
// reported by VerifyRecords (audit verify) and by VerifyExecution (show),
// naming the execution and the field.
func TestVerifyRecords_DetectsTampering(t *testing.T) {
	ctx := context.Background()
	failing := tool(decl("test.failing"), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
		return msg{}, errString("it failed")
	})
	setup := func(t *testing.T) (path string, ok, denied, failed *txn.Record) {
		rt, path := openRuntime(t, &tgruntime.Options{}, echo("test.echo"), failing)
		testkit.Tampers(t, "each case edits a record in the bbolt file, to see verify find it")
		res, err := rt.Execute(ctx, invoke("test.echo", `{"msg":"hello"}`))
		if err != nil {
			t.Fatal(err)
		}
		ok = record(t, rt, res.ExecutionID)
		res, _ = rt.Execute(ctx, tgruntime.Invocation{Tool: "test.echo", Input: json.RawMessage(`{"msg":"x"}`), Principal: "nobody"})
		denied = record(t, rt, res.ExecutionID)
		res, _ = rt.Execute(ctx, invoke("test.failing", `{"msg":"x"}`))
		failed = record(t, rt, res.ExecutionID)
		if ds, err := rt.VerifyRecords(ctx, func(d tgruntime.Discrepancy) error { return nil }); err != nil || ds.Discrepancy != 0 || ds.Executions != 3 {
			t.Fatalf("an untouched database: %+v, %v", ds, err)
		}
		for _, rec := range []*txn.Record{ok, denied, failed} {
			if ds, err := rt.VerifyExecution(ctx, rec); err != nil || len(ds) != 0 {
				t.Fatalf("an untouched record %s: %v, %v", rec.State, ds, err)
			}
		}
		rt.Close(ctx)
		return path, ok, denied, failed
	}

	for _, tc := range []struct {
		name  string
		edit  func(ok, denied, failed *txn.Record) func(*bolt.Tx) error
		id    func(ok, denied, failed *txn.Record) string
		field string
	}{
		{"changed output", func(ok, _, _ *txn.Record) func(*bolt.Tx) error {
			ok.Output = json.RawMessage(`{"msg":"forged"}`)
			return putRecord(ok.ExecutionID, ok)
		}, func(ok, _, _ *txn.Record) string { return ok.ExecutionID }, "output"},
		{"changed output and its hash", func(ok, _, _ *txn.Record) func(*bolt.Tx) error {
			ok.Output = json.RawMessage(`{"msg":"forged"}`)
			ok.OutputHash, _ = audit.Hash(ok.Output)
			return putRecord(ok.ExecutionID, ok)
		}, func(ok, _, _ *txn.Record) string { return ok.ExecutionID }, "outputHash"},
		{"changed state", func(_, denied, _ *txn.Record) func(*bolt.Tx) error {
			denied.State = "FAILED"
			denied.Transitions[len(denied.Transitions)-1].To = "FAILED"
			return putRecord(denied.ExecutionID, denied)
		}, func(_, denied, _ *txn.Record) string { return denied.ExecutionID }, "state"},
		{"changed error", func(_, _, failed *txn.Record) func(*bolt.Tx) error {
			failed.Error.Message = "a different story"
			return putRecord(failed.ExecutionID, failed)
		}, func(_, _, failed *txn.Record) string { return failed.ExecutionID }, "error"},
		{"changed principal", func(ok, _, _ *txn.Record) func(*bolt.Tx) error {
			ok.Principal = "someone-else"
			return putRecord(ok.ExecutionID, ok)
		}, func(ok, _, _ *txn.Record) string { return ok.ExecutionID }, "principal"},
		{"changed capabilities", func(ok, _, _ *txn.Record) func(*bolt.Tx) error {
			ok.Capabilities = nil
			return putRecord(ok.ExecutionID, ok)
		}, func(ok, _, _ *txn.Record) string { return ok.ExecutionID }, "capabilities"},
		{"times set a day back", func(ok, _, _ *txn.Record) func(*bolt.Tx) error {
			day := -24 * time.Hour
			ok.StartedAt, ok.EndedAt = ok.StartedAt.Add(day), ok.EndedAt.Add(day)
			for i := range ok.Transitions {
				ok.Transitions[i].At = ok.Transitions[i].At.Add(day)
			}
			return putRecord(ok.ExecutionID, ok)
		}, func(ok, _, _ *txn.Record) string { return ok.ExecutionID }, "transitions"},
		{"deleted record", func(ok, _, _ *txn.Record) func(*bolt.Tx) error {
			return func(tx *bolt.Tx) error { return tx.Bucket([]byte("executions")).Delete([]byte(ok.ExecutionID)) }
		}, func(ok, _, _ *txn.Record) string { return ok.ExecutionID }, "record"},
		{"record moved to another id", func(ok, _, _ *txn.Record) func(*bolt.Tx) error {
			return func(tx *bolt.Tx) error {
				b := tx.Bucket([]byte("executions"))
				data := b.Get([]byte(ok.ExecutionID))
				moved := "0199e4a1-0000-7000-8000-000000000001"
				if err := b.Put([]byte(moved), append([]byte(nil), data...)); err != nil {
					return err
				}
				return b.Delete([]byte(ok.ExecutionID))
			}
		}, func(ok, _, _ *txn.Record) string { return "0199e4a1-0000-7000-8000-000000000001" }, "record"},
		{"record written without events", func(ok, _, _ *txn.Record) func(*bolt.Tx) error {
			forged := *ok
			forged.ExecutionID = "0199e4a1-0000-7000-8000-000000000002"
			return putRecord(forged.ExecutionID, &forged)
		}, func(ok, _, _ *txn.Record) string { return "0199e4a1-0000-7000-8000-000000000002" }, "events"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, ok, denied, failed := setup(t)
			id := tc.id(ok, denied, failed)
			tamper(t, path, tc.edit(ok, denied, failed))
			ds := discrepancies(t, path)
			if !hasDiscrepancy(ds, "execution", id, tc.field) {
				t.Fatalf("not detected: want execution %s field %s; got %v", id, tc.field, ds)
			}
			// The one record as show displays it.
			s, err := txn.Open(path, &txn.Options{ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			rec, err := s.Get(ctx, id)
			switch {
			case tc.name == "deleted record" && errors.Is(err, txn.ErrNotFound):
				return // deleted: nothing to show
			case strings.Contains(tc.name, "moved"):
				if !errors.Is(err, txn.ErrCorrupt) {
					t.Fatalf("a record stored under another execution's id is read as %v, %v; want ErrCorrupt", rec, err)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			one, err := tgruntime.NewReader(s).VerifyExecution(ctx, rec)
			if err != nil || len(one) == 0 {
				t.Fatalf("VerifyExecution presents the tampered record as proven: %v, %v", one, err)
			}
		})
	}
}

type errString string

func (e errString) Error() string { return string(e) }

// 001 rule 3: every step of an intent's history is an audit event in the
// same chain (proposal, approval or rejection, refused requests), and the
// events of its execution name it.
func TestIntent_DecisionsAreAudited(t *testing.T) {
	rt, path := openRuntime(t, nil, echo("test.echo"))
	ctx := context.Background()
	in, err := rt.Propose(ctx, tgruntime.Invocation{Tool: "test.echo", Input: json.RawMessage(`{"msg":"go"}`), Principal: "agent"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := execIntent(rt, in.ID, in.Hash); intentCode(err) != "intent_pending" {
		t.Fatalf("pending: %v", err)
	}
	if _, err := rt.Approve(ctx, in.ID, "alice"); err != nil {
		t.Fatal(err)
	}
	res, err := execIntent(rt, in.ID, in.Hash)
	if err != nil {
		t.Fatal(err)
	}
	no, err := rt.Propose(ctx, tgruntime.Invocation{Tool: "test.echo", Input: json.RawMessage(`{"msg":"no"}`), Principal: "agent"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Reject(ctx, no.ID, "bob", "not today"); err != nil {
		t.Fatal(err)
	}

	log, err := rt.AuditLog(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	type step struct{ id, action, who, code, reason string }
	var steps []step
	var executionEvents int
	for _, e := range log {
		var ev audit.Event
		if err := json.Unmarshal(e.Event, &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Intent != nil {
			if ev.Intent.Hash != map[string]string{in.ID: in.Hash, no.ID: no.Hash}[ev.Intent.ID] || ev.ToolID != "test.echo" || ev.State != strings.ToUpper(ev.Intent.Action) {
				t.Errorf("intent event %s", e.Event)
			}
			steps = append(steps, step{ev.Intent.ID, ev.Intent.Action, ev.UserID, ev.Intent.Code, ev.Intent.Reason})
			continue
		}
		if ev.ExecutionID == res.ExecutionID {
			executionEvents++
			if ev.IntentID != in.ID {
				t.Errorf("an event of the intent's execution does not name it: %s", e.Event)
			}
		}
	}
	want := []step{
		{in.ID, "proposed", "agent", "", ""},
		{in.ID, "refused", "tester", "intent_pending", ""},
		{in.ID, "approved", "alice", "", ""},
		{no.ID, "proposed", "agent", "", ""},
		{no.ID, "rejected", "bob", "", "not today"},
	}
	if !slices.Equal(steps, want) {
		t.Errorf("intent events:\n got %v\nwant %v", steps, want)
	}
	if executionEvents == 0 {
		t.Error("no events of the intent's execution")
	}
	rt.Close(ctx)
	if ds := discrepancies(t, path); len(ds) != 0 {
		t.Errorf("an untouched database: %v", ds)
	}
}

// 001 rule 3, fail closed: an approval must be proven by the audit log. A
// decision written into the database file below the store's API (inserted,
// flipped from a rejection, or an approved intent's input and hash
// changed together) is refused, nothing runs, and VerifyRecords reports it.
func TestIntent_ForgedApprovalRefused(t *testing.T) {
	ctx := context.Background()
	const ns = "toolgate.intent.decisions"
	state := func(tx *bolt.Tx, name string) *bolt.Bucket { return tx.Bucket([]byte("state")).Bucket([]byte(name)) }
	for _, tc := range []struct {
		name  string
		setup func(rt *tgruntime.Runtime, in *tgruntime.Intent)
		edit  func(in *tgruntime.Intent) func(*bolt.Tx) error
		field string
	}{
		{"approval inserted", func(rt *tgruntime.Runtime, in *tgruntime.Intent) {},
			func(in *tgruntime.Intent) func(*bolt.Tx) error {
				return func(tx *bolt.Tx) error {
					b, err := tx.Bucket([]byte("state")).CreateBucketIfNotExists([]byte(ns))
					if err != nil {
						return err
					}
					d, _ := json.Marshal(tgruntime.IntentDecision{Approved: true, By: "alice", At: time.Now().UTC()})
					return b.Put([]byte(in.ID), d)
				}
			}, "decision"},
		{"rejection flipped to approval", func(rt *tgruntime.Runtime, in *tgruntime.Intent) {
			if _, err := rt.Reject(ctx, in.ID, "bob", "no"); err != nil {
				t.Fatal(err)
			}
		}, func(in *tgruntime.Intent) func(*bolt.Tx) error {
			return func(tx *bolt.Tx) error {
				b := state(tx, ns)
				var d tgruntime.IntentDecision
				if err := json.Unmarshal(b.Get([]byte(in.ID)), &d); err != nil {
					return err
				}
				d.Approved, d.Reason = true, ""
				v, _ := json.Marshal(d)
				return b.Put([]byte(in.ID), v)
			}
		}, "decision"},
		{"approved hash changed", func(rt *tgruntime.Runtime, in *tgruntime.Intent) {
			if _, err := rt.Approve(ctx, in.ID, "alice"); err != nil {
				t.Fatal(err)
			}
		}, func(in *tgruntime.Intent) func(*bolt.Tx) error {
			return func(tx *bolt.Tx) error {
				b := state(tx, "toolgate.intents")
				var rec map[string]any
				if err := json.Unmarshal(b.Get([]byte(in.ID)), &rec); err != nil {
					return err
				}
				evil := json.RawMessage(`{"msg":"evil"}`)
				rec["input"] = evil
				rec["hash"], _ = tgruntime.IntentHash(in.Tool, in.Version, evil)
				v, _ := json.Marshal(rec)
				return b.Put([]byte(in.ID), v)
			}
		}, "hash"},
		{"executed mark removed to run it again", func(rt *tgruntime.Runtime, in *tgruntime.Intent) {
			if _, err := rt.Approve(ctx, in.ID, "alice"); err != nil {
				t.Fatal(err)
			}
			if _, err := execIntent(rt, in.ID, in.Hash); err != nil {
				t.Fatal(err)
			}
		}, func(in *tgruntime.Intent) func(*bolt.Tx) error {
			return func(tx *bolt.Tx) error { return state(tx, "toolgate.intent.executed").Delete([]byte(in.ID)) }
		}, "execution"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runs := 0
			counted := tool(decl("test.counted"), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
				runs++
				return in, nil
			})
			dir := t.TempDir()
			path := filepath.Join(dir, "toolgate.db")
			open := func() *tgruntime.Runtime {
				reg := tools.NewRegistry()
				if err := reg.Register(counted); err != nil {
					t.Fatal(err)
				}
				rt, err := tgruntime.Open(path, &tgruntime.Options{Registry: reg, Grants: grantAll, NoSync: true})
				if err != nil {
					t.Fatal(err)
				}
				return rt
			}
			rt := open()
			in, err := rt.Propose(ctx, tgruntime.Invocation{Tool: "test.counted", Input: json.RawMessage(`{"msg":"go"}`), Principal: "agent"})
			if err != nil {
				t.Fatal(err)
			}
			tc.setup(rt, in)
			ran := runs
			rt.Close(ctx)

			tamper(t, path, tc.edit(in))

			rt = open()
			forged, err := rt.Intent(ctx, in.ID)
			if err != nil {
				t.Fatal(err)
			}
			if forged.Status != tgruntime.IntentApproved {
				t.Fatalf("the forgery did not make the intent approved: %s", forged.Status)
			}
			_, err = execIntent(rt, forged.ID, forged.Hash)
			if intentCode(err) != "intent_corrupt" || runs != ran {
				t.Fatalf("a forged approval: err = %v, the tool ran %d times (%d before); want intent_corrupt and no run", err, runs, ran)
			}
			if !strings.Contains(err.Error(), "audit log") {
				t.Errorf("the refusal does not say why: %v", err)
			}
			rt.Close(ctx)
			if ds := discrepancies(t, path); !hasDiscrepancy(ds, "intent", in.ID, tc.field) {
				t.Errorf("audit verify does not report the forgery: want intent %s field %s, got %v", in.ID, tc.field, ds)
			}
		})
	}
}

// An idempotency key is proven by the events of the attempts a replay
// returns: a key pointed, in the database file, at another call's attempt
// (so that a replay would hand out someone else's result) is reported.
func TestVerifyRecords_IdempotencyKeyRedirected(t *testing.T) {
	ctx := context.Background()
	rt, path := openRuntime(t, nil, echo("test.echo"))
	testkit.Tampers(t, "it points an idempotency key at another call's execution, to see verify find it")
	keyed := invoke("test.echo", `{"msg":"mine"}`)
	keyed.IdempotencyKey = "k1"
	first, err := rt.Execute(ctx, keyed)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := rt.Execute(ctx, keyed); err != nil || !res.Replayed {
		t.Fatalf("replay: %+v, %v", res, err)
	}
	other, err := rt.Execute(ctx, invoke("test.echo", `{"msg":"someone else's"}`))
	if err != nil {
		t.Fatal(err)
	}
	rt.Close(ctx)
	if ds := discrepancies(t, path); len(ds) != 0 {
		t.Fatalf("an untouched database: %v", ds)
	}
	tamper(t, path, func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("state")).Bucket([]byte("toolgate.idempotency"))
		return b.ForEach(func(k, v []byte) error {
			var rec map[string]any
			if err := json.Unmarshal(v, &rec); err != nil {
				return err
			}
			ids, _ := rec["executionIds"].([]any)
			if len(ids) != 1 || ids[0] != first.ExecutionID {
				t.Fatalf("the key's record: %s", v)
			}
			rec["executionIds"] = []string{other.ExecutionID}
			nv, _ := json.Marshal(rec)
			return b.Put(k, nv)
		})
	})
	if ds := discrepancies(t, path); !hasDiscrepancy(ds, "idempotency key", "k1", "executions") {
		t.Fatalf("a redirected key is not reported: %v", ds)
	}
}

// A record read while its attempt runs is proven by the events of the same
// state of the store: polling in-flight executions never reports an honest
// record as not proven (a transition committed between two reads did).
func TestReadExecution_InFlightIsNotAFalseAlarm(t *testing.T) {
	ctx := context.Background()
	slow := tool(decl("test.slow"), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
		time.Sleep(2 * time.Millisecond)
		return in, nil
	})
	rt, _ := openRuntime(t, nil, slow)
	done := make(chan struct{})
	var calls sync.WaitGroup
	for i := range 60 {
		calls.Go(func() {
			rt.Execute(ctx, invoke("test.slow", fmt.Sprintf(`{"msg":"m%d"}`, i)))
		})
	}
	go func() { calls.Wait(); close(done) }()
	polls := 0
	for {
		select {
		case <-done:
			if polls == 0 {
				t.Log("no poll landed while calls ran")
			}
			return
		default:
		}
		recs, err := rt.Executions(ctx, txn.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if r.State == "COMPLETED" {
				continue
			}
			polls++
			_, ds, err := rt.ReadExecution(ctx, r.ExecutionID)
			if err != nil {
				t.Fatal(err)
			}
			if len(ds) > 0 {
				t.Fatalf("an honest in-flight record reported as not proven: %v", ds)
			}
		}
	}
}

// The executed mark of an intent is proven by its execution's events
// wherever they are in the log: removed to run the intent again an hour
// after its approval, it is refused (and reported), and the tool does not
// run twice. The mark's principal, call and time, and the refused
// requests, are compared with their events.
func TestIntent_HistoryEditsAreReported(t *testing.T) {
	ctx := context.Background()
	var runs atomic.Int32
	counted := tool(decl("test.counted"), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
		runs.Add(1)
		return in, nil
	})
	clk := &clock{now: time.Now().Add(-2 * time.Hour)}
	path := testdb.Path(t, "toolgate.db")
	open := func() *tgruntime.Runtime {
		reg := tools.NewRegistry()
		if err := reg.Register(counted); err != nil {
			t.Fatal(err)
		}
		rt, err := tgruntime.Open(path, &tgruntime.Options{Registry: reg, Grants: grantAll, NoSync: true, Now: clk.Now})
		if err != nil {
			t.Fatal(err)
		}
		return rt
	}
	rt := open()
	in, err := rt.Propose(ctx, tgruntime.Invocation{Tool: "test.counted", Input: json.RawMessage(`{"msg":"go"}`), Principal: "agent"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := execIntent(rt, in.ID, in.Hash); intentCode(err) != "intent_pending" {
		t.Fatalf("pending: %v", err)
	}
	if _, err := rt.Approve(ctx, in.ID, "alice"); err != nil {
		t.Fatal(err)
	}
	clk.Add(time.Hour)
	if _, err := execIntent(rt, in.ID, in.Hash); err != nil {
		t.Fatal(err)
	}
	rt.Close(ctx)
	state := func(tx *bolt.Tx, name string) *bolt.Bucket { return tx.Bucket([]byte("state")).Bucket([]byte(name)) }

	for _, tc := range []struct {
		name  string
		edit  func(tx *bolt.Tx) error
		field string
		run   bool // try to run it again
	}{
		{"executed mark removed", func(tx *bolt.Tx) error {
			return state(tx, "toolgate.intent.executed").Delete([]byte(in.ID))
		}, "execution", true},
		{"executed mark's principal changed", func(tx *bolt.Tx) error {
			b := state(tx, "toolgate.intent.executed")
			var x map[string]any
			if err := json.Unmarshal(b.Get([]byte(in.ID)), &x); err != nil {
				return err
			}
			x["principal"] = "mallory"
			v, _ := json.Marshal(x)
			return b.Put([]byte(in.ID), v)
		}, "execution", false},
		{"refusal deleted", func(tx *bolt.Tx) error {
			b := state(tx, "toolgate.intent.refusals")
			k, _ := b.Cursor().First()
			if k == nil {
				return errors.New("no refusal stored")
			}
			return b.Delete(append([]byte(nil), k...))
		}, "refusals", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testdb.BboltOnly(t, whyTamper)
			saved, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			defer os.WriteFile(path, saved, 0o600)
			tamper(t, path, tc.edit)
			if tc.run {
				rt := open()
				_, err := execIntent(rt, in.ID, in.Hash)
				rt.Close(ctx)
				if intentCode(err) != "intent_corrupt" || runs.Load() != 1 {
					t.Fatalf("run again after the edit: %v, %d runs; want intent_corrupt and 1 run", err, runs.Load())
				}
			}
			if ds := discrepancies(t, path); !hasDiscrepancy(ds, "intent", in.ID, tc.field) {
				t.Fatalf("not reported: want intent %s field %s, got %v", in.ID, tc.field, ds)
			}
		})
	}
}

// A database written by a version that did not audit intents: its intents
// are brought under the audit log at the first open by this version (so
// none is reported as changed, and an approved one still runs), and only
// then: with the marker removed later, an intent written below the store's
// API is not laundered into the log.
func TestOpen_ImportsIntentsOfAnEarlierVersion(t *testing.T) {
	ctx := context.Background()
	path := testdb.Path(t, "toolgate.db")
	// What the earlier version stored, and no event of it.
	s, err := txn.Open(path, &txn.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	put := func(ns, key string, v any) {
		b, _ := json.Marshal(v)
		if err := s.PutState(ctx, ns, key, b); err != nil {
			t.Fatal(err)
		}
	}
	at := time.Now().Add(-time.Hour).UTC().Truncate(time.Millisecond)
	intent := func(id, msg string) string {
		input := json.RawMessage(`{"msg":"` + msg + `"}`)
		hash, _ := tgruntime.IntentHash("test.echo", "1.0.0", input)
		put("toolgate.intents", id, map[string]any{"id": id, "hash": hash, "tool": "test.echo", "version": "1.0.0",
			"input": input, "proposer": "agent", "proposedAt": at})
		return hash
	}
	approved := "0f8fad5b-d9cb-469f-a165-70867728950e"
	rejected := "7c9e6679-7425-40de-944b-e07fc1f90ae7"
	hash := intent(approved, "go")
	intent(rejected, "no")
	put("toolgate.intent.decisions", approved, tgruntime.IntentDecision{Approved: true, By: "alice", At: at})
	put("toolgate.intent.decisions", rejected, tgruntime.IntentDecision{By: "bob", At: at, Reason: "not today"})
	s.Close()

	rt, _ := openRuntimeAt(t, path, echo("test.echo"))
	if ds := verifyRT(t, rt); len(ds) != 0 {
		t.Fatalf("intents of an earlier version reported: %v", ds)
	}
	if res, err := execIntent(rt, approved, hash); err != nil || res.State != "COMPLETED" {
		t.Fatalf("an approved intent of an earlier version: %+v, %v", res, err)
	}
	if ds := verifyRT(t, rt); len(ds) != 0 {
		t.Fatalf("after its execution: %v", ds)
	}
	rt.Close(ctx)

	// The marker removed, and an intent written below the API: no import.
	forged := "16fd2706-8baf-433b-82eb-8c7fada847da"
	tamper(t, path, func(tx *bolt.Tx) error {
		st := tx.Bucket([]byte("state"))
		if err := st.Bucket([]byte("toolgate.meta")).Delete([]byte("intents.audited")); err != nil {
			return err
		}
		input := json.RawMessage(`{"msg":"evil"}`)
		h, _ := tgruntime.IntentHash("test.echo", "1.0.0", input)
		b, _ := json.Marshal(map[string]any{"id": forged, "hash": h, "tool": "test.echo", "version": "1.0.0", "input": input, "proposer": "agent", "proposedAt": at})
		if err := st.Bucket([]byte("toolgate.intents")).Put([]byte(forged), b); err != nil {
			return err
		}
		d, _ := json.Marshal(tgruntime.IntentDecision{Approved: true, By: "alice", At: at})
		return st.Bucket([]byte("toolgate.intent.decisions")).Put([]byte(forged), d)
	})
	rt, _ = openRuntimeAt(t, path, echo("test.echo"))
	in, err := rt.Intent(ctx, forged)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := execIntent(rt, forged, in.Hash); intentCode(err) != "intent_corrupt" {
		t.Fatalf("an intent written after the upgrade, with the marker removed: %v; want intent_corrupt", err)
	}
	if ds := verifyRT(t, rt); !hasDiscrepancy(ds, "intent", forged, "proposal") {
		t.Fatalf("not reported: %v", ds)
	}
}

func openRuntimeAt(t *testing.T, path string, ts ...tools.Tool) (*tgruntime.Runtime, string) {
	t.Helper()
	reg := tools.NewRegistry()
	for _, tl := range ts {
		if err := reg.Register(tl); err != nil {
			t.Fatal(err)
		}
	}
	rt, err := tgruntime.Open(path, &tgruntime.Options{Registry: reg, Grants: grantAll, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close(context.Background()) })
	return rt, path
}

func verifyRT(t *testing.T, rt *tgruntime.Runtime) []tgruntime.Discrepancy {
	t.Helper()
	var out []tgruntime.Discrepancy
	if _, err := rt.VerifyRecords(context.Background(), func(d tgruntime.Discrepancy) error {
		out = append(out, d)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}
