package txn_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/txn"
)

// TestStore_AuditSearch_WindowEdges pins what a search returns at the edges
// of its window: from and to are included; a window whose to is before its
// from is the instant from; the window selects groups, so an entry made
// outside it is returned with the others of its group; fn returning true
// stops the search.
func TestStore_AuditSearch_WindowEdges(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	const n = 40
	// An event made before 1970: its timestamp is negative.
	if _, err := s.Begin(ctx, executing("neg"), txn.AuditEvent{Data: []byte(`{"timestamp":-5,"id":"neg"}`)}); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		ts := 1000 + 10*i
		id := fmt.Sprintf("e%03d", i)
		ev := txn.AuditEvent{Data: fmt.Appendf(nil, `{"timestamp":%d,"id":"%s"}`, ts, id)}
		if _, err := s.Begin(ctx, executing(id), ev); err != nil {
			t.Fatal(err)
		}
	}
	// One group whose events were made 100 ms apart.
	if _, err := s.Begin(ctx, executing("g"),
		txn.AuditEvent{Data: []byte(`{"timestamp":5000,"id":"g1","in":"grp"}`)},
		txn.AuditEvent{Data: []byte(`{"timestamp":5100,"id":"g2","in":"grp"}`)}); err != nil {
		t.Fatal(err)
	}
	// Last, an event whose timestamp is not a number: its group could hold
	// an event of any time.
	if _, err := s.Begin(ctx, executing("odd"), txn.AuditEvent{Data: []byte(`{"timestamp":"soon","id":"odd"}`)}); err != nil {
		t.Fatal(err)
	}
	find := func(needle string, from, to int64) []string {
		t.Helper()
		var got []string
		if err := s.AuditSearch(ctx, needle, from, to, func(e txn.AuditEntry) bool {
			got = append(got, string(e.Event))
			return false
		}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	for i := range n {
		ts := int64(1000 + 10*i)
		id := fmt.Sprintf(`"id":"e%03d"`, i)
		for _, w := range []struct {
			from, to int64
			found    bool
		}{
			{ts, ts, true},          // the instant it was made
			{ts - 9, ts, true},      // to is included
			{ts, ts + 9, true},      // from is included
			{ts, ts - 50, true},     // to before from: the instant from
			{ts + 1, ts + 9, false}, // just after
			{ts - 9, ts - 1, false}, // just before
			{ts + 1, ts - 50, false},
		} {
			got := find(id, w.from, w.to)
			if found := len(got) == 1 && strings.Contains(got[0], id); found != w.found || len(got) > 1 {
				t.Fatalf("event %d at %d, window [%d, %d]: %q", i, ts, w.from, w.to, got)
			}
		}
	}
	for _, w := range []struct {
		from, to int64
		found    bool
	}{{-5, -5, true}, {-100, 0, true}, {-4, 999, false}, {1000, 1400, false}} {
		if got := find(`"id":"neg"`, w.from, w.to); (len(got) == 1) != w.found {
			t.Errorf("the event at -5, window [%d, %d]: %q", w.from, w.to, got)
		}
	}
	if got := find(`"id":"odd"`, 6000, 7000); len(got) != 1 {
		t.Errorf("an event without a numeric timestamp, in a window after every other: %q", got)
	}
	// Every entry of a group that holds an event of the window, whichever
	// of its events the window holds.
	for _, w := range [][2]int64{{5000, 5000}, {5050, 5050}, {5100, 5100}, {4000, 5000}, {5100, 6000}} {
		if got := find(`"in":"grp"`, w[0], w[1]); len(got) != 2 {
			t.Errorf("window %v: %q, want both events of the group", w, got)
		}
	}
	for _, w := range [][2]int64{{4000, 4999}, {5101, 6000}} {
		if got := find(`"in":"grp"`, w[0], w[1]); len(got) != 0 {
			t.Errorf("window %v: %q, want none", w, got)
		}
	}
	// fn returning true stops the search at that entry.
	var got []string
	if err := s.AuditSearch(ctx, `"id":"`, 0, 1<<62, func(e txn.AuditEntry) bool {
		got = append(got, string(e.Event))
		return len(got) == 3
	}); err != nil || len(got) != 3 || !strings.Contains(got[2], `"e002"`) {
		t.Fatalf("stopped at the third entry: %q, %v", got, err)
	}
}

// TestStore_GetWithAudit reads a record and searches the log with the
// window it gives for that record, in one read; an unknown id is
// ErrNotFound and an empty needle ErrInvalidRecord.
func TestStore_GetWithAudit(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	for i, id := range []string{"a", "b"} {
		ev := txn.AuditEvent{Data: fmt.Appendf(nil, `{"timestamp":%d,"executionId":"%s"}`, 1000+i, id)}
		if _, err := s.Begin(ctx, executing(id), ev); err != nil {
			t.Fatal(err)
		}
	}
	var asked string
	window := func(r *txn.Record) (string, int64, int64) {
		asked = r.ExecutionID
		return `"executionId":"` + r.ExecutionID + `"`, 1000, 1001
	}
	var got []string
	rec, err := s.GetWithAudit(ctx, "b", window, func(e txn.AuditEntry) bool {
		got = append(got, string(e.Event))
		return false
	})
	if err != nil || rec.ExecutionID != "b" || asked != "b" || len(got) != 1 || !strings.Contains(got[0], `"b"`) {
		t.Fatalf("GetWithAudit(b) = %+v, %v; events %q", rec, err, got)
	}
	if _, err := s.GetWithAudit(ctx, "c", window, func(txn.AuditEntry) bool { return false }); !errors.Is(err, txn.ErrNotFound) {
		t.Errorf("an unknown id: %v, want ErrNotFound", err)
	}
	empty := func(*txn.Record) (string, int64, int64) { return "", 0, 1 }
	if _, err := s.GetWithAudit(ctx, "a", empty, func(txn.AuditEntry) bool { return false }); !errors.Is(err, txn.ErrInvalidRecord) {
		t.Errorf("an empty needle: %v, want ErrInvalidRecord", err)
	}
}
