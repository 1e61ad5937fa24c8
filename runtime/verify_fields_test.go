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
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/internal/testdb"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
	"github.com/toolgate/toolgate/txn"
)

// The tests here edit one field of a stored record at a time, below the
// store's API, and check that verification reports exactly that field, no
// more and no less: the comparison of each field is pinned down, and an
// untouched field is never reported.

// copyDB copies the bbolt file at path to a new file for one case.
func copyDB(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	to := filepath.Join(t.TempDir(), "toolgate.db")
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return to
}

// fieldsOf are the fields reported for kind and id, sorted, each once.
func fieldsOf(ds []tgruntime.Discrepancy, kind, id string) []string {
	var out []string
	for _, d := range ds {
		if d.Kind == kind && d.ID == id && !slices.Contains(out, d.Field) {
			out = append(out, d.Field)
		}
	}
	slices.Sort(out)
	return out
}

// readOnly opens the database at path read-only for t.
func readOnly(t *testing.T, path string) *txn.Store {
	t.Helper()
	s, err := txn.Open(path, &txn.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// editRecord reads the record stored under id in the database at path,
// lets edit change it and stores it again, below the store's API.
func editRecord(t *testing.T, path, id string, edit func(rec *txn.Record)) {
	t.Helper()
	s, err := txn.Open(path, &txn.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := s.Get(context.Background(), id)
	s.Close()
	if err != nil {
		t.Fatal(err)
	}
	edit(rec)
	tamper(t, path, putRecord(id, rec))
}

// Each field of an execution record is compared with its audit events:
// changing one reports that field alone, by VerifyRecords (audit verify)
// and by VerifyExecution and ReadExecution (show).
func TestVerifyExecution_EachFieldAlone(t *testing.T) {
	testdb.BboltOnly(t, whyTamper)
	ctx := context.Background()
	failing := tool(decl("test.failing"), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
		return msg{}, errString("it failed")
	})
	path := filepath.Join(t.TempDir(), "toolgate.db")
	rt, _ := openRuntimeAt(t, path, echo("test.echo"), failing)
	inv := invoke("test.echo", `{"msg":"hello"}`)
	inv.Token = &audit.Token{Issuer: "https://id.example.com/", Subject: "agent-7", SHA256: strings.Repeat("ab", 32)}
	res, err := rt.Execute(ctx, inv)
	if err != nil {
		t.Fatal(err)
	}
	okID := res.ExecutionID
	res, _ = rt.Execute(ctx, invoke("test.failing", `{"msg":"x"}`))
	failedID := res.ExecutionID
	if res.State != "ROLLED_BACK" {
		t.Fatalf("the failing tool: %s", res.State)
	}
	evs := auditEventsOf(t, rt, okID)
	last := evs[len(evs)-1]
	if last.Duration == nil {
		t.Fatal("the terminal event has no duration")
	}
	dur := time.Duration(*last.Duration) * time.Millisecond
	if ds := verifyRT(t, rt); len(ds) != 0 {
		t.Fatalf("an untouched database: %v", ds)
	}
	rt.Close(ctx)

	ms := time.Millisecond
	for _, tc := range []struct {
		name string
		id   string
		edit func(rec *txn.Record)
		want []string // the fields reported, sorted; none for an edit verification tolerates
	}{
		{"tool", okID, func(r *txn.Record) { r.ToolID = "test.other" }, []string{"tool"}},
		{"tool version", okID, func(r *txn.Record) { r.ToolVersion = "9.9.9" }, []string{"tool"}},
		{"call id", okID, func(r *txn.Record) { r.CallID = "another-call" }, []string{"callId"}},
		{"attempt", okID, func(r *txn.Record) { r.Attempt = 2 }, []string{"attempt"}},
		{"principal", okID, func(r *txn.Record) { r.Principal = "mallory" }, []string{"principal"}},
		{"token removed", okID, func(r *txn.Record) { r.Token = nil }, []string{"token"}},
		{"token subject", okID, func(r *txn.Record) { r.Token.Subject = "agent-8" }, []string{"token"}},
		{"token issuer", okID, func(r *txn.Record) { r.Token.Issuer = "https://evil.example.com/" }, []string{"token"}},
		{"token hash", okID, func(r *txn.Record) { r.Token.SHA256 = strings.Repeat("cd", 32) }, []string{"token"}},
		{"token added", failedID, func(r *txn.Record) {
			r.Token = &txn.TokenRef{Issuer: "https://id.example.com/", Subject: "agent-7", SHA256: strings.Repeat("ab", 32)}
		}, []string{"token"}},
		{"capabilities", okID, func(r *txn.Record) { r.Capabilities = []string{"state.write:other"} }, []string{"capabilities"}},
		{"input hash", okID, func(r *txn.Record) { r.InputHash = strings.Repeat("0", 64) }, []string{"inputHash"}},
		{"audit event ids", okID, func(r *txn.Record) { r.AuditEvents = r.AuditEvents[1:] }, []string{"auditEvents"}},
		{"output hash", okID, func(r *txn.Record) { r.OutputHash = strings.Repeat("0", 64) }, []string{"outputHash"}},
		{"output removed with its hash", okID, func(r *txn.Record) { r.Output, r.OutputHash = nil, "" }, []string{"outputHash"}},
		{"output given to a failure", failedID, func(r *txn.Record) { r.Output = json.RawMessage(`{"msg":"x"}`) }, []string{"output"}},
		{"ended a millisecond later", okID, func(r *txn.Record) { r.EndedAt = r.EndedAt.Add(ms) }, []string{"endedAt"}},
		// The record's duration may differ from the event's by up to a
		// second (wall against monotonic clock), not by more.
		{"duration a second longer", okID, func(r *txn.Record) { r.StartedAt = r.EndedAt.Add(-dur - time.Second) }, nil},
		{"duration over a second longer", okID, func(r *txn.Record) { r.StartedAt = r.EndedAt.Add(-dur - time.Second - ms) }, []string{"startedAt"}},
		{"duration a second shorter", okID, func(r *txn.Record) { r.StartedAt = r.EndedAt.Add(-dur + time.Second) }, nil},
		{"duration over a second shorter", okID, func(r *txn.Record) { r.StartedAt = r.EndedAt.Add(-dur + time.Second + ms) }, []string{"startedAt"}},
		{"transition from another state", okID, func(r *txn.Record) { r.Transitions[0].From = "VALIDATED" }, []string{"transitions"}},
		{"transition skipped", okID, func(r *txn.Record) { r.Transitions = slices.Delete(r.Transitions, 1, 2) }, []string{"transitions"}},
		{"transition a millisecond later", okID, func(r *txn.Record) { r.Transitions[1].At = r.Transitions[1].At.Add(ms) }, []string{"transitions"}},
		{"error added", okID, func(r *txn.Record) {
			r.Error = &txn.ErrorInfo{Type: "ExecutionError", Code: "tool_error", Message: "it failed"}
		}, []string{"error"}},
		{"error removed", failedID, func(r *txn.Record) { r.Error = nil }, []string{"error"}},
		{"error code", failedID, func(r *txn.Record) { r.Error.Code = "panic" }, []string{"error"}},
		{"error type", failedID, func(r *txn.Record) { r.Error.Type = "TimeoutError" }, []string{"error"}},
		{"error stack added", failedID, func(r *txn.Record) { r.Error.Stack = "goroutine 1" }, nil}, // the stack is not audited
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := copyDB(t, path)
			editRecord(t, p, tc.id, tc.edit)
			if got := fieldsOf(discrepancies(t, p), "execution", tc.id); !slices.Equal(got, tc.want) {
				t.Fatalf("VerifyRecords reports %v; want %v", got, tc.want)
			}
			s := readOnly(t, p)
			rec, err := s.Get(ctx, tc.id)
			if err != nil {
				t.Fatal(err)
			}
			one, err := tgruntime.NewReader(s).VerifyExecution(ctx, rec)
			if err != nil {
				t.Fatal(err)
			}
			if got := fieldsOf(one, "execution", tc.id); !slices.Equal(got, tc.want) || len(fieldsOf(one, "execution", "")) > 0 {
				t.Fatalf("VerifyExecution reports %v; want %v", one, tc.want)
			}
			_, shown, err := tgruntime.NewReader(s).ReadExecution(ctx, tc.id)
			if err != nil {
				t.Fatal(err)
			}
			if got := fieldsOf(shown, "execution", tc.id); !slices.Equal(got, tc.want) {
				t.Fatalf("ReadExecution reports %v; want %v", shown, tc.want)
			}
		})
	}
}

// The events of an execution are searched for in the part of the log
// written from ten minutes before its first recorded time to ten minutes
// after its last: a record whose times were moved by more than that finds
// no events and is reported as unproven, never as proven; within it, only
// the moved times are reported.
func TestVerifyExecution_SearchWindow(t *testing.T) {
	testdb.BboltOnly(t, whyTamper)
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "toolgate.db")
	rt, _ := openRuntimeAt(t, path, echo("test.echo"))
	res, err := rt.Execute(ctx, invoke("test.echo", `{"msg":"hello"}`))
	if err != nil {
		t.Fatal(err)
	}
	id := res.ExecutionID
	rt.Close(ctx)
	shift := func(d time.Duration) func(r *txn.Record) {
		return func(r *txn.Record) {
			r.StartedAt, r.EndedAt = r.StartedAt.Add(d), r.EndedAt.Add(d)
			for i := range r.Transitions {
				r.Transitions[i].At = r.Transitions[i].At.Add(d)
			}
		}
	}
	for _, tc := range []struct {
		name string
		edit func(r *txn.Record)
		want []string
	}{
		{"nine minutes later", shift(9 * time.Minute), []string{"endedAt", "transitions"}},
		{"nine minutes earlier", shift(-9 * time.Minute), []string{"endedAt", "transitions"}},
		{"eleven minutes later", shift(11 * time.Minute), []string{"events"}},
		{"eleven minutes earlier", shift(-11 * time.Minute), []string{"events"}},
		// The window runs from the earliest of the record's times to the
		// latest, whichever field holds them.
		{"started eleven minutes later", func(r *txn.Record) { r.StartedAt = r.StartedAt.Add(11 * time.Minute) }, []string{"startedAt"}},
		{"all but the last transition eleven minutes earlier", func(r *txn.Record) {
			r.StartedAt, r.EndedAt = r.StartedAt.Add(-11*time.Minute), r.EndedAt.Add(-11*time.Minute)
			for i := range r.Transitions[:len(r.Transitions)-1] {
				r.Transitions[i].At = r.Transitions[i].At.Add(-11 * time.Minute)
			}
		}, []string{"endedAt", "transitions"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := copyDB(t, path)
			editRecord(t, p, id, tc.edit)
			s := readOnly(t, p)
			rec, err := s.Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			one, err := tgruntime.NewReader(s).VerifyExecution(ctx, rec)
			if err != nil {
				t.Fatal(err)
			}
			if got := fieldsOf(one, "execution", id); !slices.Equal(got, tc.want) {
				t.Fatalf("VerifyExecution reports %v; want %v", one, tc.want)
			}
		})
	}
}

// Each part of an intent's history (its proposal, the decision on it, its
// execution mark and its refused requests) is compared with its audit
// events: changing one reports that part alone, by VerifyRecords and by
// VerifyIntent.
func TestVerifyIntent_EachFieldAlone(t *testing.T) {
	testdb.BboltOnly(t, whyTamper)
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "toolgate.db")
	rt, _ := openRuntimeAt(t, path, echo("test.echo"))
	propose := func(msg, callID string) *tgruntime.Intent {
		in, err := rt.Propose(ctx, tgruntime.Invocation{Tool: "test.echo", Input: json.RawMessage(`{"msg":"` + msg + `"}`), Principal: "agent", CallID: callID})
		if err != nil {
			t.Fatal(err)
		}
		return in
	}
	ran := propose("run", "call-run")
	if _, err := rt.Execute(ctx, tgruntime.Invocation{IntentID: ran.ID, IntentHash: ran.Hash, Principal: "tester", CallID: "refused-1"}); intentCode(err) != "intent_pending" {
		t.Fatalf("pending: %v", err)
	}
	if _, err := rt.ApproveVia(ctx, ran.ID, "alice", "elicitation"); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Execute(ctx, tgruntime.Invocation{IntentID: ran.ID, IntentHash: ran.Hash, Principal: "tester", CallID: "the-run"}); err != nil {
		t.Fatal(err)
	}
	rejected := propose("no", "")
	if _, err := rt.Reject(ctx, rejected.ID, "bob", "not today"); err != nil {
		t.Fatal(err)
	}
	pending := propose("later", "")
	if ds := verifyRT(t, rt); len(ds) != 0 {
		t.Fatalf("an untouched database: %v", ds)
	}
	rt.Close(ctx)

	// edit changes the JSON object stored under key in namespace ns.
	edit := func(ns, key string, change func(m map[string]any)) func(*bolt.Tx) error {
		return func(tx *bolt.Tx) error {
			b := tx.Bucket([]byte("state")).Bucket([]byte(ns))
			var m map[string]any
			if err := json.Unmarshal(b.Get([]byte(key)), &m); err != nil {
				return err
			}
			change(m)
			v, _ := json.Marshal(m)
			return b.Put([]byte(key), v)
		}
	}
	later := func(m map[string]any, field string) {
		at, err := time.Parse(time.RFC3339Nano, m[field].(string))
		if err != nil {
			panic(err)
		}
		m[field] = at.Add(time.Millisecond)
	}
	// refusal edits the one refused request of ran.
	refusal := func(change func(m map[string]any)) func(*bolt.Tx) error {
		return func(tx *bolt.Tx) error {
			b := tx.Bucket([]byte("state")).Bucket([]byte("toolgate.intent.refusals"))
			k, _ := b.Cursor().Seek([]byte(ran.ID + "/"))
			if k == nil || !strings.HasPrefix(string(k), ran.ID+"/") {
				return errors.New("no refusal stored")
			}
			return edit("toolgate.intent.refusals", string(k), change)(tx)
		}
	}
	const (
		intents   = "toolgate.intents"
		decisions = "toolgate.intent.decisions"
		executed  = "toolgate.intent.executed"
	)
	t.Run("intent removed", func(t *testing.T) {
		p := copyDB(t, path)
		tamper(t, p, func(tx *bolt.Tx) error {
			return tx.Bucket([]byte("state")).Bucket([]byte(intents)).Delete([]byte(ran.ID))
		})
		// Its proposal, refusal, approval and execution.
		ds := discrepancies(t, p)
		want := tgruntime.Discrepancy{Kind: "intent", ID: ran.ID, Field: "record", Detail: "the audit log holds 4 events of this intent, but no intent is stored"}
		if len(ds) != 1 || ds[0] != want {
			t.Fatalf("got %v; want %v", ds, want)
		}
	})
	for _, tc := range []struct {
		name string
		id   string
		edit func(*bolt.Tx) error
		want []string
	}{
		{"hash", ran.ID, edit(intents, ran.ID, func(m map[string]any) { m["hash"] = strings.Repeat("0", 64) }), []string{"decision", "hash"}},
		{"tool", ran.ID, edit(intents, ran.ID, func(m map[string]any) { m["tool"] = "test.other" }), []string{"tool"}},
		{"version", ran.ID, edit(intents, ran.ID, func(m map[string]any) { m["version"] = "2.0.0" }), []string{"tool"}},
		{"input", ran.ID, edit(intents, ran.ID, func(m map[string]any) { m["input"] = map[string]any{"msg": "evil"} }), []string{"input"}},
		{"proposer", ran.ID, edit(intents, ran.ID, func(m map[string]any) { m["proposer"] = "mallory" }), []string{"proposer"}},
		{"proposing call", ran.ID, edit(intents, ran.ID, func(m map[string]any) { m["callId"] = "call-other" }), []string{"callId"}},
		{"proposing call added", pending.ID, edit(intents, pending.ID, func(m map[string]any) { m["callId"] = "call-other" }), []string{"callId"}},
		{"proposed a millisecond later", ran.ID, edit(intents, ran.ID, func(m map[string]any) { later(m, "proposedAt") }), []string{"proposedAt"}},
		{"decision removed", rejected.ID, func(tx *bolt.Tx) error {
			return tx.Bucket([]byte("state")).Bucket([]byte(decisions)).Delete([]byte(rejected.ID))
		}, []string{"decision"}},
		{"decision added", pending.ID, func(tx *bolt.Tx) error {
			d, _ := json.Marshal(tgruntime.IntentDecision{By: "bob", At: time.Now().UTC(), Reason: "no"})
			return tx.Bucket([]byte("state")).Bucket([]byte(decisions)).Put([]byte(pending.ID), d)
		}, []string{"decision"}},
		{"approval made a rejection", ran.ID, edit(decisions, ran.ID, func(m map[string]any) { m["approved"] = false }), []string{"decision"}},
		{"rejection made an approval", rejected.ID, edit(decisions, rejected.ID, func(m map[string]any) { m["approved"] = true }), []string{"decision"}},
		{"decided by", ran.ID, edit(decisions, ran.ID, func(m map[string]any) { m["by"] = "mallory" }), []string{"decision"}},
		{"reason", rejected.ID, edit(decisions, rejected.ID, func(m map[string]any) { m["reason"] = "another story" }), []string{"decision"}},
		{"via", ran.ID, edit(decisions, ran.ID, func(m map[string]any) { delete(m, "via") }), []string{"decision"}},
		{"signer", ran.ID, edit(decisions, ran.ID, func(m map[string]any) { m["signer"] = "alice+abc" }), []string{"decision"}},
		{"decided a millisecond later", rejected.ID, edit(decisions, rejected.ID, func(m map[string]any) { later(m, "at") }), []string{"decision"}},
		{"execution removed", ran.ID, func(tx *bolt.Tx) error {
			return tx.Bucket([]byte("state")).Bucket([]byte(executed)).Delete([]byte(ran.ID))
		}, []string{"execution"}},
		{"execution added", rejected.ID, func(tx *bolt.Tx) error {
			b := tx.Bucket([]byte("state")).Bucket([]byte(executed))
			return b.Put([]byte(rejected.ID), append([]byte(nil), b.Get([]byte(ran.ID))...))
		}, []string{"execution"}},
		{"execution id", ran.ID, edit(executed, ran.ID, func(m map[string]any) { m["executionId"] = "0199e4a1-0000-7000-8000-000000000001" }), []string{"execution"}},
		{"execution's principal", ran.ID, edit(executed, ran.ID, func(m map[string]any) { m["principal"] = "mallory" }), []string{"execution"}},
		{"execution's call", ran.ID, edit(executed, ran.ID, func(m map[string]any) { m["callId"] = "another-call" }), []string{"execution"}},
		{"executed a millisecond later", ran.ID, edit(executed, ran.ID, func(m map[string]any) { later(m, "at") }), []string{"execution"}},
		{"refusal removed", ran.ID, func(tx *bolt.Tx) error {
			b := tx.Bucket([]byte("state")).Bucket([]byte("toolgate.intent.refusals"))
			k, _ := b.Cursor().Seek([]byte(ran.ID + "/"))
			return b.Delete(append([]byte(nil), k...))
		}, []string{"refusals"}},
		{"refusal's principal", ran.ID, refusal(func(m map[string]any) { m["principal"] = "mallory" }), []string{"refusals"}},
		{"refusal's code", ran.ID, refusal(func(m map[string]any) { m["code"] = "intent_rejected" }), []string{"refusals"}},
		{"refusal's call", ran.ID, refusal(func(m map[string]any) { m["callId"] = "another-call" }), []string{"refusals"}},
		{"refused a millisecond later", ran.ID, refusal(func(m map[string]any) { later(m, "at") }), []string{"refusals"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := copyDB(t, path)
			tamper(t, p, tc.edit)
			ds := discrepancies(t, p)
			if got := fieldsOf(ds, "intent", tc.id); !slices.Equal(got, tc.want) {
				t.Fatalf("VerifyRecords reports %v; want %v (all: %v)", got, tc.want, ds)
			}
			for _, d := range ds {
				if d.ID != tc.id {
					t.Fatalf("an untouched record reported: %v", d)
				}
			}
			s := readOnly(t, p)
			r := tgruntime.NewReader(s)
			in, err := r.Intent(ctx, tc.id)
			if err != nil {
				t.Fatal(err)
			}
			one, err := r.VerifyIntent(ctx, in)
			if err != nil {
				t.Fatal(err)
			}
			if got := fieldsOf(one, "intent", tc.id); !slices.Equal(got, tc.want) || len(one) < len(got) {
				t.Fatalf("VerifyIntent reports %v; want %v", one, tc.want)
			}
		})
	}
}

// An idempotency key is checked against the events of the attempts a
// replay would return: a key record that does not decode, one stored under
// another principal's or tool's entry, and one whose attempts were made by
// another call, with another key, or have no events, are each reported
// under the key, with what is wrong; a key whose call is still running is
// left to the check of its executions.
func TestVerifyRecords_IdempotencyKeyFields(t *testing.T) {
	testdb.BboltOnly(t, whyTamper)
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "toolgate.db")
	rt, _ := openRuntimeAt(t, path, echo("test.echo"), echo("test.other"))
	run := func(tool, key, callID string) *tgruntime.Result {
		inv := keyed(tool, `{"msg":"`+key+`"}`, key)
		inv.CallID = callID
		res, err := rt.Execute(ctx, inv)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	run("test.echo", "k1", "call-1")
	second := run("test.echo", "k2", "call-2")
	other := run("test.other", "k1", "call-3") // the same key, for another tool: another entry
	if ds := verifyRT(t, rt); len(ds) != 0 {
		t.Fatalf("an untouched database: %v", ds)
	}
	rt.Close(ctx)

	// editKey changes the stored record of key k1 for test.echo.
	editKey := func(change func(m map[string]any)) func(*bolt.Tx) error {
		return func(tx *bolt.Tx) error {
			b := tx.Bucket([]byte("state")).Bucket([]byte("toolgate.idempotency"))
			return b.ForEach(func(k, v []byte) error {
				var m map[string]any
				if err := json.Unmarshal(v, &m); err != nil {
					return err
				}
				if m["key"] != "k1" || m["tool"] != "test.echo" {
					return nil
				}
				change(m)
				nv, _ := json.Marshal(m)
				return b.Put(k, nv)
			})
		}
	}
	for _, tc := range []struct {
		name        string
		edit        func(*bolt.Tx) error
		id, field   string
		detail      string // a part of the discrepancy's detail
		notReported bool
	}{
		{"attempt of another call", editKey(func(m map[string]any) { m["callId"] = "call-9" }),
			"k1", "executions", "belongs to call call-1, the key to call call-9", false},
		{"attempt made with another key", editKey(func(m map[string]any) { m["executionIds"] = []string{second.ExecutionID} }),
			"k1", "executions", "was not made with this key", false},
		{"attempt of another tool", editKey(func(m map[string]any) { m["executionIds"] = []string{other.ExecutionID} }),
			"k1", "executions", `was made by "tester" with test.other, the key is "tester"'s for test.echo`, false},
		{"attempt without events", editKey(func(m map[string]any) { m["executionIds"] = []string{"0199e4a1-0000-7000-8000-000000000001"} }),
			"k1", "executions", "a replay would return attempts that have no audit events", false},
		{"one of two attempts without events", editKey(func(m map[string]any) {
			m["executionIds"] = append(m["executionIds"].([]any), "0199e4a1-0000-7000-8000-000000000001")
		}), "k1", "executions", "a replay would return attempts that have no audit events", false},
		{"stored under another principal", editKey(func(m map[string]any) { m["principal"] = "mallory" }),
			"k1", "scope", `the key of "mallory" for test.echo is stored under another principal's or tool's entry`, false},
		{"still running", editKey(func(m map[string]any) {
			m["state"] = "running"
			m["executionIds"] = []string{"0199e4a1-0000-7000-8000-000000000001"}
		}),
			"k1", "", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := copyDB(t, path)
			tamper(t, p, tc.edit)
			ds := discrepancies(t, p)
			if tc.notReported {
				if len(ds) != 0 {
					t.Fatalf("a running key reported: %v", ds)
				}
				return
			}
			if len(ds) != 1 || ds[0].Kind != "idempotency key" || ds[0].ID != tc.id || ds[0].Field != tc.field || !strings.Contains(ds[0].Detail, tc.detail) {
				t.Fatalf("got %v; want one idempotency key %s field %s saying %q", ds, tc.id, tc.field, tc.detail)
			}
		})
	}

	t.Run("record that does not decode", func(t *testing.T) {
		p := copyDB(t, path)
		var scope string
		tamper(t, p, func(tx *bolt.Tx) error {
			b := tx.Bucket([]byte("state")).Bucket([]byte("toolgate.idempotency"))
			k, _ := b.Cursor().First()
			scope = string(k)
			return b.Put([]byte(scope), []byte("{not json"))
		})
		ds := discrepancies(t, p)
		if len(ds) != 1 || ds[0].Kind != "idempotency key" || ds[0].ID != scope || ds[0].Field != "record" || !strings.HasPrefix(ds[0].Detail, "the stored key does not decode: ") {
			t.Fatalf("got %v; want one idempotency key %s field record", ds, scope)
		}
	})
}

// VerifyRecords counts what it checked: executions (an attempt still in
// flight included, checked against its claim's events), intents and
// idempotency keys; a call in flight is not a discrepancy.
func TestVerifyRecords_CountsWhatItChecked(t *testing.T) {
	ctx := context.Background()
	started, release := make(chan struct{}), make(chan struct{})
	blocking := tool(decl("test.blocking"), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
		close(started)
		<-release
		return in, nil
	})
	rt, _ := openRuntime(t, nil, echo("test.echo"), blocking)
	if _, err := rt.Execute(ctx, keyed("test.echo", `{"msg":"a"}`, "k")); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Propose(ctx, invoke("test.echo", `{"msg":"b"}`)); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := rt.Execute(ctx, invoke("test.blocking", `{"msg":"c"}`))
		done <- err
	}()
	<-started
	var ds []tgruntime.Discrepancy
	rep, err := rt.VerifyRecords(ctx, func(d tgruntime.Discrepancy) error {
		ds = append(ds, d)
		return nil
	})
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err != nil || len(ds) != 0 || rep.Discrepancy != 0 {
		t.Fatalf("with a call in flight: %v, %v", ds, err)
	}
	if rep.Executions != 2 || rep.Intents != 1 || rep.Keys != 1 || rep.Events == 0 {
		t.Fatalf("report %+v; want 2 executions (one in flight), 1 intent, 1 key", rep)
	}
}

// An error from VerifyRecords' report stops the check at once and is
// returned as it is, whichever record was reported: an execution's, an
// intent's, an idempotency key's.
func TestVerifyRecords_ReportErrorStops(t *testing.T) {
	testdb.BboltOnly(t, whyTamper)
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "toolgate.db")
	rt, _ := openRuntimeAt(t, path, echo("test.echo"))
	res, err := rt.Execute(ctx, keyed("test.echo", `{"msg":"a"}`, "k"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Execute(ctx, keyed("test.echo", `{"msg":"a"}`, "k2")); err != nil {
		t.Fatal(err)
	}
	in, err := rt.Propose(ctx, invoke("test.echo", `{"msg":"b"}`))
	if err != nil {
		t.Fatal(err)
	}
	gone, err := rt.Propose(ctx, invoke("test.echo", `{"msg":"gone"}`))
	if err != nil {
		t.Fatal(err)
	}
	rt.Close(ctx)
	// Two discrepancies of an execution, one of an undecodable record,
	// one of a record without events, two of keys (one undecodable, one
	// naming an attempt without events), two of intents (one changed, one
	// removed).
	editRecord(t, path, res.ExecutionID, func(r *txn.Record) { r.CallID, r.OutputHash = "another-call", strings.Repeat("0", 64) })
	tamper(t, path, func(tx *bolt.Tx) error {
		ex := tx.Bucket([]byte("executions"))
		if err := ex.Put([]byte("0199e4a1-0000-7000-8000-00000000000a"), []byte("not a record")); err != nil {
			return err
		}
		b, _ := txn.EncodeRecord(&txn.Record{ExecutionID: "0199e4a1-0000-7000-8000-00000000000b", State: "COMPLETED", ToolID: "test.echo", ToolVersion: "1.0.0"})
		if err := ex.Put([]byte("0199e4a1-0000-7000-8000-00000000000b"), b); err != nil {
			return err
		}
		st := tx.Bucket([]byte("state"))
		keys := st.Bucket([]byte("toolgate.idempotency"))
		var scopes [][]byte
		keys.ForEach(func(k, v []byte) error {
			scopes = append(scopes, append([]byte(nil), k...))
			return nil
		})
		if len(scopes) != 2 {
			return fmt.Errorf("%d keys stored", len(scopes))
		}
		if err := keys.Put(scopes[0], []byte("{")); err != nil {
			return err
		}
		var m map[string]any
		if err := json.Unmarshal(keys.Get(scopes[1]), &m); err != nil {
			return err
		}
		m["executionIds"] = []string{"0199e4a1-0000-7000-8000-00000000000c"}
		v, _ := json.Marshal(m)
		if err := keys.Put(scopes[1], v); err != nil {
			return err
		}
		if err := st.Bucket([]byte("toolgate.intents")).Delete([]byte(gone.ID)); err != nil {
			return err
		}
		return st.Bucket([]byte("toolgate.intents")).Put([]byte(in.ID), []byte(`{"id":"`+in.ID+`","hash":"`+in.Hash+`","tool":"test.echo","version":"1.0.0","input":{"msg":"c"},"proposer":"tester"}`))
	})
	s := readOnly(t, path)
	var all []tgruntime.Discrepancy
	rep, err := tgruntime.NewReader(s).VerifyRecords(ctx, func(d tgruntime.Discrepancy) error {
		all = append(all, d)
		return nil
	})
	if err != nil || rep.Discrepancy != len(all) || len(all) < 8 {
		t.Fatalf("all: %+v, %v, %v", rep, all, err)
	}
	kinds := map[string]bool{}
	for _, d := range all {
		kinds[d.Kind] = true
	}
	if len(kinds) != 3 {
		t.Fatalf("the discrepancies %v are not of all three kinds", all)
	}
	stop := errors.New("stop")
	for n := 1; n <= len(all); n++ {
		calls := 0
		rep, err := tgruntime.NewReader(s).VerifyRecords(ctx, func(d tgruntime.Discrepancy) error {
			calls++
			if d != all[calls-1] {
				t.Fatalf("discrepancy %d is %v, was %v", calls, d, all[calls-1])
			}
			if calls == n {
				return stop
			}
			return nil
		})
		if err != stop || calls != n || rep == nil || rep.Discrepancy != n {
			t.Fatalf("report failing at discrepancy %d (%v): %v after %d calls, %+v; want it returned at once", n, all[n-1], err, calls, rep)
		}
	}
}

// Records that do not decode are named up to a thousand, in key order, so
// that the check's memory stays bounded on a file full of garbage: one
// more is not named, and the check fails all the same.
func TestVerifyRecords_UndecodableRecordsNamedUpToAThousand(t *testing.T) {
	testdb.BboltOnly(t, whyTamper)
	path := filepath.Join(t.TempDir(), "toolgate.db")
	rt, _ := openRuntimeAt(t, path, echo("test.echo"))
	rt.Close(context.Background())
	tamper(t, path, func(tx *bolt.Tx) error {
		ex := tx.Bucket([]byte("executions"))
		for i := range 1001 {
			if err := ex.Put(fmt.Appendf(nil, "0199e4a1-0000-7000-8000-%012d", i), []byte("garbage")); err != nil {
				return err
			}
		}
		return nil
	})
	ds := discrepancies(t, path)
	if len(ds) != 1000 {
		t.Fatalf("%d discrepancies; want the first 1000 records named", len(ds))
	}
	for i, d := range ds {
		if d.Kind != "execution" || d.Field != "record" || d.ID != fmt.Sprintf("0199e4a1-0000-7000-8000-%012d", i) {
			t.Fatalf("discrepancy %d: %v", i, d)
		}
	}
}
