package boltstore_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/toolgate/toolgate/txn"
	"github.com/toolgate/toolgate/txn/boltstore"
	"github.com/toolgate/toolgate/txn/driver"
)

// logOf opens a fresh file and writes n groups of one event each, made at
// 1000, 1001, ...; it returns the backend and the store over it.
func logOf(t *testing.T, n int) (*boltstore.Store, *txn.Store) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "a.db")
	be, err := boltstore.Open(path, &boltstore.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	s := txn.NewStore(be, path)
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	for i := range n {
		ev := txn.AuditEvent{Data: fmt.Appendf(nil, `{"timestamp":%d,"n":%d}`, 1000+i, i)}
		if err := s.Put(ctx, newRecord(fmt.Sprintf("rec-%05d", i), "t", "FAILED"), ev); err != nil {
			t.Fatal(err)
		}
	}
	return be, s
}

// The reads that walk the log (AuditRaw, a search, the search of
// GetWithAudit) check their context at every key they read: a caller that
// gives up on a long read gets its context's error at once, not the rest
// of the log.
func TestAudit_LongReadsCancelled(t *testing.T) {
	const groups = 5
	be, _ := logOf(t, groups)

	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	err := be.AuditRaw(ctx, func(k, v []byte) error {
		if n++; n == 1 {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) || n != 1 {
		t.Errorf("AuditRaw cancelled at its first key = %v after %d keys; want context.Canceled after 1", err, n)
	}
	n = 0
	if err := be.AuditRaw(context.Background(), func(k, v []byte) error { n++; return nil }); err != nil || n != groups+1 {
		t.Errorf("AuditRaw = %v, %d keys; want the %d groups and the head", err, n, groups)
	}

	ctx, cancel = context.WithCancel(context.Background())
	n = 0
	err = be.AuditSearch(ctx, []byte(`"n":`), 1000, 1000+groups, func(seq uint64, group []byte) (bool, error) {
		if n++; n == 1 {
			cancel()
		}
		return true, nil
	})
	if !errors.Is(err, context.Canceled) || n != 1 {
		t.Errorf("AuditSearch cancelled at its first group = %v after %d groups; want context.Canceled after 1", err, n)
	}
	n = 0
	if err := be.AuditSearch(context.Background(), []byte(`"n":`), 1000, 1000+groups, func(uint64, []byte) (bool, error) {
		n++
		return true, nil
	}); err != nil || n != groups {
		t.Errorf("AuditSearch = %v, %d groups; want %d", err, n, groups)
	}

	// The window of GetWithAudit cancels: its search reads nothing.
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	n = 0
	_, err = be.GetWithAudit(ctx, "rec-00000", func([]byte) ([]byte, int64, int64, error) {
		cancel()
		return []byte(`"n":`), 1000, 1000 + groups, nil
	}, func(uint64, []byte) (bool, error) { n++; return true, nil })
	if !errors.Is(err, context.Canceled) || n != 0 {
		t.Fatalf("GetWithAudit, its context cancelled by its window = %v after %d groups; want context.Canceled after none", err, n)
	}
}

// The binary search starts at the first group made at or after from,
// whatever the log's length: a window at each group finds that group
// alone, and the first group seq of each is its own.
func TestAudit_SearchEveryStart(t *testing.T) {
	const groups = 70
	be, _ := logOf(t, groups)
	for i := range groups {
		var seqs []uint64
		err := be.AuditSearch(context.Background(), []byte(`"n":`), int64(1000+i), int64(1000+i), func(seq uint64, _ []byte) (bool, error) {
			seqs = append(seqs, seq)
			return true, nil
		})
		if err != nil || len(seqs) != 1 || seqs[0] != uint64(i+1) {
			t.Fatalf("window at group %d: %v, %v; want [%d]", i+1, seqs, err, i+1)
		}
	}
}

// GetWithAudit returns the record's bytes with what the search found, and
// nothing but the error when the record is missing, its window fails, or
// the search fails.
func TestAudit_GetWithAuditErrors(t *testing.T) {
	be, s := logOf(t, 3)
	ctx := context.Background()
	window := func(data []byte) ([]byte, int64, int64, error) { return []byte(`"n":`), 0, 5000, nil }
	var seqs []uint64
	data, err := be.GetWithAudit(ctx, "rec-00001", window, func(seq uint64, _ []byte) (bool, error) {
		seqs = append(seqs, seq)
		return true, nil
	})
	if err != nil || len(data) == 0 || len(seqs) != 3 {
		t.Fatalf("GetWithAudit = %d bytes, %v; groups %v", len(data), err, seqs)
	}
	if stored, err := be.Get(ctx, "rec-00001"); err != nil || string(stored) != string(data) {
		t.Fatalf("GetWithAudit read %q, the record is %q (%v)", data, stored, err)
	}
	if rec, err := s.Get(ctx, "rec-00001"); err != nil || rec.ExecutionID != "rec-00001" {
		t.Fatalf("Get: %+v, %v", rec, err)
	}
	all := func(uint64, []byte) (bool, error) { return true, nil }
	if data, err := be.GetWithAudit(ctx, "nope", window, all); !errors.Is(err, driver.ErrNotFound) || data != nil {
		t.Errorf("a missing record: %q, %v; want ErrNotFound", data, err)
	}
	bad := errors.New("bad window")
	if data, err := be.GetWithAudit(ctx, "rec-00001", func([]byte) ([]byte, int64, int64, error) { return nil, 0, 0, bad }, all); !errors.Is(err, bad) || data != nil {
		t.Errorf("a failing window: %q, %v", data, err)
	}
	boom := errors.New("boom")
	if data, err := be.GetWithAudit(ctx, "rec-00001", window, func(uint64, []byte) (bool, error) { return false, boom }); !errors.Is(err, boom) || data != nil {
		t.Errorf("a failing search: %q, %v", data, err)
	}
}

// groupsOf opens a fresh file and writes groups of three events each, the
// events of group i made at times[i]; it returns the backend.
func groupsOf(t *testing.T, times []int64) *boltstore.Store {
	t.Helper()
	path := filepath.Join(t.TempDir(), "g.db")
	be, err := boltstore.Open(path, &boltstore.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	s := txn.NewStore(be, path)
	t.Cleanup(func() { _ = s.Close() })
	for i, ts := range times {
		var evs []txn.AuditEvent
		for j := range 3 {
			evs = append(evs, txn.AuditEvent{Data: fmt.Appendf(nil, `{"timestamp":%d,"g":%d,"j":%d}`, ts, i, j)})
		}
		if err := s.Put(context.Background(), newRecord(fmt.Sprintf("rec-%05d", i), "t", "FAILED"), evs...); err != nil {
			t.Fatal(err)
		}
	}
	return be
}

// AuditGroups starts at the group that holds from (groups of three
// entries: 1-3, 4-6, ...), from 0 at the first, and goes on to the last.
func TestAudit_GroupsFromTheOneHoldingFrom(t *testing.T) {
	const groups = 9
	times := make([]int64, groups)
	be := groupsOf(t, times)
	for from := uint64(0); from <= 3*groups; from++ {
		var seqs []uint64
		if err := be.AuditGroups(context.Background(), from, func(seq uint64, _ []byte) (bool, error) {
			seqs = append(seqs, seq)
			return true, nil
		}); err != nil {
			t.Fatal(err)
		}
		first := max(1, (from-1)/3*3+1)
		if from == 0 {
			first = 1
		}
		if len(seqs) == 0 || seqs[0] != first || seqs[len(seqs)-1] != 3*groups-2 || len(seqs) != int((3*groups-2-first)/3+1) {
			t.Fatalf("AuditGroups from %d: groups %v; want those from %d to %d", from, seqs, first, 3*groups-2)
		}
	}
}

// Groups made at the same time are all found by a window at that time,
// however many they are and wherever the binary search lands among them.
func TestAudit_SearchGroupsOfOneTime(t *testing.T) {
	var times []int64
	for ts := int64(1000); ts < 1010; ts++ {
		for range 1 + ts%4 {
			times = append(times, ts)
		}
	}
	be := groupsOf(t, times)
	for ts := int64(999); ts <= 1010; ts++ {
		want := 0
		for _, t := range times {
			if t == ts {
				want++
			}
		}
		var got int
		if err := be.AuditSearch(context.Background(), []byte(`"g":`), ts, ts, func(uint64, []byte) (bool, error) {
			got++
			return true, nil
		}); err != nil || got != want {
			t.Errorf("window at %d: %d groups, %v; want %d", ts, got, err, want)
		}
	}
}

// A search reads the log from the first group that has an event made at
// or after its from (found by a binary search), not from the start, nor
// from a group before that one: its cost is O(log n) plus the groups of
// its window. Here for single groups a millisecond apart and for groups of
// three events, some of one time, with gaps between the times.
func TestAudit_SearchStart(t *testing.T) {
	// check: group g (events per group each) was made at times[g].
	check := func(t *testing.T, be *boltstore.Store, times []int64, per int) {
		t.Helper()
		seqOf := func(g int) uint64 { return uint64(1 + g*per) }
		for from := times[0] - 2; from <= times[len(times)-1]+2; from++ {
			want := uint64(0)
			for g, ts := range times {
				if ts >= from {
					want = seqOf(g)
					break
				}
			}
			if got, err := boltstore.AuditSearchStart(be, from); err != nil || got != want {
				t.Fatalf("a search from %d starts at group %d (%v); want %d", from, got, err, want)
			}
		}
	}
	t.Run("one event a group", func(t *testing.T) {
		const groups = 70
		be, _ := logOf(t, groups)
		times := make([]int64, groups)
		for i := range times {
			times[i] = 1000 + int64(i)
		}
		check(t, be, times, 1)
	})
	t.Run("three events a group", func(t *testing.T) {
		var times []int64
		for ts := int64(1000); ts < 1040; ts += 3 {
			for range 1 + ts%3 {
				times = append(times, ts)
			}
		}
		check(t, groupsOf(t, times), times, 3)
	})
	t.Run("an empty log", func(t *testing.T) {
		be, _ := logOf(t, 0)
		if got, err := boltstore.AuditSearchStart(be, 0); err != nil || got != 0 {
			t.Fatalf("a search of an empty log starts at group %d (%v)", got, err)
		}
	})
}
