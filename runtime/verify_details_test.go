package runtime_test

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

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
