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

// The reads that walk the whole log (AuditRaw, a search) check their
// context as they go, every 1024 groups: a caller that gives up on a long
// read gets its context's error, not the rest of the log.
func TestAudit_LongReadsCancelled(t *testing.T) {
	const groups = 1100
	be, _ := logOf(t, groups)

	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	err := be.AuditRaw(ctx, func(k, v []byte) error {
		if n++; n == 1 {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) || n != 1023 {
		t.Errorf("AuditRaw cancelled at its first key = %v after %d keys; want context.Canceled after 1023", err, n)
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
	if !errors.Is(err, context.Canceled) || n != 1023 {
		t.Errorf("AuditSearch cancelled at its first group = %v after %d groups; want context.Canceled after 1023", err, n)
	}
	n = 0
	if err := be.AuditSearch(context.Background(), []byte(`"n":`), 1000, 1000+groups, func(uint64, []byte) (bool, error) {
		n++
		return true, nil
	}); err != nil || n != groups {
		t.Errorf("AuditSearch = %v, %d groups; want %d", err, n, groups)
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

// A search reads the log from the first group of its window on (found by
// a binary search), not from the start: a search for the last group of a
// log of more than 1024 groups visits too few of them to check its
// context, which the window of GetWithAudit here cancels, and so
// completes. (Its cost is O(log n) plus the window's groups: the context
// is checked every 1024 groups visited.)
func TestAudit_SearchSkipsTheLogBeforeTheWindow(t *testing.T) {
	const groups = 1100
	be, _ := logOf(t, groups)
	last := int64(1000 + groups - 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var seqs []uint64
	_, err := be.GetWithAudit(ctx, "rec-00000", func([]byte) ([]byte, int64, int64, error) {
		cancel()
		return []byte(`"n":`), last, last, nil
	}, func(seq uint64, _ []byte) (bool, error) {
		seqs = append(seqs, seq)
		return true, nil
	})
	if err != nil || len(seqs) != 1 || seqs[0] != groups {
		t.Fatalf("a search for the last group = %v, %v; want [%d] without reading the log before it", seqs, err, groups)
	}
	// A window over the whole log visits every group, and so notices the
	// context cancelled by its window.
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	n := 0
	_, err = be.GetWithAudit(ctx, "rec-00000", func([]byte) ([]byte, int64, int64, error) {
		cancel()
		return []byte(`"n":`), 1000, last, nil
	}, func(uint64, []byte) (bool, error) { n++; return true, nil })
	if !errors.Is(err, context.Canceled) || n != 1023 {
		t.Fatalf("a search of the whole log, its context cancelled = %v after %d groups; want context.Canceled after 1023", err, n)
	}
}
