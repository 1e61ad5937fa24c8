package boltstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"time"

	bolt "go.etcd.io/bbolt"
)

// bbolt's meta page, as it lays it out on disk (go.etcd.io/bbolt
// internal/common.Meta), after the 16-byte page header: magic, version,
// page size and flags (4 bytes each), the root bucket (16), the freelist's
// page id (8), the high water mark (8), the transaction id (8), and an
// FNV-64a checksum of all that.
const (
	metaMagic        = 0xED0CDAED
	metaVersion      = 2
	metaHeader       = 16 // the page header before the meta
	metaSummed       = 56 // the bytes the checksum covers
	metaLen          = metaSummed + 8
	metaFreelistAt   = 32
	metaTxidAt       = 48
	metaPageSizeAt   = 8
	pgidNoFreelist   = ^uint64(0)
	maxMetaPageSize  = 1 << 16
	defaultPageBytes = 4096
)

// FreelistSynced reports whether the database file at path has its
// freelist stored (ok is false when the file cannot be read or has no
// valid meta page: bbolt's own open then says what is wrong). A file
// without one makes bbolt rebuild the freelist at the first write, by
// walking every page on a goroutine of its own, where a damaged page
// crashes the process. The answer is the valid meta page bbolt reads: the
// one of the higher transaction id, the first of the two when they tie.
func FreelistSynced(path string) (synced, ok bool) {
	f, err := os.Open(path)
	if err != nil {
		return false, false
	}
	defer f.Close()
	var best []byte
	var bestTxid uint64
	pageSize := int64(0)
	for i := range 2 {
		off := int64(i) * pageSize
		if i == 1 && pageSize == 0 {
			off = defaultPageBytes // the first meta is damaged: bbolt then tries the default page size
		}
		buf := make([]byte, metaHeader+metaLen)
		if _, err := f.ReadAt(buf, off); err != nil && !errors.Is(err, io.EOF) {
			continue
		}
		m := buf[metaHeader:]
		if binary.LittleEndian.Uint32(m) != metaMagic || binary.LittleEndian.Uint32(m[4:]) != metaVersion {
			continue
		}
		h := fnv.New64a()
		h.Write(m[:metaSummed])
		if h.Sum64() != binary.LittleEndian.Uint64(m[metaSummed:]) {
			continue
		}
		if i == 0 {
			if ps := int64(binary.LittleEndian.Uint32(m[metaPageSizeAt:])); ps <= maxMetaPageSize {
				// 0 leaves the page size unknown, as a damaged first meta does
				pageSize = ps
			}
		}
		if txid := binary.LittleEndian.Uint64(m[metaTxidAt:]); best == nil || txid > bestTxid {
			best, bestTxid = m, txid
		}
	}
	if best == nil {
		return false, false
	}
	return binary.LittleEndian.Uint64(best[metaFreelistAt:]) != pgidNoFreelist, true
}

// checkPages reads every key and value of the database at path, read-only,
// and returns an error wrapping ErrCorrupt if bbolt panics on a damaged
// page, on this goroutine where it can be recovered. Open runs it before
// opening for writing a file whose freelist bbolt would rebuild (see
// FreelistSynced): it touches the pages that rebuild walks.
func checkPages(path string, timeout time.Duration) (err error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: timeout})
	if err != nil {
		return openError(path, err)
	}
	defer db.Close()
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("%w: %s: bbolt failed reading a page (%v); check the file with 'bbolt check'", ErrCorrupt, path, v)
		}
	}()
	return db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			if err := walkBucket(b); err != nil {
				return fmt.Errorf("%w: %s: bucket %q: %v; check the file with 'bbolt check'", ErrCorrupt, path, name, err)
			}
			return nil
		})
	})
}

// walkBucket reads every key and value of b and of the buckets in it, and
// checks that the keys of each come in strictly increasing order, as bbolt's
// rebuild checks (and raises as a panic mid-walk, with its own walk still
// running on another goroutine). bbolt's tx.Check would load the freelist
// by that same rebuild, so it is no help here.
func walkBucket(b *bolt.Bucket) error {
	var prev []byte
	return b.ForEach(func(k, v []byte) error {
		if prev != nil && bytes.Compare(prev, k) >= 0 {
			return fmt.Errorf("key %x after key %x: out of order", k, prev)
		}
		prev = k
		if v != nil {
			return nil
		}
		if child := b.Bucket(k); child != nil {
			if err := walkBucket(child); err != nil {
				return fmt.Errorf("bucket %q: %w", k, err)
			}
		}
		return nil
	})
}
