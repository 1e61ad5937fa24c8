package txn

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	bolt "go.etcd.io/bbolt"
)

// AuditSearch walks the audit log from its newest entries back, in one read
// transaction, and calls fn with each entry of every group whose stored
// bytes contain needle, newest group first and in log order within a
// group. fn returns true to stop the walk. The walk also stops at the
// first group whose events all have timestamps (Unix milliseconds) before
// notBefore: a group is committed after every event in it was made, so no
// earlier group can hold an event made after notBefore.
//
// It is how one record is checked against its events (by the execution or
// intent id they name) without an index: the cost is the part of the log
// written since notBefore, scanned as bytes; only groups that hold needle
// are decoded. A group that does not decode is an ErrCorrupt error.
func (s *Store) AuditSearch(ctx context.Context, needle string, notBefore int64, fn func(AuditEntry) bool) error {
	if needle == "" {
		return fmt.Errorf("%w: empty audit search", ErrInvalidRecord)
	}
	n := []byte(needle)
	return s.view(ctx, func(tx *bolt.Tx) error {
		log := tx.Bucket(bucketAudit)
		if log == nil {
			return nil
		}
		c := log.Cursor()
		i := 0
		for k, v := c.Last(); k != nil; k, v = c.Prev() {
			if len(k) != 8 || v == nil {
				continue // the head
			}
			if i++; i%1024 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			if bytes.Contains(v, n) {
				var group []AuditEntry
				if err := json.Unmarshal(v, &group); err != nil {
					return fmt.Errorf("%w: audit entries at %x: %v", ErrCorrupt, k, err)
				}
				for _, e := range group {
					if fn(e) {
						return nil
					}
				}
			}
			if maxTimestamp(v) < notBefore {
				return nil
			}
		}
		return nil
	})
}

// maxTimestamp returns the greatest "timestamp" of the events in a stored
// group, read from its bytes without decoding them: the pattern cannot
// occur inside a JSON string, whose quotes are escaped. A group without one
// gives the largest value, so that a damaged group never ends a search.
func maxTimestamp(group []byte) int64 {
	const key = `"timestamp":`
	max, found := int64(0), false
	for {
		i := bytes.Index(group, []byte(key))
		if i < 0 {
			break
		}
		group = group[i+len(key):]
		j := 0
		for j < len(group) && (group[j] == '-' || group[j] >= '0' && group[j] <= '9') {
			j++
		}
		ts, err := strconv.ParseInt(string(group[:j]), 10, 64)
		if err != nil {
			return 1<<63 - 1
		}
		if !found || ts > max {
			max, found = ts, true
		}
	}
	if !found {
		return 1<<63 - 1
	}
	return max
}

// WalkRecords calls fn with the execution records (final ones and claims)
// whose ids sort after the id after ("" for all), in id order, in one read
// transaction, until fn returns false. key is the id the record is stored
// under; rec is nil and err wraps ErrCorrupt when its bytes do not decode.
// fn must not call the Store: it runs inside the read transaction.
func (s *Store) WalkRecords(ctx context.Context, after string, fn func(key string, rec *Record, err error) bool) error {
	return s.view(ctx, func(tx *bolt.Tx) error {
		done := tx.Bucket(bucketExecutions).Cursor()
		var claims *bolt.Cursor
		if b := tx.Bucket(bucketExecuting); b != nil {
			claims = b.Cursor()
		}
		seek := func(c *bolt.Cursor) ([]byte, []byte) {
			if after == "" {
				return c.First()
			}
			k, v := c.Seek([]byte(after))
			if k != nil && string(k) == after {
				k, v = c.Next()
			}
			return k, v
		}
		dk, dv := seek(done)
		var ck, cv []byte
		if claims != nil {
			ck, cv = seek(claims)
		}
		for n := 0; dk != nil || ck != nil; n++ {
			if n%1024 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			var id, data []byte
			if ck == nil || dk != nil && bytes.Compare(dk, ck) <= 0 {
				id, data = dk, dv
				if ck != nil && bytes.Equal(dk, ck) {
					ck, cv = claims.Next() // a record in both: the final one counts
				}
				dk, dv = done.Next()
			} else {
				id, data = ck, cv
				ck, cv = claims.Next()
			}
			rec, err := decodeRecord(string(id), data)
			if !fn(string(id), rec, err) {
				return nil
			}
		}
		return nil
	})
}

// StatePage returns up to n committed entries of namespace whose keys sort
// after the key after ("" for the first), in key order: a namespace read a
// page at a time, in bounded memory.
func (s *Store) StatePage(ctx context.Context, namespace, after string, n int) ([]Entry, error) {
	if err := validateNamespace(namespace); err != nil {
		return nil, err
	}
	var out []Entry
	err := s.view(ctx, func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketState).Bucket([]byte(namespace))
		if b == nil {
			return nil
		}
		c := b.Cursor()
		k, v := c.First()
		if after != "" {
			if k, v = c.Seek([]byte(after)); k != nil && string(k) == after {
				k, v = c.Next()
			}
		}
		for ; k != nil && len(out) < n; k, v = c.Next() {
			out = append(out, Entry{Key: string(k), Value: bytes.Clone(v)})
		}
		return nil
	})
	return out, err
}
