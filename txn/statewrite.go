package txn

import (
	"bytes"
	"context"
	"slices"
	"strings"

	bolt "go.etcd.io/bbolt"
)

// StateView is the committed state as one update sees it, plus the
// update's own writes: what an UpdateState function (or a Begin guard)
// reads and changes. Its writes are applied only if the function returns
// nil. It is valid only during the call it is passed to.
type StateView struct {
	tx     *bolt.Tx
	alt    stateReader // when tx is nil: another backend's transaction
	err    error       // alt's first read error: the update fails with it
	writes map[string]map[string]op
}

// result is the outcome of the function the view was passed to: a read
// error the function could not see wins.
func (v *StateView) result(err error) error {
	if v.err != nil {
		return v.err
	}
	return err
}

// altGet and altScan read through alt, keeping the first error.
func (v *StateView) altGet(namespace, key string) ([]byte, bool) {
	if v.err != nil {
		return nil, false
	}
	val, ok, err := v.alt.get(namespace, key)
	if err != nil {
		v.err = err
		return nil, false
	}
	return val, ok
}

func (v *StateView) altScan(namespace, prefix string, n int) []Entry {
	if v.err != nil {
		return nil
	}
	es, err := v.alt.scan(namespace, prefix, n)
	if err != nil {
		v.err = err
		return nil
	}
	return es
}

// Get returns the value of key: the view's own write if there is one, else
// the committed value.
func (v *StateView) Get(namespace, key string) ([]byte, bool) {
	if o, ok := v.writes[namespace][key]; ok {
		if o.deleted {
			return nil, false
		}
		return bytes.Clone(o.value), true
	}
	if v.tx == nil {
		return v.altGet(namespace, key)
	}
	return readState(v.tx, namespace, key)
}

// Put sets key to a copy of value when the update applies.
func (v *StateView) Put(namespace, key string, value []byte) error {
	return v.buffer(namespace, key, op{value: bytes.Clone(value)})
}

// Delete removes key when the update applies.
func (v *StateView) Delete(namespace, key string) error {
	return v.buffer(namespace, key, op{deleted: true})
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
	if v.tx == nil {
		n := 0
		if limit > 0 {
			n = limit + len(own)
		}
		es = v.altScan(namespace, prefix, n)
	} else if limit > 0 {
		// The first limit entries are among the first limit+len(own)
		// committed ones and the view's own: no need to read the rest.
		es = scanStateN(v.tx, namespace, prefix, limit+len(own))
	} else {
		es = scanState(v.tx, namespace, prefix)
	}
	if len(own) > 0 {
		es = slices.DeleteFunc(es, func(e Entry) bool { _, ok := own[e.Key]; return ok })
		for k, o := range own {
			if !o.deleted && strings.HasPrefix(k, prefix) {
				es = append(es, Entry{Key: k, Value: bytes.Clone(o.value)})
			}
		}
		slices.SortFunc(es, func(a, b Entry) int { return strings.Compare(a.Key, b.Key) })
	}
	if limit > 0 && len(es) > limit {
		es = es[:limit]
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
	if s.be != nil {
		return s.be.updateState(ctx, fn, evs)
	}
	var v *StateView
	return s.write(ctx, func(tx *bolt.Tx) error {
		v = &StateView{tx: tx, writes: make(map[string]map[string]op)}
		return fn(v) // an error fails this call alone, not its batch
	}, func(tx *bolt.Tx) error {
		if err := applyWrites(tx, v.writes, s.failpoint); err != nil {
			return err
		}
		return s.audit(evs)
	})
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
	if s.be != nil {
		return s.be.stateScan(ctx, namespace, prefix)
	}
	var out []Entry
	err := s.view(ctx, func(tx *bolt.Tx) error {
		out = scanState(tx, namespace, prefix)
		return nil
	})
	return out, err
}

// scanStateN is scanState that stops after n entries.
func scanStateN(tx *bolt.Tx, namespace, prefix string, n int) []Entry {
	b := tx.Bucket(bucketState).Bucket([]byte(namespace))
	if b == nil {
		return nil
	}
	var out []Entry
	c, p := b.Cursor(), []byte(prefix)
	for k, v := c.Seek(p); k != nil && bytes.HasPrefix(k, p) && len(out) < n; k, v = c.Next() {
		out = append(out, Entry{Key: string(k), Value: bytes.Clone(v)})
	}
	return out
}
