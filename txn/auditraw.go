package txn

import (
	"context"
	"encoding/binary"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// AuditHeadKey is the key under which [Store.AuditRaw] passes the head of
// the audit log: the 8-byte big-endian seq and the 32-byte hash of the last
// entry.
const AuditHeadKey = "\xff"

// AuditRaw calls fn with every key and value of the audit log as stored, in
// key order, without decoding or checking anything, for a verifier that must
// see a damaged log as it is ([Store.AuditLog] fails on a group that does
// not decode). The keys are the groups of entries, one per update (the 8-byte
// big-endian seq of the group's first entry; the value is the JSON array of
// its [AuditEntry] values), then [AuditHeadKey]. A key of any other form is
// passed too: it is not one this package writes.
//
// key and value are valid only during the call. An error from fn stops the
// walk and is returned as is. The walk runs in one read transaction, so it
// sees one consistent state of the log.
func (s *Store) AuditRaw(ctx context.Context, fn func(key, value []byte) error) error {
	if s.be != nil {
		return s.be.auditRaw(ctx, fn)
	}
	return s.view(ctx, func(tx *bolt.Tx) error {
		log := tx.Bucket(bucketAudit)
		if log == nil {
			return nil
		}
		c := log.Cursor()
		n := 0
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if n++; n%1024 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
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

// AuditHead returns the seq of the last entry of the audit log, as its head
// records it: 0 for an empty log.
func (s *Store) AuditHead(ctx context.Context) (uint64, error) {
	if s.be != nil {
		return s.be.auditHead(ctx)
	}
	var seq uint64
	err := s.view(ctx, func(tx *bolt.Tx) error {
		log := tx.Bucket(bucketAudit)
		if log == nil {
			return nil
		}
		head := log.Get(keyAuditHead)
		switch {
		case head == nil:
			return nil
		case len(head) != 40:
			return fmt.Errorf("%w: audit head is %d bytes", ErrCorrupt, len(head))
		}
		seq = binary.BigEndian.Uint64(head)
		return nil
	})
	return seq, err
}
