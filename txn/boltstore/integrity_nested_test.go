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

	"github.com/toolgate/toolgate/txn"
	"github.com/toolgate/toolgate/txn/boltstore"
)

// damageLeafKeys finds, in the file at path (pages of 4096 bytes), the
// first leaf page of 4 or more keys starting with prefix, and passes its
// first two equal-length keys after the first to edit, then writes the
// file back.
func damageLeafKeys(t *testing.T, path, prefix string, edit func(a, b []byte)) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const pageSize = 4096 // as bbolt chose on this machine; checked below
	for pg := 2; (pg+1)*pageSize <= len(data); pg++ {
		p := data[pg*pageSize : (pg+1)*pageSize]
		if binary.LittleEndian.Uint16(p[8:]) != 0x02 || binary.LittleEndian.Uint16(p[10:]) < 4 { // a leaf of 4 or more
			continue
		}
		key := func(i int) []byte { // a leaf element: flags, pos, ksize, vsize
			e := 16 + 16*i
			pos, size := int(binary.LittleEndian.Uint32(p[e+4:])), int(binary.LittleEndian.Uint32(p[e+8:]))
			return p[e+pos : e+pos+size]
		}
		if a, b := key(1), key(2); len(a) == len(b) && bytes.HasPrefix(a, []byte(prefix)) {
			edit(a, b)
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("no leaf of keys %q found (is the page size 4096?)", prefix)
}

// A file without a stored freelist is walked before a writer's open, every
// bucket and every bucket in one (the state's namespaces): keys that are
// not in strictly increasing order anywhere (two swapped; one written over
// by its neighbour, so that it appears twice) refuse the open with
// ErrCorrupt naming the bucket, where bbolt's rebuild would crash the
// process.
func TestOpen_DamagedNamespaceKeys(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(a, b []byte)
	}{
		{"swapped", func(a, b []byte) {
			tmp := bytes.Clone(a)
			copy(a, b)
			copy(b, tmp)
		}},
		{"duplicated", func(a, b []byte) { copy(b, a) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "k.db")
			s := openStoreAt(t, path)
			ctx := context.Background()
			for i := range 300 {
				if err := s.PutState(ctx, "ns", fmt.Sprintf("key-%05d", i), []byte("some value of a state key")); err != nil {
					t.Fatal(err)
				}
			}
			s.Close()
			dropStoredFreelist(t, path)
			damageLeafKeys(t, path, "key-", tc.edit)
			_, err := txn.Open(path, nil)
			if !errors.Is(err, txn.ErrCorrupt) || !strings.Contains(err.Error(), `bucket "state": bucket "ns"`) {
				t.Fatalf("Open = %v; want ErrCorrupt naming the namespace's bucket", err)
			}
			ro, err := txn.Open(path, &txn.Options{ReadOnly: true})
			if err != nil {
				t.Fatalf("a read-only open after the refusal = %v: the first open left its lock", err)
			}
			ro.Close()
		})
	}
}

// The walk before a writer's open of a file without a stored freelist
// opens the file itself: a lock another process holds is ErrLocked, after
// the timeout, as for any open.
func TestOpen_UnsyncedFreelistLocked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "l.db")
	s := openStoreAt(t, path)
	if err := s.Put(context.Background(), newRecord("a", "t", "FAILED")); err != nil {
		t.Fatal(err)
	}
	s.Close()
	dropStoredFreelist(t, path)
	holder, err := bolt.Open(path, 0o600, &bolt.Options{NoFreelistSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	if synced, ok := boltstore.FreelistSynced(path); !ok || synced {
		t.Fatalf("synced %v ok %v; want a file without freelist", synced, ok)
	}
	_, err = txn.Open(path, &txn.Options{Timeout: 50 * time.Millisecond})
	if !errors.Is(err, txn.ErrLocked) {
		t.Fatalf("Open of a locked file without freelist = %v; want ErrLocked", err)
	}
}
