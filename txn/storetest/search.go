package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/txn"
)

func testAuditSearch(t *testing.T, b *Backend) {
	CheckAuditSearch(t, b.open(t, b.fresh(t)))
}

// CheckAuditSearch checks, on an empty store s, what Store.AuditSearch and
// Store.GetWithAudit return at the edges of their window (the contract of
// driver.AuditSearcher, and txn's own scan for a backend without one):
//   - an empty log, or a window before or after every event, finds nothing;
//   - from and to are included; a window whose to is before its from is
//     the instant from;
//   - the window selects groups: every entry of a group holding an event of
//     the window is found, whichever of its events the window holds;
//   - a group holding an event without a numeric timestamp could hold an
//     event of any time: it never ends a search, and a window that begins
//     after every event logged before it finds it (an earlier window may
//     not: a search by the binary search ends at the first group made after
//     the window, before reaching it);
//   - fn returning true stops the search at that entry;
//   - GetWithAudit searches with the window its callback gives for the
//     record it read; an unknown id is ErrNotFound, an empty needle
//     ErrInvalidRecord, and a needle absent from the window finds nothing.
func CheckAuditSearch(t *testing.T, s *txn.Store) {
	t.Helper()
	ctx := context.Background()
	find := func(needle string, from, to int64) []string {
		t.Helper()
		var got []string
		if err := s.AuditSearch(ctx, needle, from, to, func(e txn.AuditEntry) bool {
			got = append(got, string(e.Event))
			return false
		}); err != nil {
			t.Fatalf("AuditSearch(%q, %d, %d): %v", needle, from, to, err)
		}
		return got
	}
	if got := find(`"id"`, -1<<62, 1<<62); len(got) != 0 {
		t.Fatalf("a search of an empty log found %q", got)
	}
	begin := func(id string, evs ...string) {
		t.Helper()
		var aevs []txn.AuditEvent
		for _, e := range evs {
			aevs = append(aevs, txn.AuditEvent{Data: []byte(e)})
		}
		if _, err := s.Begin(ctx, Record(id, "tool", "EXECUTING"), aevs...); err != nil {
			t.Fatal(err)
		}
	}
	// An event made before 1970: its timestamp is negative.
	begin("neg", `{"timestamp":-5,"id":"neg"}`)
	const n = 40
	for i := range n {
		id := fmt.Sprintf("e%03d", i)
		begin(id, fmt.Sprintf(`{"timestamp":%d,"id":"%s"}`, 1000+10*i, id))
	}
	// One group whose events were made 100 ms apart.
	begin("g", `{"timestamp":5000,"id":"g1","in":"grp"}`, `{"timestamp":5100,"id":"g2","in":"grp"}`)
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
			{ts - 1000, ts + 1000, true},
		} {
			got := find(id, w.from, w.to)
			if found := len(got) == 1 && strings.Contains(got[0], id); found != w.found || len(got) > 1 {
				t.Fatalf("event %d at %d, window [%d, %d]: %q", i, ts, w.from, w.to, got)
			}
		}
	}
	// Every event of a stretch of the log, in log order.
	got := find(`"id":"e0`, 1095, 1205)
	if len(got) != 11 || !strings.Contains(got[0], `"e010"`) || !strings.Contains(got[10], `"e020"`) {
		t.Fatalf("window [1095, 1205]: %q, want e010 to e020", got)
	}
	for _, w := range []struct {
		from, to int64
		found    bool
	}{{-5, -5, true}, {-100, 0, true}, {-4, 999, false}, {-100, -6, false}, {1000, 1400, false}} {
		if got := find(`"id":"neg"`, w.from, w.to); (len(got) == 1) != w.found {
			t.Errorf("the event at -5, window [%d, %d]: %q", w.from, w.to, got)
		}
	}
	for _, w := range [][2]int64{{5000, 5000}, {5050, 5050}, {5100, 5100}, {4000, 5000}, {5100, 6000}, {4999, 5001}} {
		if got := find(`"in":"grp"`, w[0], w[1]); len(got) != 2 {
			t.Errorf("window %v: %q, want both events of the group", w, got)
		}
	}
	for _, w := range [][2]int64{{4000, 4999}, {5101, 6000}} {
		if got := find(`"in":"grp"`, w[0], w[1]); len(got) != 0 {
			t.Errorf("window %v: %q, want none", w, got)
		}
	}
	if got := find(`"id":"`, 6000, 7000); len(got) != 0 {
		t.Errorf("a window after every event: %q", got)
	}
	// An event whose timestamp is not a number, then one made after every
	// other: the first could be of any time, so no search ends at it.
	begin("odd", `{"timestamp":"soon","id":"odd"}`)
	begin("late", `{"timestamp":9000,"id":"late"}`)
	for _, w := range [][2]int64{{6000, 7000}, {5101, 5101}, {8999, 9000}} {
		if got := find(`"id":"odd"`, w[0], w[1]); len(got) != 1 {
			t.Errorf("an event without a numeric timestamp, window %v: %q", w, got)
		}
	}
	if got := find(`"id":"late"`, 8000, 9500); len(got) != 1 {
		t.Errorf("the event after one without a numeric timestamp: %q", got)
	}
	if got := find(`"id":"late"`, 9001, 9500); len(got) != 0 {
		t.Errorf("the event at 9000 in window [9001, 9500]: %q", got)
	}
	// fn returning true stops the search at that entry.
	var seen []string
	if err := s.AuditSearch(ctx, `"id":"`, 0, 1<<62, func(e txn.AuditEntry) bool {
		seen = append(seen, string(e.Event))
		return len(seen) == 3
	}); err != nil || len(seen) != 3 || !strings.Contains(seen[2], `"e002"`) {
		t.Fatalf("stopped at the third entry: %q, %v", seen, err)
	}
	if err := s.AuditSearch(ctx, "", 0, 1, func(txn.AuditEntry) bool { return false }); !errors.Is(err, txn.ErrInvalidRecord) {
		t.Errorf("an empty needle: %v, want ErrInvalidRecord", err)
	}

	// GetWithAudit: the record, and the search its window gives.
	var asked string
	window := func(r *txn.Record) (string, int64, int64) {
		asked = r.ExecutionID
		return `"id":"` + r.ExecutionID + `"`, 1100, 1100
	}
	var evs []string
	rec, err := s.GetWithAudit(ctx, "e010", window, func(e txn.AuditEntry) bool {
		evs = append(evs, string(e.Event))
		return false
	})
	if err != nil || rec.ExecutionID != "e010" || asked != "e010" || len(evs) != 1 || !strings.Contains(evs[0], `"e010"`) {
		t.Fatalf("GetWithAudit(e010) = %+v, %v; events %q", rec, err, evs)
	}
	evs = nil
	if rec, err := s.GetWithAudit(ctx, "e011", window, func(e txn.AuditEntry) bool {
		evs = append(evs, string(e.Event))
		return false
	}); err != nil || rec.ExecutionID != "e011" || len(evs) != 0 {
		t.Fatalf("GetWithAudit(e011), window without its event = %+v, %v; events %q", rec, err, evs)
	}
	none := func(txn.AuditEntry) bool { return false }
	if _, err := s.GetWithAudit(ctx, "nope", window, none); !errors.Is(err, txn.ErrNotFound) {
		t.Errorf("an unknown id: %v, want ErrNotFound", err)
	}
	empty := func(*txn.Record) (string, int64, int64) { return "", 0, 1 }
	if _, err := s.GetWithAudit(ctx, "e010", empty, none); !errors.Is(err, txn.ErrInvalidRecord) {
		t.Errorf("an empty needle: %v, want ErrInvalidRecord", err)
	}
}
