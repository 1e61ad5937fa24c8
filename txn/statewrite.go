package txn

import (
	"bytes"
	"context"
	"slices"
	"strings"

	"github.com/toolgate/toolgate/txn/driver"
)

// StateView is the committed state as one update sees it, plus the
// update's own writes: what an UpdateState function (or a Begin guard)
// reads and changes. Its writes are applied only if the function returns
// nil. It is valid only during the call it is passed to.
type StateView struct {
	r      driver.StateReader // the update's transaction
	err    error              // r's first read error: the update fails with it
	writes driver.Writes
}

// toGuard makes fn the driver.Guard of a write: it runs fn on a view of the
// write's transaction and returns the view's writes.
func toGuard(fn func(*StateView) error) driver.Guard {
	if fn == nil {
		return nil
	}
	return func(r driver.StateReader) (driver.Writes, error) {
		v := &StateView{r: r, writes: make(driver.Writes)}
		err := fn(v)
		if v.err != nil {
			err = v.err // a read error the function could not see wins
		}
		if err != nil {
			return nil, err
		}
		return v.writes, nil
	}
}

// Get returns the value of key: the view's own write if there is one, else
// the committed value.
func (v *StateView) Get(namespace, key string) ([]byte, bool) {
	if o, ok := v.writes[namespace][key]; ok {
		if o.Deleted {
			return nil, false
		}
		return bytes.Clone(o.Value), true
	}
	if v.err != nil {
		return nil, false
	}
	val, ok, err := v.r.Get(namespace, key)
	if err != nil {
		v.err = err
		return nil, false
	}
	return val, ok
}

// Put sets key to a copy of value when the update applies.
func (v *StateView) Put(namespace, key string, value []byte) error {
	return v.buffer(namespace, key, op{Value: bytes.Clone(value)})
}

// Delete removes key when the update applies.
func (v *StateView) Delete(namespace, key string) error {
	return v.buffer(namespace, key, op{Deleted: true})
}

func (v *StateView) buffer(namespace, key string, o op) error {
	if err := validateKey(namespace, key); err != nil {
		return err
	}
	if v.writes[namespace] == nil {
		v.writes[namespace] = make(map[string]op)
	}
	v.writes[namespace][key] = o
	return nil
}

// Scan returns the entries under prefix in key order, the view's own
// writes included, at most limit of them (limit <= 0: all).
func (v *StateView) Scan(namespace, prefix string, limit int) []Entry {
	own := v.writes[namespace]
	var es []Entry
	if v.err == nil {
		// The first limit entries are among the first limit+len(own)
		// committed ones and the view's own: no need to read the rest.
		n := 0
		if limit > 0 {
			n = limit + len(own)
		}
		var err error
		if es, err = v.r.Scan(namespace, prefix, n); err != nil {
			v.err = err
			es = nil
		}
	}
	if len(own) > 0 {
		es = slices.DeleteFunc(es, func(e Entry) bool { _, ok := own[e.Key]; return ok })
		for k, o := range own {
			if !o.Deleted && strings.HasPrefix(k, prefix) {
				es = append(es, Entry{Key: k, Value: bytes.Clone(o.Value)})
			}
		}
		slices.SortFunc(es, func(a, b Entry) int { return strings.Compare(a.Key, b.Key) })
	}
	if limit > 0 {
		es = es[:min(limit, len(es))]
	}
	return es
}

// UpdateState runs fn in one update, outside any execution: fn reads the
// committed state through the view and changes it, all or nothing; an
// error from fn changes nothing and is returned. It is the runtime's
// compare-and-set for its own records (intents, idempotency keys, staged
// files) in namespaces no tool reaches; a tool's state changes only through
// a Tx. Under group commit fn may run more than once for one call, so it
// must have no effect but through the view.
//
// The audit events, if any, are appended in the same update, and only if
// fn succeeds: a record and the event that proves it are written together
// or not at all.
func (s *Store) UpdateState(ctx context.Context, fn func(*StateView) error, events ...AuditEvent) error {
	evs, err := prepareAudit(events)
	if err != nil {
		return err
	}
	if err := s.ready(ctx); err != nil {
		return err
	}
	return s.be.UpdateState(ctx, toGuard(fn), evs)
}

// DeleteState deletes keys of a state namespace in one update (see
// UpdateState).
func (s *Store) DeleteState(ctx context.Context, namespace string, keys ...string) error {
	return s.UpdateState(ctx, func(v *StateView) error {
		for _, k := range keys {
			if err := v.Delete(namespace, k); err != nil {
				return err
			}
		}
		return nil
	})
}

// PutState sets key of a state namespace to value in one update (see
// UpdateState).
func (s *Store) PutState(ctx context.Context, namespace, key string, value []byte) error {
	return s.UpdateState(ctx, func(v *StateView) error { return v.Put(namespace, key, value) })
}

// StateScan returns the committed entries of namespace under prefix, in
// key order.
func (s *Store) StateScan(ctx context.Context, namespace, prefix string) ([]Entry, error) {
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	return s.be.StateScan(ctx, namespace, prefix)
}
