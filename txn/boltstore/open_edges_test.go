package boltstore_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/toolgate/toolgate/internal/wal"
	"github.com/toolgate/toolgate/txn"
	"github.com/toolgate/toolgate/txn/boltstore"
	"github.com/toolgate/toolgate/txn/driver"
)

// What Open does with a file left in every state short of a clean one: a
// log its writer did not close, a log that cannot be opened, a checkpoint
// mark that is damaged, buckets missing, an older format to upgrade.

// copyFile copies src to dst (a crash's leftovers, taken while the
// writer still runs).
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// A read-only open of a file whose writer did not close it applies what
// its log holds first (by a writer's open, which then closes and removes
// the log), and so reads every write the writer acknowledged.
func TestOpen_ReadOnlyAppliesHotLog(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	live := filepath.Join(dir, "live.db")
	s := openStoreAt(t, live)
	for i := range 5 {
		if err := s.Put(ctx, newRecord(fmt.Sprintf("rec-%d", i), "t", "FAILED")); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.UpdateState(ctx, func(v *txn.StateView) error {
		for _, k := range []string{"x", "y", "z"} {
			if err := v.Put("ns", k, []byte("v"+k)); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.UpdateState(ctx, func(v *txn.StateView) error {
		if err := v.Delete("ns", "y"); err != nil {
			return err
		}
		return v.Delete("gone", "k") // a namespace that does not exist
	}); err != nil {
		t.Fatal(err)
	}
	// The writer still runs: its file is its last checkpoint's (Open's,
	// before any write) and its writes are in its log.
	crashed := filepath.Join(dir, "crashed.db")
	copyFile(t, live, crashed)
	copyFile(t, boltstore.WALPath(live), boltstore.WALPath(crashed))
	if fi, err := os.Stat(boltstore.WALPath(crashed)); err != nil || fi.Size() == 0 {
		t.Fatalf("the writer's log: %v, %v; want one with entries", fi, err)
	}

	ro, err := txn.Open(crashed, &txn.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("read-only open of a file with a hot log: %v", err)
	}
	defer ro.Close()
	for i := range 5 {
		if _, err := ro.Get(ctx, fmt.Sprintf("rec-%d", i)); err != nil {
			t.Errorf("rec-%d after the log was applied: %v", i, err)
		}
	}
	if got, err := ro.StateValues(ctx, "ns"); err != nil || len(got) != 2 || string(got["z"]) != "vz" || got["y"] != nil {
		t.Errorf("the state after the log was applied: %q, %v; want x and z (y deleted)", got, err)
	}
	if _, err := os.Stat(boltstore.WALPath(crashed)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the applied log is still there: %v", err)
	}
}

// A read-only open of a file whose writer still runs (its log is hot, its
// lock held) fails with ErrLocked, saying that the log could not be
// applied.
func TestOpen_ReadOnlyHotLogOfLiveWriter(t *testing.T) {
	path := filepath.Join(t.TempDir(), "live.db")
	s := openStoreAt(t, path)
	if err := s.Put(context.Background(), newRecord("a", "t", "FAILED")); err != nil {
		t.Fatal(err)
	}
	_, err := txn.Open(path, &txn.Options{ReadOnly: true, Timeout: 50 * time.Millisecond})
	if !errors.Is(err, txn.ErrLocked) || !strings.Contains(err.Error(), "was not closed by its writer") {
		t.Fatalf("read-only open while the writer runs = %v; want ErrLocked, the log not applied", err)
	}
}

// A log file that holds nothing (empty) is not a hot log: a read-only open
// leaves it alone and writes nothing, even while another reader holds
// the file (a writer's open would wait for it).
func TestOpen_ReadOnlyEmptyLogUntouched(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.db")
	s := openStoreAt(t, path)
	if err := s.Put(context.Background(), newRecord("a", "t", "FAILED")); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(boltstore.WALPath(path)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Close left its log: %v", err)
	}
	first, err := txn.Open(path, &txn.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	if err := os.WriteFile(boltstore.WALPath(path), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	second, err := txn.Open(path, &txn.Options{ReadOnly: true, Timeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatalf("read-only open beside another reader, with an empty log: %v", err)
	}
	defer second.Close()
	if _, err := second.Get(context.Background(), "a"); err != nil {
		t.Errorf("Get: %v", err)
	}
	if _, err := os.Stat(boltstore.WALPath(path)); err != nil {
		t.Errorf("the empty log: %v; a read-only open removed it", err)
	}
}

// A writer's open that cannot start its log fails, and leaves the file
// unlocked and as it was: the log's path taken by a directory; a damaged
// checkpoint mark in the file (after the log was opened and the first
// write transaction begun).
func TestOpen_LogStartFails(t *testing.T) {
	t.Run("log path is a directory", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "t.db")
		if err := os.Mkdir(boltstore.WALPath(path), 0o700); err != nil {
			t.Fatal(err)
		}
		s, err := boltstore.Open(path, &boltstore.Options{NoSync: true, Timeout: 50 * time.Millisecond})
		if err == nil {
			s.Close()
			t.Fatal("Open with a directory for its log succeeded")
		}
		if !strings.Contains(err.Error(), "write-ahead log") {
			t.Errorf("Open = %v; want it to name the write-ahead log", err)
		}
		if err := os.Remove(boltstore.WALPath(path)); err != nil {
			t.Fatal(err)
		}
		s, err = boltstore.Open(path, &boltstore.Options{NoSync: true, Timeout: 50 * time.Millisecond})
		if err != nil {
			t.Fatalf("Open after the failed one: %v (its lock was left)", err)
		}
		s.Close()
	})
	t.Run("damaged checkpoint mark", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "t.db")
		s := openStoreAt(t, path)
		if err := s.Put(context.Background(), newRecord("a", "t", "FAILED")); err != nil {
			t.Fatal(err)
		}
		s.Close()
		db, err := bolt.Open(path, 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = db.Update(func(tx *bolt.Tx) error { return tx.Bucket([]byte("meta")).Put([]byte("wal"), []byte{1, 2, 3}) })
		db.Close()
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			s, err := boltstore.Open(path, &boltstore.Options{NoSync: true, Timeout: 50 * time.Millisecond})
			if err == nil {
				s.Close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, driver.ErrCorrupt) {
				t.Fatalf("Open of a file whose checkpoint mark is 3 bytes = %v; want ErrCorrupt", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("Open of a damaged checkpoint mark did not return: it left its write transaction open")
		}
		ro, err := txn.Open(path, &txn.Options{ReadOnly: true, Timeout: 50 * time.Millisecond})
		if err != nil {
			t.Fatalf("read-only open after the refusal: %v (the lock was left)", err)
		}
		if _, err := ro.Get(context.Background(), "a"); err != nil {
			t.Errorf("Get: %v", err)
		}
		ro.Close()
	})
}

// writeBolt creates a bbolt file at path with the given buckets and puts.
func writeBolt(t *testing.T, path string, buckets []string, puts map[string]map[string][]byte) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, name := range buckets {
			if _, err := tx.CreateBucketIfNotExists([]byte(name)); err != nil {
				return err
			}
		}
		for bucket, kv := range puts {
			for k, v := range kv {
				if err := tx.Bucket([]byte(bucket)).Put([]byte(k), v); err != nil {
					return err
				}
			}
		}
		return nil
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
}

func format(v uint64) map[string][]byte {
	return map[string][]byte{"format": binary.BigEndian.AppendUint64(nil, v)}
}

// A read-only open checks the file without changing it: a file without
// the records' buckets is damaged (ErrCorrupt); one of an older format is
// not upgraded (ErrIncompatible).
func TestOpen_ReadOnlyChecks(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name    string
		buckets []string
		want    error
	}{
		{"no executions bucket", []string{"meta", "state"}, driver.ErrCorrupt},
		{"no state bucket", []string{"meta", "executions"}, driver.ErrCorrupt},
		{"complete", []string{"meta", "executions", "state"}, nil},
	} {
		path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".db")
		writeBolt(t, path, tc.buckets, map[string]map[string][]byte{"meta": format(3)})
		s, err := boltstore.Open(path, &boltstore.Options{ReadOnly: true})
		if err == nil {
			s.Close()
		}
		if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("%s: read-only Open = %v; want %v", tc.name, err, tc.want)
		}
	}
	old := filepath.Join(dir, "old.db")
	writeBolt(t, old, []string{"meta", "executions", "state"}, map[string]map[string][]byte{"meta": format(2)})
	if _, err := boltstore.Open(old, &boltstore.Options{ReadOnly: true}); !errors.Is(err, driver.ErrIncompatible) {
		t.Errorf("read-only Open of format 2 = %v; want ErrIncompatible", err)
	}
}

// format2 writes a file of format 2 holding a final record and a claim
// (JSON, as format 2 stored them), and returns its bytes.
func format2(t *testing.T, path string, final, claim []byte) []byte {
	t.Helper()
	writeBolt(t, path, []string{"meta", "executions", "state", "executing", "audit"}, map[string]map[string][]byte{
		"meta":       format(2),
		"executions": {"exec-final": final},
		"executing":  {"exec-claim": claim},
	})
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The upgrade of a format 2 file re-encodes every record, final ones and
// claims, with Options.UpgradeRecord, in the writer's first update, all or
// nothing: a record it cannot upgrade (a *DecodeError: ErrCorrupt; another
// error: that error), or no UpgradeRecord at all, fails the open and
// leaves the file byte for byte as it was.
func TestOpen_UpgradeFormat2(t *testing.T) {
	final, claim := []byte(`{"id":"final"}`), []byte(`{"id":"claim"}`)
	upper := func(old []byte) ([]byte, error) { return bytes.ToUpper(old), nil }
	boom := errors.New("boom")
	for _, tc := range []struct {
		name    string
		upgrade func([]byte) ([]byte, error)
		want    error  // nil: upgraded
		msg     string // in the error
	}{
		{"no UpgradeRecord", nil, errors.New(""), "no record upgrade given"},
		{"not format 2", func(old []byte) ([]byte, error) {
			if bytes.Contains(old, []byte("claim")) {
				return nil, &boltstore.DecodeError{Err: errors.New("bad json")}
			}
			return upper(old)
		}, driver.ErrCorrupt, `record "exec-claim" in executing is not format 2 JSON: bad json`},
		{"upgrade fails", func(old []byte) ([]byte, error) { return nil, boom }, boom, `upgrading format 2 to 3: record "exec-final" in executions: boom`},
		{"upgraded", upper, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "old.db")
			before := format2(t, path, final, claim)
			s, err := boltstore.Open(path, &boltstore.Options{NoSync: true, UpgradeRecord: tc.upgrade})
			if tc.want != nil {
				if err == nil {
					s.Close()
					t.Fatal("Open upgraded the file")
				}
				if tc.want.Error() != "" && !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
					t.Fatalf("Open = %v; want %v, %q", err, tc.want, tc.msg)
				}
				after, rerr := os.ReadFile(path)
				if rerr != nil || !bytes.Equal(before, after) {
					t.Fatalf("the failed upgrade changed the file (%v)", rerr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			defer s.Close()
			ctx := context.Background()
			if got, err := s.Get(ctx, "exec-final"); err != nil || string(got) != `{"ID":"FINAL"}` {
				t.Errorf("the final record after the upgrade: %q, %v", got, err)
			}
			if ids, err := s.Claims(ctx); err != nil || len(ids) != 1 || ids[0] != "exec-claim" {
				t.Errorf("the claims after the upgrade: %v, %v", ids, err)
			}
			if got, err := s.Describe(ctx); err != nil || got != "bbolt file, format 3" {
				t.Errorf("Describe = %q, %v", got, err)
			}
		})
	}
}

// A format this build has no upgrade from (1), or one newer than its own
// (4), is refused with ErrIncompatible, the file left as it was.
func TestOpen_FormatWithoutUpgrade(t *testing.T) {
	for _, v := range []uint64{1, 4} {
		path := filepath.Join(t.TempDir(), "old.db")
		writeBolt(t, path, []string{"meta", "executions", "state", "executing", "audit"}, map[string]map[string][]byte{"meta": format(v)})
		before, _ := os.ReadFile(path)
		s, err := boltstore.Open(path, &boltstore.Options{NoSync: true, UpgradeRecord: func(b []byte) ([]byte, error) { return b, nil }})
		if err == nil {
			s.Close()
		}
		if !errors.Is(err, driver.ErrIncompatible) || !strings.Contains(err.Error(), fmt.Sprintf("format version %d", v)) {
			t.Errorf("Open of format %d = %v; want ErrIncompatible naming it", v, err)
		}
		if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
			t.Errorf("the refused open of format %d changed the file", v)
		}
	}
}

// Describe names the backend and its format, and fails like every read
// once the store is closed.
func TestStore_Describe(t *testing.T) {
	s, err := boltstore.Open(filepath.Join(t.TempDir(), "t.db"), &boltstore.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.Describe(context.Background()); err != nil || got != "bbolt file, format 3" {
		t.Errorf("Describe = %q, %v", got, err)
	}
	s.Close()
	if got, err := s.Describe(context.Background()); !errors.Is(err, driver.ErrClosed) || got != "" {
		t.Errorf("Describe after Close = %q, %v; want ErrClosed", got, err)
	}
}

// Syncs counts the syncs of the log and bbolt's: a durable write adds at
// least one, and the count never goes back, Close's log included.
func TestStore_SyncsCount(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.db")
	s, err := boltstore.Open(path, &boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st := txn.NewStore(s, path)
	ctx := context.Background()
	prev := s.Syncs()
	for i := range 3 {
		if err := st.Put(ctx, newRecord(fmt.Sprintf("rec-%d", i), "t", "FAILED")); err != nil {
			t.Fatal(err)
		}
		n := s.Syncs()
		if n <= prev || n > prev+4 {
			t.Fatalf("Syncs after durable write %d = %d, before %d; want one to four more", i, n, prev)
		}
		prev = n
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if n := s.Syncs(); n < prev+2 || n > prev+4 {
		t.Errorf("Syncs after Close = %d, before %d; want its checkpoint's two more (bbolt's commit), the closed log's kept", n, prev)
	}
}

// A write that fails (its apply) makes nothing durable: no sync, and its
// group, left empty, is not applied again.
func TestStore_FailedWriteSyncsNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.db")
	boom := errors.New("boom")
	var fail bool
	s, err := boltstore.Open(path, &boltstore.Options{Failpoint: func(step string) error {
		if fail && step == driver.StepAudit {
			return boom
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	st := txn.NewStore(s, path)
	defer st.Close()
	ctx := context.Background()
	if err := st.Put(ctx, newRecord("a", "t", "FAILED")); err != nil {
		t.Fatal(err)
	}
	before, batches := s.Syncs(), s.Batches()
	fail = true
	if err := st.Put(ctx, newRecord("b", "t", "FAILED")); !errors.Is(err, boom) {
		t.Fatalf("Put failing at its audit step = %v", err)
	}
	if n := s.Syncs(); n != before {
		t.Errorf("Syncs after a failed write = %d, before %d; want none", n, before)
	}
	if n := s.Batches(); n != batches+1 {
		t.Errorf("the failed write took %d updates; want one (nothing is left to redo)", n-batches)
	}
}

// Open waits DefaultTimeout for the lock when Options.Timeout is zero, and
// then fails with ErrLocked (it does not wait forever).
func TestOpen_ZeroTimeoutIsTheDefault(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.db")
	holder := openStoreAt(t, path)
	defer holder.Close()
	done := make(chan error, 1)
	go func() {
		s, err := boltstore.Open(path, &boltstore.Options{NoSync: true})
		if err == nil {
			s.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, driver.ErrLocked) {
			t.Fatalf("Open of a locked file, zero Timeout = %v; want ErrLocked", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Open of a locked file with a zero Timeout still waits: it should give up after DefaultTimeout")
	}
}

// Close removes the log it emptied, and does not fail when the log is
// already gone.
func TestClose_LogAlreadyRemoved(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.db")
	s, err := boltstore.Open(path, &boltstore.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	st := txn.NewStore(s, path)
	if err := st.Put(context.Background(), newRecord("a", "t", "FAILED")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(boltstore.WALPath(path)); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatalf("Close with its log removed = %v", err)
	}
	ro, err := txn.Open(path, &txn.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if _, err := ro.Get(context.Background(), "a"); err != nil {
		t.Errorf("the write after Close: %v (the checkpoint at Close holds it)", err)
	}
}

// crashCopy copies the file at path and its log, as a crash (or a lost
// power supply with everything synced) would leave them, to dst.
func crashCopy(t *testing.T, path, dst string) {
	t.Helper()
	copyFile(t, path, dst)
	copyFile(t, boltstore.WALPath(path), boltstore.WALPath(dst))
}

// The log goes on numbering its entries from the file's checkpoint on,
// however the last run ended: after a crash that left a log the file
// already holds (the checkpoint committed, the log not yet emptied), and
// after the checkpoints of a run, the writes a later crash leaves in the
// log are applied by the next Open, none skipped as if the file held it.
func TestOpen_LogNumberingAfterCheckpoints(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	put := func(s *txn.Store, from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			if err := s.Put(ctx, newRecord(fmt.Sprintf("rec-%03d", i), "t", "FAILED")); err != nil {
				t.Fatal(err)
			}
		}
	}
	check := func(path string, n int) {
		t.Helper()
		s := openStoreAt(t, path)
		recs, err := s.List(ctx, txn.Filter{})
		if err != nil || len(recs) != n {
			t.Fatalf("%s: %d records, %v; want %d", filepath.Base(path), len(recs), err, n)
		}
		s.Close()
	}

	// A log whose entries the file holds already.
	live := filepath.Join(dir, "live.db")
	s := openStoreAt(t, live)
	put(s, 0, 5)
	crashed := filepath.Join(dir, "crashed.db")
	crashCopy(t, live, crashed)
	s.Close()
	staleLog, err := os.ReadFile(boltstore.WALPath(crashed))
	if err != nil {
		t.Fatal(err)
	}
	check(crashed, 5) // applies the log, checkpoints, removes it
	if err := os.WriteFile(boltstore.WALPath(crashed), staleLog, 0o600); err != nil {
		t.Fatal(err)
	}
	s = openStoreAt(t, crashed) // every entry of the log is in the file
	put(s, 5, 8)
	again := filepath.Join(dir, "again.db")
	crashCopy(t, crashed, again)
	s.Close()
	check(again, 8)

	// Checkpoints during a run.
	restore := boltstore.SetCrashTest(wal.Open, 2048)
	defer restore()
	busy := filepath.Join(dir, "busy.db")
	s = openStoreAt(t, busy)
	put(s, 0, 100)
	after := filepath.Join(dir, "after.db")
	crashCopy(t, busy, after)
	s.Close()
	restore()
	check(after, 100)
}

// appendLogEntry appends an entry holding payload to the log of the
// closed file at path, numbered as the next one the file does not hold.
func appendLogEntry(t *testing.T, path string, payload []byte) {
	t.Helper()
	var applied uint64
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	db.View(func(tx *bolt.Tx) error {
		applied = binary.BigEndian.Uint64(tx.Bucket([]byte("meta")).Get([]byte("wal")))
		return nil
	})
	db.Close()
	l, _, err := wal.Open(boltstore.WALPath(path), applied)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.Reset(applied + 1); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(payload); err != nil {
		t.Fatal(err)
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
}

// A log entry whose changes are malformed (a length that runs past the
// entry, a length cut short, a header cut short, a field missing, an
// unknown kind) fails the writer's Open with ErrCorrupt, saying what is
// wrong, and applies none of it to the file.
func TestOpen_MalformedLogEntry(t *testing.T) {
	for name, tc := range map[string]struct {
		payload []byte
		want    string
	}{
		"field past the entry": {[]byte{1, 0, 3, 'a'}, "a truncated field"},               // a put in meta, its key 3 bytes long, 1 left
		"field length cut":     {[]byte{1, 0, 0x80}, "a truncated field"},                 // the key's length, a varint cut short
		"value length cut":     {[]byte{1, 0, 1, 'k', 0x80}, "a truncated field"},         // the value's length cut short
		"header cut":           {[]byte{1, 0, 1, 'k', 1, 'v', 1}, "a truncated header"},   // a second change of one byte
		"key missing":          {[]byte{1, 0, 1, 'k', 1, 'v', 1, 0}, "a truncated field"}, // a second change of its header alone
		"unknown kind":         {[]byte{9, 0, 1, 'k'}, "an unknown kind (9)"},
		"namespace length cut": {[]byte{1, 4, 0x80}, "a truncated field"},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "t.db")
			s := openStoreAt(t, path)
			if err := s.Put(context.Background(), newRecord("a", "t", "FAILED")); err != nil {
				t.Fatal(err)
			}
			s.Close()
			appendLogEntry(t, path, tc.payload)
			if st, err := boltstore.Open(path, &boltstore.Options{NoSync: true}); !errors.Is(err, driver.ErrCorrupt) || !strings.Contains(err.Error(), tc.want) {
				if err == nil {
					st.Close()
				}
				t.Fatalf("Open with a malformed log entry = %v; want ErrCorrupt saying %q", err, tc.want)
			}
			if err := os.Remove(boltstore.WALPath(path)); err != nil {
				t.Fatal(err)
			}
			s = openStoreAt(t, path)
			if _, err := s.Get(context.Background(), "a"); err != nil {
				t.Errorf("the file's record after the refused open: %v", err)
			}
		})
	}
}

// The writer's Open applies a log entry's state changes, each in its
// namespace: puts (a namespace created by the first), and a delete, also
// of a key in a namespace the file does not have (nothing to do).
func TestOpen_LogStateChangesApplied(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.db")
	s := openStoreAt(t, path)
	if err := s.Put(context.Background(), newRecord("a", "t", "FAILED")); err != nil {
		t.Fatal(err)
	}
	s.Close()
	const put, del, state = 1, 2, 4
	appendLogEntry(t, path, []byte{
		put, state, 2, 'n', 's', 1, 'k', 1, 'v',
		put, state, 2, 'n', 's', 2, 'k', '2', 2, 'v', '2',
		put, state, 2, 'n', 's', 1, 'x', 1, 'y',
		del, state, 2, 'n', 's', 1, 'x',
		del, state, 4, 'n', 'o', 'n', 'e', 1, 'k',
	})
	be, err := boltstore.Open(path, &boltstore.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := be.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.View(func(tx *bolt.Tx) error {
		state := tx.Bucket([]byte("state"))
		ns := state.Bucket([]byte("ns"))
		if ns == nil {
			t.Fatal("the namespace of the log's puts is missing")
		}
		got := map[string]string{}
		ns.ForEach(func(k, v []byte) error { got[string(k)] = string(v); return nil })
		if len(got) != 2 || got["k"] != "v" || got["k2"] != "v2" {
			t.Errorf("the namespace holds %v; want k=v, k2=v2", got)
		}
		if state.Bucket([]byte("none")) != nil {
			t.Error("a delete in a missing namespace created it")
		}
		return nil
	})
}
