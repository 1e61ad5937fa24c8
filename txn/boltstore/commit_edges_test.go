package boltstore_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/wal"
	"github.com/toolgate/toolgate/txn"
	"github.com/toolgate/toolgate/txn/boltstore"
	"github.com/toolgate/toolgate/txn/driver"
	"github.com/toolgate/toolgate/txn/storetest"
)

// A write that fails after some of its changes were applied is undone in
// the file's open transaction: a key it overwrote has its old value back,
// a namespace it created is gone, and nothing of it is visible, then or
// after a reopen. It fails at its second change (before the namespace it
// creates) and at its third (after it: the namespace's removal is not the
// last undo).
func TestCommit_FailedWriteUndone(t *testing.T) {
	for _, failAt := range []int32{2, 3} {
		t.Run(fmt.Sprint("change ", failAt), func(t *testing.T) { failedWriteUndone(t, failAt) })
	}
}

func failedWriteUndone(t *testing.T, failAt int32) {
	path := filepath.Join(t.TempDir(), "u.db")
	var armed atomic.Bool
	var calls atomic.Int32
	boom := errors.New("boom")
	open := func() (*boltstore.Store, *txn.Store) {
		be, err := boltstore.Open(path, &boltstore.Options{NoSync: true, Failpoint: func(step string) error {
			if armed.Load() && step == driver.StepApplyWrite && calls.Add(1) == failAt {
				return boom
			}
			return nil
		}})
		if err != nil {
			t.Fatal(err)
		}
		return be, txn.NewStore(be, path)
	}
	be, s := open()
	ctx := context.Background()
	tx, err := s.Begin(ctx, newRecord("seed", "t", "EXECUTING"))
	if err != nil {
		t.Fatal(err)
	}
	tx.Put("a", "k", []byte("old"))
	if err := tx.Commit(ctx, newRecord("seed", "t", "COMMITTED")); err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]string{"a": {"k": "old"}}

	tx, err = s.Begin(ctx, newRecord("w", "t", "EXECUTING"))
	if err != nil {
		t.Fatal(err)
	}
	tx.Put("a", "k", []byte("new"))
	tx.Put("b", "x", []byte("created"))
	tx.Put("c", "y", []byte("created too"))
	armed.Store(true)
	if err := tx.Commit(ctx, newRecord("w", "t", "COMMITTED")); !errors.Is(err, boom) {
		t.Fatalf("Commit failing at its change %d = %v", failAt, err)
	}
	armed.Store(false)
	if got, err := be.DumpState(ctx); err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("state after the failed commit = %v, %v; want %v", got, err, want)
	}
	if s.Err() != nil {
		t.Fatalf("the store was poisoned: %v", s.Err())
	}
	s.Close()
	be, s = open()
	defer s.Close()
	if got, err := be.DumpState(ctx); err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("state after reopening = %v, %v; want %v", got, err, want)
	}
}

// Concurrent writes share groups: every one acknowledged is stored, with
// its audit events, in a chain audit verify accepts, whichever of its
// group's neighbours carried events and whichever did not.
func TestCommit_ConcurrentWritesAllKept(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.db")
	s := openStoreAt(t, path)
	ctx := context.Background()
	const writers = 64
	var wg sync.WaitGroup
	var events atomic.Uint64
	for i := range writers {
		wg.Go(func() {
			id := fmt.Sprintf("rec-%03d", i)
			var evs []txn.AuditEvent
			if i%3 != 0 {
				evs = append(evs, storetest.Event(id))
				events.Add(1)
			}
			if err := s.Put(ctx, newRecord(id, "t", "FAILED"), evs...); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	recs, err := s.List(ctx, txn.Filter{})
	if err != nil || len(recs) != writers {
		t.Fatalf("List = %d records, %v; want %d", len(recs), err, writers)
	}
	storetest.VerifyChain(t, s, events.Load())
}

// A store whose log passes the checkpoint size often (here a few
// kilobytes) checkpoints at each such group, stays healthy, and reopened
// holds every write.
func TestCommit_FrequentCheckpoints(t *testing.T) {
	restore := boltstore.SetCrashTest(wal.Open, 4096)
	defer restore()
	path := filepath.Join(t.TempDir(), "cp.db")
	be, err := boltstore.Open(path, &boltstore.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	s := txn.NewStore(be, path)
	ctx := context.Background()
	const n = 200
	for i := range n {
		if err := s.Put(ctx, newRecord(fmt.Sprintf("rec-%03d", i), "t", "FAILED"), storetest.Event(fmt.Sprint(i))); err != nil {
			t.Fatalf("Put %d: %v", i, err)
		}
	}
	if err := s.Err(); err != nil {
		t.Fatalf("the store after its checkpoints: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStoreAt(t, path)
	if recs, err := s.List(ctx, txn.Filter{}); err != nil || len(recs) != n {
		t.Fatalf("after reopening: %d records, %v", len(recs), err)
	}
	storetest.VerifyChain(t, s, n)
}

// Every read checks its context first: a done one is its error.
func TestStore_ReadsCheckContext(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.db")
	s := openStoreAt(t, path)
	if err := s.Put(context.Background(), newRecord("a", "t", "FAILED")); err != nil {
		t.Fatal(err)
	}
	be := s.Driver()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := be.Get(ctx, "a"); !errors.Is(err, context.Canceled) {
		t.Errorf("Get with a done context = %v", err)
	}
	if _, err := be.AuditHead(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("AuditHead with a done context = %v", err)
	}
	if err := be.Put(ctx, "b", nil, nil, []byte("x"), nil); !errors.Is(err, context.Canceled) {
		t.Errorf("Put with a done context = %v", err)
	}
}

// When the audit log cannot take events (a damaged page of it), the
// writes of a group that carry events fail with ErrCorrupt and those that
// carry none, in the same group, are stored: the first group is held at
// its commit until many writes queue behind it, so that they share the
// next one.
func TestCommit_DamagedAuditFailsOnlyWritesWithEvents(t *testing.T) {
	path := damagedAuditStore(t)
	var be *boltstore.Store
	var held atomic.Bool
	be, err := boltstore.Open(path, &boltstore.Options{NoSync: true, Failpoint: func(step string) error {
		if step == driver.StepCommit && held.CompareAndSwap(false, true) {
			for i := 0; i < 5000 && be.Queued() < 40; i++ {
				time.Sleep(time.Millisecond)
			}
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	s := txn.NewStore(be, path)
	defer s.Close()
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() {
			id := fmt.Sprintf("new-%03d", i)
			if i%2 == 0 {
				if err := s.Put(ctx, newRecord(id, "t", "FAILED"), storetest.Event(id)); !errors.Is(err, txn.ErrCorrupt) {
					t.Errorf("%s with an event: %v; want ErrCorrupt", id, err)
				}
				return
			}
			if err := s.Put(ctx, newRecord(id, "t", "FAILED")); err != nil {
				t.Errorf("%s without events: %v", id, err)
			}
		})
	}
	wg.Wait()
	if b := be.Batches(); b >= 64 {
		t.Logf("%d groups for 64 writes: none shared one", b)
	}
	for i := range 64 {
		_, err := s.Get(ctx, fmt.Sprintf("new-%03d", i))
		if stored := err == nil; stored != (i%2 == 1) {
			t.Errorf("new-%03d stored %v (%v)", i, stored, err)
		}
	}
	if s.Err() != nil {
		t.Errorf("the store was poisoned: %v", s.Err())
	}
}

// The state reader a write's guard is given scans at most n entries (n <=
// 0: all), from the prefix on, in key order.
func TestStore_GuardScanLimit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "g.db")
	be, err := boltstore.Open(path, &boltstore.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	ctx := context.Background()
	seed := driver.Writes{"ns": {}}
	for i := range 5 {
		seed["ns"][fmt.Sprintf("k%d", i)] = driver.Op{Value: []byte("v")}
	}
	if err := be.UpdateState(ctx, func(driver.StateReader) (driver.Writes, error) { return seed, nil }, nil); err != nil {
		t.Fatal(err)
	}
	err = be.UpdateState(ctx, func(r driver.StateReader) (driver.Writes, error) {
		for _, tc := range []struct {
			prefix  string
			n, want int
		}{{"k", 0, 5}, {"k", -1, 5}, {"k", 2, 2}, {"k", 5, 5}, {"k", 9, 5}, {"k3", 0, 1}, {"x", 0, 0}} {
			es, err := r.Scan("ns", tc.prefix, tc.n)
			if err != nil || len(es) != tc.want {
				t.Errorf("Scan(%q, %d) = %d entries, %v; want %d", tc.prefix, tc.n, len(es), err, tc.want)
			}
			if len(es) > 0 && es[0].Key != tc.prefix && es[0].Key != "k0" {
				t.Errorf("Scan(%q, %d) starts at %q", tc.prefix, tc.n, es[0].Key)
			}
		}
		return nil, nil
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
}

// A group ends with a checkpoint once the log has reached the checkpoint
// size: here a log of exactly that size after the group, where a size one
// byte larger waits for the next group.
func TestCommit_CheckpointAtTheSize(t *testing.T) {
	ctx := context.Background()
	// put opens a fresh file checkpointing at limit, writes one record,
	// and returns the checkpoints that write made and the log's size.
	put := func(limit int64) (checkpoints uint64, size int64) {
		t.Helper()
		restore := boltstore.SetCrashTest(wal.Open, limit)
		defer restore()
		be, err := boltstore.Open(filepath.Join(t.TempDir(), "c.db"), &boltstore.Options{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		defer be.Close()
		before := boltstore.Checkpoints(be)
		if err := be.Put(ctx, "a", nil, nil, []byte("the record"), nil); err != nil {
			t.Fatal(err)
		}
		return boltstore.Checkpoints(be) - before, boltstore.LogSize(be)
	}
	n, size := put(1 << 30)
	if n != 0 || size == 0 {
		t.Fatalf("a write far below the checkpoint size: %d checkpoints, a log of %d bytes", n, size)
	}
	if n, left := put(size); n != 1 || left != 0 {
		t.Errorf("a write that brings the log to the checkpoint size: %d checkpoints, %d bytes left in the log; want 1, 0", n, left)
	}
	if n, left := put(size + 1); n != 0 || left != size {
		t.Errorf("a write that leaves the log a byte short of the checkpoint size: %d checkpoints, %d bytes in the log; want 0, %d", n, left, size)
	}
}

// The audit group buffer of one update is kept for the next up to
// MaxKept bytes of capacity; a larger one (a huge group) is let go.
func TestCommit_AuditBufferKeptUpToMaxKept(t *testing.T) {
	for _, c := range []int{0, 512, boltstore.MaxKept} {
		if got := boltstore.KeptAfterRelease(c); got != c {
			t.Errorf("a buffer of capacity %d: %d kept; want all of it", c, got)
		}
	}
	if got := boltstore.KeptAfterRelease(boltstore.MaxKept + 1); got != 0 {
		t.Errorf("a buffer of capacity %d: %d kept; want none", boltstore.MaxKept+1, got)
	}
}
