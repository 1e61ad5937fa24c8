package txn_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/txn"
)

// AuditSearch finds the entries holding a string among the groups of a
// time window, found by a binary search: every event is found in a window
// around its time, and none outside it.
func TestStore_AuditSearch(t *testing.T) {
	s := openStoreAt(t, filepath.Join(t.TempDir(), "a.db"))
	ctx := context.Background()
	const n = 300
	for i := range n {
		ts := 1000 + 10*i
		id := fmt.Sprintf("e%03d", i)
		ev := txn.AuditEvent{Data: []byte(fmt.Sprintf(`{"timestamp":%d,"id":"%s","msg":"has \"timestamp\":1 inside"}`, ts, id))}
		if _, err := s.Begin(ctx, executing(id), ev); err != nil {
			t.Fatal(err)
		}
	}
	find := func(needle string, from, to int64) []string {
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
		if got := find(id, ts-5, ts+5); len(got) != 1 || !strings.Contains(got[0], id) {
			t.Fatalf("event %d in its window: %v", i, got)
		}
		if got := find(id, ts+20, ts+100); len(got) != 0 {
			t.Fatalf("event %d found in a window after it: %v", i, got)
		}
		if got := find(id, ts-100, ts-20); len(got) != 0 {
			t.Fatalf("event %d found in a window before it: %v", i, got)
		}
	}
	if got := find(`"id":"e`, 0, 1<<62); len(got) != n {
		t.Fatalf("the whole log: %d entries, want %d", len(got), n)
	}
	if err := s.AuditSearch(ctx, "", 0, 1, func(txn.AuditEntry) bool { return false }); err == nil {
		t.Error("an empty needle was searched for")
	}
}
