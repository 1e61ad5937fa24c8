package boltstore_test

import (
	"context"
	"encoding/binary"
	"hash/fnv"
	"os"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/toolgate/toolgate/txn/boltstore"
)

// TestFreelistSynced_Metas: whether a file stores its freelist is read from
// the newer of its two valid meta pages (by transaction id); a damaged
// meta page is passed over, and a file without a valid one is not judged.
func TestFreelistSynced_Metas(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.db")
	s := openStoreAt(t, path)
	if err := s.Put(context.Background(), newRecord("a", "t", "FAILED")); err != nil {
		t.Fatal(err)
	}
	s.Close()
	dropStoredFreelist(t, path) // the newer meta page: no freelist stored
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const pageSize = 4096 // bbolt's page size on this file (the OS page size)
	if got := binary.LittleEndian.Uint32(orig[16+8:]); got != pageSize {
		t.Skipf("the file's page size is %d, not %d", got, pageSize)
	}
	txid := func(page int) uint64 { return binary.LittleEndian.Uint64(orig[page*pageSize+16+48:]) }
	newer, older := 0, 1
	if txid(1) > txid(0) {
		newer, older = 1, 0
	}
	damage := func(pages ...int) func([]byte) []byte {
		return func(b []byte) []byte {
			for _, p := range pages {
				b[p*pageSize+16+40] ^= 0x01 // the high water mark, under the checksum
			}
			return b
		}
	}
	// sameTxid gives both meta pages the first's transaction id, their
	// checksums made right: bbolt then takes the first (as it does when
	// neither is newer), and so does FreelistSynced.
	sameTxid := func(b []byte) []byte {
		first, second := b[16:16+64], b[pageSize+16:pageSize+16+64]
		copy(second[48:56], first[48:56])
		h := fnv.New64a()
		h.Write(second[:56])
		binary.LittleEndian.PutUint64(second[56:], h.Sum64())
		return b
	}
	cases := []struct {
		name       string
		edit       func([]byte) []byte
		synced, ok bool
	}{
		{"intact", func(b []byte) []byte { return b }, false, true},
		{"newer meta damaged", damage(newer), true, true},
		{"older meta damaged", damage(older), false, true},
		{"both damaged", damage(0, 1), false, false},
		{"first meta's magic wrong", func(b []byte) []byte { b[16] ^= 0x01; return b }, newer == 0, true},
		{"first meta's version wrong", func(b []byte) []byte { b[16+4] = 3; return b }, newer == 0, true},
		{"cut inside the first meta", func(b []byte) []byte { return b[:40] }, false, false},
		{"only the first page", func(b []byte) []byte { return b[:pageSize] }, newer == 1, true},
		{"both metas of one txid", sameTxid, newer == 1, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "x.db")
			if err := os.WriteFile(p, tc.edit(append([]byte(nil), orig...)), 0o600); err != nil {
				t.Fatal(err)
			}
			if synced, ok := boltstore.FreelistSynced(p); synced != tc.synced || ok != tc.ok {
				t.Errorf("FreelistSynced = %v, %v; want %v, %v", synced, ok, tc.synced, tc.ok)
			}
		})
	}
	if synced, ok := boltstore.FreelistSynced(filepath.Join(t.TempDir(), "missing.db")); synced || ok {
		t.Errorf("a missing file: %v, %v", synced, ok)
	}
}

// TestFreelistSynced_PageSize: the second meta page is found at the page
// size the first one records, whatever it is (bbolt's largest, 64 KiB,
// included), not at the default 4 KiB: with the newer meta on the second
// page saying the freelist is not stored and the older one on the first
// saying it is, the answer is the newer's.
func TestFreelistSynced_PageSize(t *testing.T) {
	for _, pageSize := range []int{16 << 10, 64 << 10} {
		path := filepath.Join(t.TempDir(), "p.db")
		update := func(noFreelistSync bool) {
			t.Helper()
			db, err := bolt.Open(path, 0o600, &bolt.Options{PageSize: pageSize, NoFreelistSync: noFreelistSync})
			if err != nil {
				t.Fatal(err)
			}
			err = db.Update(func(tx *bolt.Tx) error {
				b, err := tx.CreateBucketIfNotExists([]byte("b"))
				if err != nil {
					return err
				}
				return b.Put([]byte("k"), []byte("v"))
			})
			db.Close()
			if err != nil {
				t.Fatal(err)
			}
		}
		txid := func(page int) uint64 {
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			return binary.LittleEndian.Uint64(b[page*pageSize+16+48:])
		}
		update(false)
		update(true)
		if txid(1) < txid(0) {
			update(false)
			update(true)
		}
		if txid(1) < txid(0) {
			t.Fatalf("page size %d: the newer meta is still the first (txids %d, %d)", pageSize, txid(0), txid(1))
		}
		if synced, ok := boltstore.FreelistSynced(path); synced || !ok {
			t.Errorf("page size %d: FreelistSynced = %v, %v; want false, true (the newer meta, on the second page)", pageSize, synced, ok)
		}
	}
}
