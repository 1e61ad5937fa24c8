package txn

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/toolgate/toolgate/txn/driver"
)

// Tx is the state transaction of one execution: a buffered write-set over
// the store's committed tool-visible state. It holds no database
// transaction;
// reads use short read transactions and writes stay in memory until Commit
// applies them in one update. After Commit or Rollback every method returns
// ErrTxDone, so a tool that outlives its deadline cannot write anything.
//
// A Tx is safe for concurrent use.
type Tx struct {
	store *Store
	id    string

	mu     sync.Mutex
	done   bool
	writes driver.Writes                   // namespace -> key -> pending op; nil once done
	reads  map[string]map[string]driver.Op // namespace -> key -> what the first read from the store saw
	scans  map[scanKey][32]byte            // digest of what the first scan of each prefix saw

	unclaimed bool           // begun by BeginUnclaimed: no claim is stored
	pending   []driver.Event // an unclaimed Tx's events of its beginning, stored when it ends
}

// scanKey names a scanned prefix of a namespace.
type scanKey struct{ namespace, prefix string }

// Entry is one key and value of tool-visible state.
type Entry = driver.Entry

// op is a buffered write: a put of Value, or a delete.
type op = driver.Op

// ID returns the execution id the Tx was begun for.
func (t *Tx) ID() string { return t.id }

// Active reports whether the Tx has not yet been committed or rolled back.
func (t *Tx) Active() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return !t.done
}

// Get returns a copy of the value of key in namespace and whether it exists.
// It sees the Tx's own buffered puts and deletes first, then the state
// committed at the time of the call; it never sees other transactions'
// uncommitted writes.
func (t *Tx) Get(namespace, key string) ([]byte, bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return nil, false, ErrTxDone
	}
	if o, ok := t.writes[namespace][key]; ok {
		if o.Deleted {
			return nil, false, nil
		}
		return bytes.Clone(o.Value), true, nil
	}
	v, found, err := t.store.StateValue(context.Background(), namespace, key)
	if err != nil {
		return nil, false, err
	}
	if _, seen := t.reads[namespace][key]; !seen {
		if t.reads == nil {
			t.reads = make(map[string]map[string]op)
		}
		if t.reads[namespace] == nil {
			t.reads[namespace] = make(map[string]op)
		}
		t.reads[namespace][key] = op{Value: bytes.Clone(v), Deleted: !found}
	}
	return v, found, nil
}

// Scan returns the entries of namespace whose keys start with prefix, in key
// order, at most limit of them (limit <= 0: all). Like Get, it sees the Tx's
// own writes over the committed state, and the commit fails with
// ErrConflict if any committed key under the prefix was added, changed or
// removed since the first scan of that prefix.
func (t *Tx) Scan(namespace, prefix string, limit int) ([]Entry, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return nil, ErrTxDone
	}
	if err := validateNamespace(namespace); err != nil {
		return nil, err
	}
	committed, err := t.store.StateScan(context.Background(), namespace, prefix)
	if err != nil {
		return nil, err
	}
	if t.scans == nil {
		t.scans = make(map[scanKey][32]byte)
	}
	if k := (scanKey{namespace, prefix}); !hasKey(t.scans, k) {
		t.scans[k] = digest(committed)
	}
	merged := make(map[string][]byte, len(committed))
	for _, e := range committed {
		merged[e.Key] = e.Value
	}
	for key, o := range t.writes[namespace] {
		if !strings.HasPrefix(key, prefix) {
			continue
		}
		if o.Deleted {
			delete(merged, key)
		} else {
			merged[key] = bytes.Clone(o.Value)
		}
	}
	out := make([]Entry, 0, len(merged))
	for k, v := range merged {
		out = append(out, Entry{Key: k, Value: v})
	}
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.Key, b.Key) })
	if limit > 0 {
		out = out[:min(limit, len(out))]
	}
	return out, nil
}

// digest hashes a scan result unambiguously (lengths before contents).
func digest(es []Entry) [32]byte {
	h := sha256.New()
	var n [8]byte
	for _, e := range es {
		binary.BigEndian.PutUint64(n[:], uint64(len(e.Key)))
		h.Write(n[:])
		h.Write([]byte(e.Key))
		binary.BigEndian.PutUint64(n[:], uint64(len(e.Value)))
		h.Write(n[:])
		h.Write(e.Value)
	}
	var d [32]byte
	h.Sum(d[:0])
	return d
}

// readSet is a Tx as the driver.ReadSet its commit checks (a conversion,
// where a method value would allocate a closure for each commit).
type readSet Tx

func (r *readSet) Check(sr driver.StateReader) error { return (*Tx)(r).checkReads(sr) }

// checkReads fails with ErrConflict when a key the Tx read from the store
// has changed since, as r (the commit's own transaction) sees it:
// optimistic concurrency, so two read-modify-write transactions on one key
// cannot both commit.
func (t *Tx) checkReads(r driver.StateReader) error {
	for ns, keys := range t.reads {
		for key, saw := range keys {
			now, found, err := r.Get(ns, key)
			if err != nil {
				return err
			}
			if found == saw.Deleted || found && !bytes.Equal(now, saw.Value) {
				return fmt.Errorf("%w: %s/%s changed since this transaction read it", ErrConflict, ns, key)
			}
		}
	}
	for k, d := range t.scans {
		es, err := r.Scan(k.namespace, k.prefix, 0)
		if err != nil {
			return err
		}
		if digest(es) != d {
			return fmt.Errorf("%w: keys under %s/%q changed since this transaction scanned them", ErrConflict, k.namespace, k.prefix)
		}
	}
	return nil
}

// Put buffers a write of a copy of value to key in namespace. A nil value is
// stored as an empty one.
func (t *Tx) Put(namespace, key string, value []byte) error {
	return t.buffer(namespace, key, op{Value: append([]byte{}, value...)})
}

// Delete buffers the deletion of key in namespace. Deleting a missing key is
// not an error.
func (t *Tx) Delete(namespace, key string) error {
	return t.buffer(namespace, key, op{Deleted: true})
}

func (t *Tx) buffer(namespace, key string, o op) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return ErrTxDone
	}
	if err := validateKey(namespace, key); err != nil {
		return err
	}
	ops := t.writes[namespace]
	if ops == nil {
		ops = make(map[string]op)
		t.writes[namespace] = ops
	}
	ops[key] = o
	return nil
}

// Commit applies the buffered write-set and stores final, the execution's
// terminal record, in one update, then ends the Tx. final must have the
// ExecutionID the Tx was begun with (else ErrInvalidRecord); Commit sets
// final.WriteSet to the summary it stored.
//
// If the update fails (including because ctx is done or the store is
// closed), nothing of it is applied, the Tx stays active so the caller can
// Rollback, and the error wraps both ErrCommit and the cause.
//
// The audit events of the final transitions are appended in the same update:
// state, record and audit events are all or nothing.
func (t *Tx) Commit(ctx context.Context, final *Record, events ...AuditEvent) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return ErrTxDone
	}
	summary, buf, data, err := t.seal(final, true)
	if err != nil {
		return err
	}
	defer putBuf(buf) // write returns once the update has ended
	evs, err := prepareAudit(events)
	if err != nil {
		return err
	}
	if err = t.store.ready(ctx); err == nil {
		if t.unclaimed {
			err = t.finish(ctx, true, data, evs)
		} else {
			err = t.store.be.Commit(ctx, t.id, (*readSet)(t), t.writes, data, evs)
		}
	}
	if err != nil {
		return fmt.Errorf("%w: execution %q: %w", ErrCommit, t.id, err)
	}
	t.end()
	final.WriteSet = summary
	return nil
}

// Rollback discards the buffered write-set, ends the Tx, and stores final,
// the execution's terminal record (typically ROLLED_BACK), in one update.
// The Tx ends even if final is invalid (ErrInvalidRecord; it must have the
// ExecutionID the Tx was begun with) or cannot be stored; the error then
// says why. On success Rollback sets final.WriteSet to the summary of what
// was discarded.
//
// The record is not stored if ctx is already done: when rolling back because
// a deadline expired, pass a context that outlives it, such as
// context.WithoutCancel(ctx).
//
// The audit events of the final transitions are appended in the same update.
func (t *Tx) Rollback(ctx context.Context, final *Record, events ...AuditEvent) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return ErrTxDone
	}
	summary, buf, data, err := t.seal(final, false)
	defer putBuf(buf) // write returns once the update has ended; nil is ignored
	t.end()
	var evs []driver.Event
	if err == nil {
		evs, err = prepareAudit(events)
	}
	if err != nil {
		return err
	}
	if err = t.store.ready(ctx); err == nil {
		if t.unclaimed {
			err = t.finish(ctx, false, data, evs)
		} else {
			err = t.store.be.Rollback(ctx, t.id, data, evs)
		}
	}
	if err != nil {
		return fmt.Errorf("txn: rollback execution %q: %w", t.id, err)
	}
	final.WriteSet = summary
	return nil
}

// seal validates final and encodes it with the summary of the write-set.
// final itself is not modified. t.mu must be held.
//
// data is in the pooled buffer buf, which the caller returns with putBuf
// once the update that stored data has ended.
func (t *Tx) seal(final *Record, committed bool) (summary *WriteSetSummary, buf *[]byte, data []byte, err error) {
	if final != nil && final.ExecutionID != t.id {
		return nil, nil, nil, fmt.Errorf("%w: final record is for execution %q, transaction for %q",
			ErrInvalidRecord, final.ExecutionID, t.id)
	}
	if err := final.validate(); err != nil {
		return nil, nil, nil, err
	}
	rec := *final
	rec.WriteSet = t.summary(committed)
	buf, data, err = encodeRecordBuf(&rec)
	if err != nil {
		return nil, nil, nil, err
	}
	return rec.WriteSet, buf, data, nil
}

// summary describes the buffered write-set. t.mu must be held.
func (t *Tx) summary(committed bool) *WriteSetSummary {
	s := &WriteSetSummary{Committed: committed}
	for ns, ops := range t.writes {
		s.Namespaces = append(s.Namespaces, ns)
		for _, o := range ops {
			if o.Deleted {
				s.Deletes++
			} else {
				s.Puts++
			}
		}
	}
	slices.Sort(s.Namespaces)
	return s
}

// end makes the Tx inactive and drops its buffer. t.mu must be held.
func (t *Tx) end() {
	t.done = true
	t.writes = nil
}

func hasKey[K comparable, V any](m map[K]V, k K) bool {
	_, ok := m[k]
	return ok
}
