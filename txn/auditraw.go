package txn

import (
	"context"

	"github.com/toolgate/toolgate/txn/driver"
)

// AuditHeadKey is the key under which [Store.AuditRaw] passes the head of
// the audit log: the 8-byte big-endian seq and the 32-byte hash of the last
// entry.
const AuditHeadKey = driver.AuditHeadKey

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
	if err := s.ready(ctx); err != nil {
		return err
	}
	return s.be.AuditRaw(ctx, fn)
}

// AuditHead returns the seq of the last entry of the audit log, as its head
// records it: 0 for an empty log.
func (s *Store) AuditHead(ctx context.Context) (uint64, error) {
	if err := s.ready(ctx); err != nil {
		return 0, err
	}
	return s.be.AuditHead(ctx)
}
