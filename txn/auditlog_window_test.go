package txn_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/toolgate/toolgate/txn"
)

// TestStore_AuditLog_FromAndLimit reads the log from every seq, inside a
// group or at its first entry, with and without a limit: the entries from
// that seq on (from 1 for 0), at most limit of them.
func TestStore_AuditLog_FromAndLimit(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	const groups, per = 5, 3 // groups start at entries 1, 4, 7, 10 and 13
	for g := range groups {
		var evs []txn.AuditEvent
		for i := range per {
			evs = append(evs, txn.AuditEvent{Data: fmt.Appendf(nil, `{"g":%d,"i":%d}`, g, i)})
		}
		if _, err := s.Begin(ctx, executing(fmt.Sprintf("x%d", g)), evs...); err != nil {
			t.Fatal(err)
		}
	}
	keys := 0
	if err := s.AuditRaw(ctx, func(k, v []byte) error { keys++; return nil }); err != nil || keys != groups+1 {
		t.Fatalf("the log holds %d keys (%v), want %d groups and the head", keys, err, groups)
	}
	const n = groups * per
	for from := uint64(0); from <= n+1; from++ {
		for limit := 0; limit <= 4; limit++ {
			got, err := s.AuditLog(ctx, from, limit)
			if err != nil {
				t.Fatal(err)
			}
			first := max(from, 1)
			want := int(n + 1 - min(first, n+1))
			if limit > 0 {
				want = min(want, limit)
			}
			if len(got) != want {
				t.Fatalf("AuditLog(%d, %d): %d entries, want %d", from, limit, len(got), want)
			}
			for i, e := range got {
				if e.Seq != first+uint64(i) {
					t.Fatalf("AuditLog(%d, %d): entry %d is seq %d, want %d", from, limit, i, e.Seq, first+uint64(i))
				}
			}
		}
	}
}
