package txn

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strconv"

	bolt "go.etcd.io/bbolt"
)

// AuditSearch calls fn, in log order, with each entry of every group of
// the audit log whose stored bytes contain needle, among the groups that
// can hold an event made between the times from and to (Unix
// milliseconds), in one read transaction. fn returns true to stop.
//
// The window includes both from and to; one whose to is before its from is
// the instant from. It selects groups, not events: an entry made outside
// the window is passed to fn with the others of a group that can hold an
// event made inside it, and callers check each entry's time if it matters.
//
// A group is committed after every event in it was made, and groups are
// committed in order: the search finds the first group holding an event
// made at or after from by a binary search over the log (assuming clocks
// that do not jump back), and stops at the first group whose events were
// all made after to. Callers widen the window by the slack they allow
// between an event's time and its commit. Only groups that contain
// needle are decoded; the cost is O(log n) plus the groups of the window,
// scanned as bytes, whatever the size of the log. A group that does not
// decode is an ErrCorrupt error.
func (s *Store) AuditSearch(ctx context.Context, needle string, from, to int64, fn func(AuditEntry) bool) error {
	if needle == "" {
		return fmt.Errorf("%w: empty audit search", ErrInvalidRecord)
	}
	if p, ok := s.be.(*pgStore); ok {
		if err := s.ready(ctx); err != nil {
			return err
		}
		return p.search(ctx, p.pool, needle, from, to, fn)
	}
	return s.view(ctx, func(tx *bolt.Tx) error { return auditSearch(ctx, tx, needle, from, to, fn) })
}

// GetWithAudit reads the record of an execution and searches the audit log
// for its events (as AuditSearch does, with the needle and window that
// window gives for the record) in one read transaction, so that the record
// and the events are of one state of the store: a transition committed
// between two reads cannot look like a record that disagrees with its
// events. It returns the record, or an error wrapping ErrNotFound or
// ErrCorrupt.
func (s *Store) GetWithAudit(ctx context.Context, executionID string, window func(*Record) (needle string, from, to int64), fn func(AuditEntry) bool) (*Record, error) {
	if p, ok := s.be.(*pgStore); ok {
		return p.getWithAudit(ctx, executionID, window, fn)
	}
	var rec *Record
	err := s.view(ctx, func(tx *bolt.Tx) error {
		data := getRecord(tx, []byte(executionID))
		if data == nil {
			return fmt.Errorf("%w: execution %q", ErrNotFound, executionID)
		}
		var err error
		if rec, err = decodeRecord(executionID, data); err != nil {
			return err
		}
		needle, from, to := window(rec)
		if needle == "" {
			return fmt.Errorf("%w: empty audit search", ErrInvalidRecord)
		}
		return auditSearch(ctx, tx, needle, from, to, fn)
	})
	if err != nil {
		return nil, err
	}
	return rec, nil
}

func auditSearch(ctx context.Context, tx *bolt.Tx, needle string, from, to int64, fn func(AuditEntry) bool) error {
	n := []byte(needle)
	to = max(to, from) // as Postgres searches: the instant from
	{
		log := tx.Bucket(bucketAudit)
		if log == nil {
			return nil
		}
		c := log.Cursor()
		// The first group (by its first seq) that has an event made at or
		// after from: every group before it was committed before from.
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
			if _, max := timestamps(v); max < from {
				lo = binary.BigEndian.Uint64(k) + 1
			} else {
				hi = mid
			}
		}
		k, v := c.Seek(binary.BigEndian.AppendUint64(nil, lo))
		if pk, pv := c.Prev(); pk != nil && len(pk) == 8 {
			k, v = pk, pv // the group holding lo starts before it
		} else {
			k, v = c.Seek(binary.BigEndian.AppendUint64(nil, lo))
		}
		for i := 0; k != nil; k, v = c.Next() {
			if len(k) != 8 || v == nil {
				continue // the head
			}
			if i++; i%1024 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			min, max := timestamps(v)
			if min > to {
				return nil
			}
			if max < from || !bytes.Contains(v, n) {
				continue
			}
			var group []AuditEntry
			if err := json.Unmarshal(v, &group); err != nil {
				return fmt.Errorf("%w: audit entries at %d: %v", ErrCorrupt, binary.BigEndian.Uint64(k), err)
			}
			for _, e := range group {
				if fn(e) {
					return nil
				}
			}
		}
		return nil
	}
}

// timestamps returns the least and the greatest "timestamp" of the events
// in a stored group, read from its bytes without decoding them: the pattern
// cannot occur inside a JSON string, whose quotes are escaped. A group
// without one (damaged) gives the widest range, so that it never ends or
// narrows a search.
func timestamps(group []byte) (min, max int64) {
	const key = `"timestamp":`
	min, max = 1<<63-1, -1<<63
	found := false
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
			return -1 << 63, 1<<63 - 1
		}
		found = true
		if ts < min {
			min = ts
		}
		if ts > max {
			max = ts
		}
	}
	if !found {
		return -1 << 63, 1<<63 - 1
	}
	return min, max
}

// WalkRecords calls fn with the execution records (final ones and claims)
// whose ids sort after the id after ("" for all), in id order, in one read
// transaction, until fn returns false. key is the id the record is stored
// under; rec is nil and err wraps ErrCorrupt when its bytes do not decode.
// fn must not call the Store: it runs inside the read transaction.
func (s *Store) WalkRecords(ctx context.Context, after string, fn func(key string, rec *Record, err error) bool) error {
	if s.be != nil {
		return s.be.walk(ctx, after, func(id string, data []byte) bool {
			rec, err := decodeRecord(id, data)
			return fn(id, rec, err)
		})
	}
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
	if s.be != nil {
		return s.be.statePage(ctx, namespace, after, n)
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
