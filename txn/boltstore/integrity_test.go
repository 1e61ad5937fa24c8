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

	bolt "go.etcd.io/bbolt"

	"github.com/toolgate/toolgate/txn"
	"github.com/toolgate/toolgate/txn/boltstore"
)

const damagedRecords = 2000

// damagedStore writes records into a new store, closes it, and overwrites
// the header of a leaf page in the middle of the file with garbage. With
// unsyncedFreelist, the file is first rewritten the way bbolt leaves it
// with NoFreelistSync (no freelist page), so that opening it for writing
// makes bbolt walk every page.
func damagedStore(t *testing.T, unsyncedFreelist bool) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "d.db")
	s := openStoreAt(t, path)
	ctx := context.Background()
	for i := range damagedRecords {
		if err := s.Put(ctx, newRecord(fmt.Sprintf("rec-%05d", i), "t", "FAILED")); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	if unsyncedFreelist {
		dropStoredFreelist(t, path)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, PreLoadFreelist: true}) // tx.Page needs the freelist
	if err != nil {
		t.Fatal(err)
	}
	var leaves []int
	err = db.View(func(tx *bolt.Tx) error {
		for id := 2; ; id++ {
			p, err := tx.Page(id)
			if err != nil || p == nil {
				return nil
			}
			if p.Type == "leaf" {
				leaves = append(leaves, id)
			}
		}
	})
	pageSize := db.Info().PageSize
	db.Close()
	if err != nil || len(leaves) < 10 {
		t.Fatalf("%d leaf pages: %v", len(leaves), err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	garbage := []byte{0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee}
	_, err = f.WriteAt(garbage, int64(leaves[len(leaves)/2]*pageSize))
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// A damaged page is an error wrapping ErrCorrupt for whoever reads it, never
// a crash: bbolt panics on such pages, sometimes on a goroutine of its own.
func TestStore_DamagedPage(t *testing.T) {
	ctx := context.Background()
	readAll := func(t *testing.T, s *txn.Store) {
		t.Helper()
		if _, err := s.List(ctx, txn.Filter{}); !errors.Is(err, txn.ErrCorrupt) {
			t.Errorf("List over a damaged page = %v, want ErrCorrupt", err)
		}
		corrupt := 0
		for i := range damagedRecords {
			_, err := s.Get(ctx, fmt.Sprintf("rec-%05d", i))
			switch {
			case errors.Is(err, txn.ErrCorrupt):
				corrupt++
			case err != nil:
				t.Fatalf("Get: %v", err)
			}
		}
		if corrupt == 0 {
			t.Error("no Get met the damaged page")
		}
	}

	t.Run("read-only", func(t *testing.T) {
		s, err := txn.Open(damagedStore(t, false), &txn.Options{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		readAll(t, s)
	})

	t.Run("writer", func(t *testing.T) {
		s, err := txn.Open(damagedStore(t, false), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		readAll(t, s)
		// A write whose check reads the damaged page fails alone, and the
		// update rolled back for it does not crash either.
		corrupt := 0
		for i := range damagedRecords {
			err := s.Put(ctx, newRecord(fmt.Sprintf("rec-%05d", i), "t", "FAILED"))
			switch {
			case errors.Is(err, txn.ErrCorrupt):
				corrupt++
			case !errors.Is(err, txn.ErrExists):
				t.Fatalf("Put of an existing id = %v", err)
			}
		}
		if corrupt == 0 {
			t.Error("no Put met the damaged page")
		}
		if err := s.Put(ctx, newRecord("zzz-new", "t", "FAILED")); err != nil {
			t.Errorf("a write away from the damaged page = %v", err)
		}
	})

	t.Run("writer, freelist to rebuild", func(t *testing.T) {
		s, err := txn.Open(damagedStore(t, true), nil)
		if err == nil {
			s.Close()
		}
		if !errors.Is(err, txn.ErrCorrupt) {
			t.Fatalf("Open = %v, want ErrCorrupt", err)
		}
	})
}

// A file whose freelist bbolt must rebuild opens for writing when it is
// sound, and stores its freelist from then on.
func TestStore_UnsyncedFreelistUpgraded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "u.db")
	s := openStoreAt(t, path)
	if err := s.Put(context.Background(), newRecord("a", "t", "FAILED")); err != nil {
		t.Fatal(err)
	}
	s.Close()
	dropStoredFreelist(t, path)
	if synced, ok := boltstore.FreelistSynced(path); !ok || synced {
		t.Fatalf("before: synced %v ok %v, want a file without freelist", synced, ok)
	}
	s = openStoreAt(t, path)
	if rec, err := s.Get(context.Background(), "a"); err != nil || rec.State != "FAILED" {
		t.Fatalf("Get = %+v, %v", rec, err)
	}
	s.Close()
	if synced, ok := boltstore.FreelistSynced(path); !ok || !synced {
		t.Fatalf("after: synced %v ok %v, want the freelist stored", synced, ok)
	}
}

// dropStoredFreelist commits an update with bbolt's NoFreelistSync, which
// leaves the file without a stored freelist, as older builds wrote it.
func dropStoredFreelist(t *testing.T, path string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{NoFreelistSync: true})
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error { return tx.Bucket([]byte("meta")).Put([]byte("touch"), []byte("1")) })
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
}

// A damaged page of the audit log fails the writes that carry audit events
// with ErrCorrupt, as a damaged head does, and poisons nothing: the writes
// without events, and reads, go on.
func TestStore_DamagedAuditPage(t *testing.T) {
	path := damagedAuditStore(t)
	ctx := context.Background()
	ev := txn.AuditEvent{Data: []byte(`{"x":"` + strings.Repeat("a", 200) + `"}`)}
	s := openStoreAt(t, path)
	if err := s.Put(ctx, newRecord("new-1", "t", "FAILED"), ev); !errors.Is(err, txn.ErrCorrupt) || errors.Is(err, txn.ErrPoisoned) {
		t.Fatalf("Put with an audit event = %v, want ErrCorrupt", err)
	}
	if err := s.PutState(ctx, "ns", "k", []byte("v")); err != nil {
		t.Errorf("PutState without audit events = %v", err)
	}
	if _, err := s.Get(ctx, "rec-00001"); err != nil {
		t.Errorf("Get = %v", err)
	}
	if s.Err() != nil {
		t.Errorf("the store was poisoned: %v", s.Err())
	}
}

// damagedAuditStore writes a file whose audit log spans pages, and damages
// the root page of the log.
func damagedAuditStore(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "a.db")
	s := openStoreAt(t, path)
	ctx := context.Background()
	ev := txn.AuditEvent{Data: []byte(`{"x":"` + strings.Repeat("a", 200) + `"}`)}
	for i := range 200 {
		if err := s.Put(ctx, newRecord(fmt.Sprintf("rec-%05d", i), "t", "FAILED"), ev); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var root int
	err = db.View(func(tx *bolt.Tx) error { root = int(tx.Bucket([]byte("audit")).Root()); return nil })
	pageSize := db.Info().PageSize
	db.Close()
	if err != nil || root == 0 {
		t.Fatalf("the audit bucket's root: %d, %v", root, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteAt(bytes.Repeat([]byte{0xee}, 16), int64(root*pageSize))
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// A file without a stored freelist whose damage bbolt's check finds but no
// read trips on (two keys of a leaf swapped) is refused at Open with
// ErrCorrupt, and leaves nothing behind: the file opens again afterwards.
func TestStore_DamagedKeyOrder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "k.db")
	s := openStoreAt(t, path)
	ctx := context.Background()
	for i := range 300 {
		if err := s.Put(ctx, newRecord(fmt.Sprintf("rec-%05d", i), "t", "FAILED")); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	dropStoredFreelist(t, path)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const pageSize = 4096 // as bbolt chose on this machine; checked below
	swapped := false
	for pg := 2; (pg+1)*pageSize <= len(data) && !swapped; pg++ {
		p := data[pg*pageSize : (pg+1)*pageSize]
		if binary.LittleEndian.Uint16(p[8:]) != 0x02 || binary.LittleEndian.Uint16(p[10:]) < 4 { // a leaf of 4 or more
			continue
		}
		key := func(i int) []byte { // a leaf element: flags, pos, ksize, vsize
			e := 16 + 16*i
			pos, size := int(binary.LittleEndian.Uint32(p[e+4:])), int(binary.LittleEndian.Uint32(p[e+8:]))
			return p[e+pos : e+pos+size]
		}
		if a, b := key(1), key(2); len(a) == len(b) && bytes.HasPrefix(a, []byte("rec-")) {
			tmp := bytes.Clone(a)
			copy(a, b)
			copy(b, tmp)
			swapped = true
		}
	}
	if !swapped {
		t.Fatal("no leaf of records found (is the page size 4096?)")
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := txn.Open(path, nil); !errors.Is(err, txn.ErrCorrupt) {
		t.Fatalf("Open = %v, want ErrCorrupt", err)
	}
	ro, err := txn.Open(path, &txn.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("a read-only open after the refusal = %v: the first open left its lock", err)
	}
	ro.Close()
}
