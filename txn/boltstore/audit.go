package boltstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/toolgate/toolgate/txn/driver"
	bolt "go.etcd.io/bbolt"
)

// appendAudit appends events to the chain inside the caller's update. The
// events of one update (every write of a group commit's batch, in order) are
// stored under one key (the sequence number of the first, big-endian) as a
// JSON array of entries: one bbolt put per update rather than per event or
// per write, which matters because every put materializes the path to the
// tree's last leaf, and many small values leave pages part empty.
func (s *Store) appendAudit(tx *bolt.Tx, events []driver.Event) error {
	if len(events) == 0 {
		return nil
	}
	log := tx.Bucket(bucketAudit)
	var seq uint64
	var link [32]byte
	head := log.Get(keyAuditHead)
	if head != nil {
		var err error
		if seq, link, err = driver.ParseAuditHead(head); err != nil {
			return err
		}
	}
	if !s.auditTailChecked {
		// Once per Store: while it is open, its exclusive lock keeps every
		// other writer away, so the tail cannot change behind its back.
		if err := checkAuditTail(log, head != nil, seq); err != nil {
			return err
		}
		s.auditTailChecked = true
	}
	var key [8]byte
	binary.BigEndian.PutUint64(key[:], seq+1)
	s.auditBuf = slices.Grow(s.auditBuf[:0], driver.AuditGroupSize(events))
	value, seq, link := driver.AppendAuditGroup(s.auditBuf, seq, link, events)
	s.auditBuf = value // put copies it into the log's entry; release keeps it for the next
	if err := s.put(tx, walAudit, nil, key[:], value); err != nil {
		return fmt.Errorf("txn: append audit events from %d: %w", binary.BigEndian.Uint64(key[:]), err)
	}
	var next [40]byte
	binary.BigEndian.PutUint64(next[:], seq)
	copy(next[8:], link[:])
	return s.put(tx, walAudit, nil, keyAuditHead, next[:])
}

// checkAuditTail holds the head against the last stored group (see
// driver.CheckAuditTail); a key this package does not write is refused.
func checkAuditTail(log *bolt.Bucket, hasHead bool, seq uint64) error {
	c := log.Cursor()
	k, _ := c.Last()
	if k != nil && bytes.Equal(k, keyAuditHead) {
		k, _ = c.Prev()
	}
	var last uint64
	switch {
	case k == nil:
		return nil
	case !hasHead:
		last = 1 // any group: the head is missing
	case len(k) != 8:
		return fmt.Errorf("%w: unexpected key %x in the audit log (toolgate audit verify)", ErrCorrupt, k)
	default:
		last = binary.BigEndian.Uint64(k)
	}
	return driver.CheckAuditTail(hasHead, seq, last)
}

// AuditRaw calls fn with every key and value of the audit bucket, in one
// read transaction, checking ctx before each.
func (s *Store) AuditRaw(ctx context.Context, fn func(key, value []byte) error) error {
	return s.view(ctx, func(tx *bolt.Tx) error {
		log := tx.Bucket(bucketAudit)
		if log == nil {
			return nil
		}
		c := log.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if err := ctx.Err(); err != nil {
				return err
			}
			if v == nil {
				v = []byte{} // a nested bucket: not a value this package writes
			}
			if err := fn(k, v); err != nil {
				return err
			}
		}
		return nil
	})
}

// AuditHead returns the seq of the last entry, as the head records it.
func (s *Store) AuditHead(ctx context.Context) (uint64, error) {
	var seq uint64
	err := s.view(ctx, func(tx *bolt.Tx) error {
		log := tx.Bucket(bucketAudit)
		if log == nil {
			return nil
		}
		head := log.Get(keyAuditHead)
		if head == nil {
			return nil
		}
		var err error
		seq, _, err = driver.ParseAuditHead(head)
		return err
	})
	return seq, err
}

// AuditGroups calls fn with the groups from the one holding from on.
func (s *Store) AuditGroups(ctx context.Context, from uint64, fn func(seq uint64, group []byte) (bool, error)) error {
	return s.view(ctx, func(tx *bolt.Tx) error {
		log := tx.Bucket(bucketAudit)
		if log == nil {
			return nil
		}
		c := log.Cursor()
		// The group holding from starts at or before it.
		k, v := c.Seek(binary.BigEndian.AppendUint64(nil, from))
		if k == nil || len(k) != 8 || binary.BigEndian.Uint64(k) > from {
			if pk, pv := c.Prev(); pk != nil {
				k, v = pk, pv
			} else {
				k, v = c.First()
			}
		}
		for ; k != nil; k, v = c.Next() {
			if len(k) != 8 {
				continue // the head
			}
			more, err := fn(binary.BigEndian.Uint64(k), v)
			if err != nil || !more {
				return err
			}
		}
		return nil
	})
}

// AuditSearch finds the groups of a window by a binary search over the
// log (see txn's Store.AuditSearch), in one read transaction.
func (s *Store) AuditSearch(ctx context.Context, needle []byte, from, to int64, fn func(seq uint64, group []byte) (bool, error)) error {
	return s.view(ctx, func(tx *bolt.Tx) error { return auditSearch(ctx, tx, needle, from, to, fn) })
}

// GetWithAudit reads a record and searches for its events in one read
// transaction.
func (s *Store) GetWithAudit(ctx context.Context, id string, window func(data []byte) ([]byte, int64, int64, error), fn func(seq uint64, group []byte) (bool, error)) ([]byte, error) {
	var out []byte
	err := s.view(ctx, func(tx *bolt.Tx) error {
		data := getRecord(tx, []byte(id))
		if data == nil {
			return fmt.Errorf("%w: execution %q", ErrNotFound, id)
		}
		out = bytes.Clone(data)
		needle, from, to, err := window(data)
		if err != nil {
			return err
		}
		return auditSearch(ctx, tx, needle, from, to, fn)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func auditSearch(ctx context.Context, tx *bolt.Tx, n []byte, from, to int64, fn func(seq uint64, group []byte) (bool, error)) error {
	to = max(to, from) // as Postgres searches: the instant from
	log := tx.Bucket(bucketAudit)
	if log == nil {
		return nil
	}
	c := log.Cursor()
	for k, v := searchStart(c, from); k != nil; k, v = c.Next() {
		if err := ctx.Err(); err != nil {
			return err
		}
		if len(k) != 8 || v == nil {
			continue // the head
		}
		min, max := driver.Timestamps(v)
		if min > to {
			return nil
		}
		if max < from || !bytes.Contains(v, n) {
			continue
		}
		more, err := fn(binary.BigEndian.Uint64(k), v)
		if err != nil || !more {
			return err
		}
	}
	return nil
}

// searchStart moves c to the first group (by its first seq) that has an
// event made at or after from, found by a binary search over the seqs of
// the log, and returns it (a nil key when there is none). The search ends
// at lo, 1 or one past a group whose events were all made before from:
// the group holding lo, when it starts before lo, is that group, and the
// groups before it were committed before it (clocks that do not jump
// back).
func searchStart(c *bolt.Cursor, from int64) (k, v []byte) {
	lo, hi := uint64(1), uint64(1)
	if k, _ := c.Last(); k != nil {
		for ; k != nil && len(k) != 8; k, _ = c.Prev() {
		}
		if k != nil {
			hi = binary.BigEndian.Uint64(k) + 1
		}
	}
	for lo < hi {
		mid := lo + (hi-lo)/2
		k, v := c.Seek(binary.BigEndian.AppendUint64(nil, mid))
		if k == nil || len(k) != 8 {
			hi = mid
			continue
		}
		if _, max := driver.Timestamps(v); max < from {
			lo = binary.BigEndian.Uint64(k) + 1
		} else {
			hi = mid
		}
	}
	return c.Seek(binary.BigEndian.AppendUint64(nil, lo))
}
