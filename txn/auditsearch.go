package txn

import (
	"bytes"
	"context"
	"fmt"

	"github.com/toolgate/toolgate/txn/driver"
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
	if err := s.ready(ctx); err != nil {
		return err
	}
	if as, ok := s.be.(driver.AuditSearcher); ok {
		return as.AuditSearch(ctx, []byte(needle), from, to, entries(fn))
	}
	return scanAudit(ctx, s.be, []byte(needle), from, to, entries(fn))
}

// GetWithAudit reads the record of an execution and searches the audit log
// for its events (as AuditSearch does, with the needle and window that
// window gives for the record) in one read transaction, so that the record
// and the events are of one state of the store: a transition committed
// between two reads cannot look like a record that disagrees with its
// events. It returns the record, or an error wrapping ErrNotFound or
// ErrCorrupt.
func (s *Store) GetWithAudit(ctx context.Context, executionID string, window func(*Record) (needle string, from, to int64), fn func(AuditEntry) bool) (*Record, error) {
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	var rec *Record
	win := func(data []byte) ([]byte, int64, int64, error) {
		var err error
		if rec, err = decodeRecord(executionID, data); err != nil {
			return nil, 0, 0, err
		}
		needle, from, to := window(rec)
		if needle == "" {
			return nil, 0, 0, fmt.Errorf("%w: empty audit search", ErrInvalidRecord)
		}
		return []byte(needle), from, to, nil
	}
	if as, ok := s.be.(driver.AuditSearcher); ok {
		if _, err := as.GetWithAudit(ctx, executionID, win, entries(fn)); err != nil {
			return nil, err
		}
		return rec, nil
	}
	// A backend without its own search: the record, then the search, each
	// a snapshot of its own.
	data, err := s.be.Get(ctx, executionID)
	if err != nil {
		return nil, err
	}
	if data == nil {
		return nil, fmt.Errorf("%w: execution %q", ErrNotFound, executionID)
	}
	needle, from, to, err := win(data)
	if err != nil {
		return nil, err
	}
	if err := scanAudit(ctx, s.be, needle, from, to, entries(fn)); err != nil {
		return nil, err
	}
	return rec, nil
}

// entries decodes each group a search finds and passes its entries to fn,
// until fn returns true.
func entries(fn func(AuditEntry) bool) func(seq uint64, group []byte) (bool, error) {
	return func(seq uint64, v []byte) (bool, error) {
		group, err := decodeGroup(seq, v)
		if err != nil {
			return false, err
		}
		for _, e := range group {
			if fn(e) {
				return false, nil
			}
		}
		return true, nil
	}
}

// scanAudit is AuditSearch over every group of the log, for a backend
// without a search of its own (driver.AuditSearcher).
func scanAudit(ctx context.Context, be driver.Backend, needle []byte, from, to int64, fn func(seq uint64, group []byte) (bool, error)) error {
	to = max(to, from)
	return be.AuditGroups(ctx, 0, func(seq uint64, v []byte) (bool, error) {
		if min, max := driver.Timestamps(v); max < from || min > to || !bytes.Contains(v, needle) {
			return true, nil
		}
		return fn(seq, v)
	})
}

// WalkRecords calls fn with the execution records (final ones and claims)
// whose ids sort after the id after ("" for all), in id order, in one read
// transaction, until fn returns false. key is the id the record is stored
// under; rec is nil and err wraps ErrCorrupt when its bytes do not decode.
// fn must not call the Store: it runs inside the read transaction.
func (s *Store) WalkRecords(ctx context.Context, after string, fn func(key string, rec *Record, err error) bool) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	return s.be.Walk(ctx, after, func(id string, data []byte) bool {
		rec, err := decodeRecord(id, data)
		return fn(id, rec, err)
	})
}

// StatePage returns up to n committed entries of namespace whose keys sort
// after the key after ("" for the first), in key order: a namespace read a
// page at a time, in bounded memory.
func (s *Store) StatePage(ctx context.Context, namespace, after string, n int) ([]Entry, error) {
	if err := validateNamespace(namespace); err != nil {
		return nil, err
	}
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	if n <= 0 {
		return nil, nil
	}
	return s.be.StatePage(ctx, namespace, after, n)
}
