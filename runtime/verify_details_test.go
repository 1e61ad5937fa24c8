package runtime_test

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/toolgate/toolgate/internal/testdb"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
	"github.com/toolgate/toolgate/txn"
)

// The tests here pin down what a discrepancy's detail says, where it names
// a position or a quantity the user acts on: which transition, which
// duration, which refused request.

// A discrepancy in an execution's transitions names the transition by its
// place in the record, counted from 1; one in its duration gives the
// record's and the audit log's, each in milliseconds. The duration is that
// of an attempt that ran for a while, so that a check which adds the two
// durations instead of subtracting them is caught.
func TestVerifyExecution_DetailsNamePositionsAndDurations(t *testing.T) {
	testdb.BboltOnly(t, whyTamper)
	ctx := context.Background()
	slow := tool(decl("test.slow"), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
		time.Sleep(30 * time.Millisecond)
		return in, nil
	})
	path := filepath.Join(t.TempDir(), "toolgate.db")
	rt, _ := openRuntimeAt(t, path, slow)
	res, err := rt.Execute(ctx, invoke("test.slow", `{"msg":"hello"}`))
	if err != nil {
		t.Fatal(err)
	}
	id := res.ExecutionID
	evs := auditEventsOf(t, rt, id)
	last := evs[len(evs)-1]
	if last.Duration == nil || *last.Duration < 30 {
		t.Fatalf("the terminal event's duration is %v; want at least 30 ms", last.Duration)
	}
	dur := time.Duration(*last.Duration) * time.Millisecond
	rt.Close(ctx)

	ms := time.Millisecond
	for _, tc := range []struct {
		name   string
		edit   func(rec *txn.Record)
		field  string // "" when nothing is reported
		detail string // what the detail says
	}{
		{"first transition from another state", func(r *txn.Record) { r.Transitions[0].From = "VALIDATED" },
			"transitions", "transition 1 (VALIDATED -> VALIDATED) does not follow the lifecycle"},
		{"third transition from another state", func(r *txn.Record) { r.Transitions[2].From = "DECLARED" },
			"transitions", "transition 3 (DECLARED -> EXECUTING) does not follow the lifecycle"},
		{"last transition enters another state", func(r *txn.Record) { r.Transitions[3].To = "ROLLED_BACK" },
			"transitions", "transition 4 enters ROLLED_BACK in the record, COMPLETED in the audit log"},
		{"second transition a millisecond later", func(r *txn.Record) { r.Transitions[1].At = r.Transitions[1].At.Add(ms) },
			"transitions", "transition 2 to AUTHORIZED is at "},
		{"duration a second longer", func(r *txn.Record) { r.StartedAt = r.EndedAt.Add(-dur - time.Second) }, "", ""},
		{"duration a second shorter", func(r *txn.Record) { r.StartedAt = r.EndedAt.Add(-dur + time.Second) }, "", ""},
		{"duration over a second longer", func(r *txn.Record) { r.StartedAt = r.EndedAt.Add(-dur - time.Second - ms) },
			"startedAt", "the record's duration is " + (dur + time.Second + ms).String() + ", the audit log's " + dur.String()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := copyDB(t, path)
			editRecord(t, p, id, tc.edit)
			s := readOnly(t, p)
			rec, err := s.Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			ds, err := tgruntime.NewReader(s).VerifyExecution(ctx, rec)
			if err != nil {
				t.Fatal(err)
			}
			if tc.field == "" {
				if len(ds) != 0 {
					t.Fatalf("reported %v; want nothing", ds)
				}
				return
			}
			if got := fieldsOf(ds, "execution", id); !slices.Equal(got, []string{tc.field}) {
				t.Fatalf("reported %v; want %s alone", ds, tc.field)
			}
			if !strings.Contains(ds[0].Detail, tc.detail) {
				t.Fatalf("detail %q; want it to say %q", ds[0].Detail, tc.detail)
			}
		})
	}
}

// A discrepancy in an intent's refused requests names the first that
// differs by its place among them, sorted by time, then by who made it,
// counted from 1, with what the store and the audit log say of it.
func TestVerifyIntent_DetailNamesTheRefusedRequest(t *testing.T) {
	testdb.BboltOnly(t, whyTamper)
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "toolgate.db")
	rt, _ := openRuntimeAt(t, path, echo("test.echo"))
	in, err := rt.Propose(ctx, tgruntime.Invocation{Tool: "test.echo", Input: json.RawMessage(`{"msg":"x"}`), Principal: "agent"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"p1", "p2"} {
		if _, err := rt.Execute(ctx, tgruntime.Invocation{IntentID: in.ID, IntentHash: in.Hash, Principal: p}); intentCode(err) != "intent_pending" {
			t.Fatalf("%s: %v; want intent_pending", p, err)
		}
	}
	rt.Close(ctx)
	edited := 0
	tamper(t, path, func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("state")).Bucket([]byte("toolgate.intent.refusals"))
		type kv struct{ k, v []byte }
		var edits []kv
		if err := b.ForEach(func(k, v []byte) error {
			var m map[string]any
			if err := json.Unmarshal(v, &m); err != nil {
				return err
			}
			if strings.HasPrefix(string(k), in.ID+"/") && m["principal"] == "p2" {
				m["principal"] = "p3"
				nv, _ := json.Marshal(m)
				edits = append(edits, kv{bytes.Clone(k), nv})
			}
			return nil
		}); err != nil {
			return err
		}
		for _, e := range edits {
			if err := b.Put(e.k, e.v); err != nil {
				return err
			}
		}
		edited = len(edits)
		return nil
	})
	if edited != 1 {
		t.Fatalf("edited %d refusals of p2; want 1", edited)
	}
	want := `refused request 2 (intent_pending by "p3") differs from the audit log's (intent_pending by "p2")`
	ds := discrepancies(t, path)
	if len(ds) != 1 || ds[0].ID != in.ID || ds[0].Field != "refusals" || ds[0].Detail != want {
		t.Fatalf("reported %v; want intent %s refusals: %s", ds, in.ID, want)
	}
}
