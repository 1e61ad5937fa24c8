package txn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/toolgate/toolgate/txn/driver"
)

// DefaultTimeout is how long Open waits for the file lock when
// Options.Timeout is zero.
const DefaultTimeout = time.Second

// Options configure Open. A nil *Options means DefaultOptions().
type Options struct {
	// Timeout is how long Open waits for the file lock before failing with
	// ErrLocked. Zero means DefaultTimeout; negative is invalid.
	Timeout time.Duration

	// NoSync skips fsync on commit. A crash can then lose or corrupt
	// committed data: use it only in tests and benchmarks.
	NoSync bool

	// ReadOnly opens an existing database for inspection. It takes a shared
	// lock, so it can coexist with other read-only Stores but not with a
	// writer; write methods return ErrReadOnly.
	ReadOnly bool

	// Node names this writer among the nodes sharing a Postgres database
	// (empty: $TOOLGATE_NODE, else a name of its own for each run): at most
	// 200 bytes, no control characters. A node restarted under the same
	// name finishes its interrupted executions at once; others are
	// finished once their lease expires. Unused by bbolt.
	Node string

	// Lease is how long a node's lease on a shared Postgres database lasts
	// without renewal (zero: $TOOLGATE_LEASE, else DefaultLease); at least
	// MinLease. It is renewed every Lease/3. Unused by bbolt.
	Lease time.Duration

	// Logger receives the lease's messages on a shared Postgres database:
	// its lapse and renewal, and a background sweep that failed. Each
	// record carries the node's name as the attribute "node". nil means
	// DefaultLogger(). Unused by bbolt.
	Logger *slog.Logger
}

// DefaultOptions returns the options Open uses when given nil.
func DefaultOptions() *Options {
	return &Options{Timeout: DefaultTimeout}
}

// Store is the store of execution records, tool-visible state and the
// audit log, on the backend Open picked (a bbolt file, a Postgres
// database) behind the contract of package txn/driver. What does not
// depend on the backend is done here, once: the records' encoding, the
// audit events' preparation, the recovery policy for a claim, the Tx's
// buffer and read-set. It is safe for concurrent use.
type Store struct {
	be       driver.Backend
	path     string // as shown: a Postgres URL with its password hidden
	readOnly bool
	closed   atomic.Bool
	hook     atomic.Pointer[func(step string) error] // test failpoints; nil in production
}

// Open opens the database at path, creating it (and its parent directory)
// if needed, and checks its format version: a postgres:// (or
// postgresql://) URL opens the Postgres backend (txn/pgstore), any other
// path the embedded bbolt file (txn/boltstore). A file that is not a
// database yields an error wrapping ErrCorrupt, a database from a newer
// format version one wrapping ErrIncompatible, and a lock held by another
// Store or process one wrapping ErrLocked. A read-only open of a database
// that does not exist yet (no bbolt file; no toolgate schema in the
// Postgres database) yields an error wrapping fs.ErrNotExist.
func Open(path string, opts *Options) (*Store, error) {
	if opts == nil {
		opts = DefaultOptions()
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if path == "" {
		return nil, errors.New("txn: empty database path")
	}
	s := &Store{path: ShownPath(path), readOnly: opts.ReadOnly}
	be, err := openBackend(path, opts, s.failpoint)
	if err != nil {
		return nil, err
	}
	s.be = be
	return s, nil
}

// Close closes the store. It is idempotent; afterwards every other method of
// the Store and of its Txs returns ErrClosed. Writes in progress finish
// first: their outcome is never left unknown.
func (s *Store) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return nil
	}
	return s.be.Close()
}

// Driver returns the backend under the store, for tools and tests that
// look under the contract (a backend's own inspection methods).
func (s *Store) Driver() driver.Backend { return s.be }

// Path returns the path the store was opened with (a Postgres URL with its
// password hidden).
func (s *Store) Path() string { return s.path }

// Err returns the error that poisoned the store (wrapping ErrPoisoned), or
// nil while it is healthy.
func (s *Store) Err() error { return s.be.Err() }

// failpoint returns the error a test hook injects at step, or nil.
func (s *Store) failpoint(step string) error {
	if h := s.hook.Load(); h != nil {
		return (*h)(step)
	}
	return nil
}

// Put stores a record that never entered a transaction (FAILED, DENIED, or
// ABORTED/ROLLED_BACK before execution) in one update. It refuses to
// overwrite an existing record (ErrExists). An invalid record (empty
// ExecutionID, ToolID or State) yields ErrInvalidRecord and writes nothing.
//
// The audit events are appended in the same update.
func (s *Store) Put(ctx context.Context, rec *Record, events ...AuditEvent) error {
	buf, data, err := encodeRecordBuf(rec)
	if err != nil {
		return err
	}
	defer putBuf(buf) // the write returns once the update has ended
	evs, err := prepareAudit(events)
	if err != nil {
		return err
	}
	if err := s.ready(ctx); err != nil {
		return err
	}
	return s.be.Put(ctx, rec.ExecutionID, nil, nil, data, evs)
}

// Get returns the record of an execution, or an error wrapping ErrNotFound.
func (s *Store) Get(ctx context.Context, executionID string) (*Record, error) {
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	data, err := s.be.Get(ctx, executionID)
	if err != nil {
		return nil, err
	}
	if data == nil {
		return nil, fmt.Errorf("%w: execution %q", ErrNotFound, executionID)
	}
	return decodeRecord(executionID, data)
}

// Filter selects records in List. Empty fields match everything.
type Filter struct {
	State  string
	ToolID string
	CallID string
	Limit  int // maximum number of records; zero or negative means no limit
	// Newest lists newest first (descending execution id) instead of
	// oldest first.
	Newest bool
	// Cursor continues a listing a page at a time: the id of the last
	// record of the previous page. Only records past it, in the listing's
	// order, are listed; the walk starts there rather than at the
	// beginning.
	Cursor string
}

func (f *Filter) match(r *Record) bool {
	return (f.State == "" || r.State == f.State) &&
		(f.ToolID == "" || r.ToolID == f.ToolID) &&
		(f.CallID == "" || r.CallID == f.CallID)
}

// List returns the records matching f in execution id order, or in
// reverse with f.Newest, from past f.Cursor. The runtime's execution ids
// are time-ordered (UUID version 7), so for its records this is creation
// order, oldest first. A page of a listing (f.Limit, and f.Cursor for the
// next) reads from its start to its last record, not the whole store.
func (s *Store) List(ctx context.Context, f Filter) ([]*Record, error) {
	var out []*Record
	var derr error
	visit := func(id string, data []byte) bool {
		if f.Limit > 0 && len(out) == f.Limit {
			return false
		}
		rec, err := decodeRecord(id, data)
		if err != nil {
			derr = err
			return false
		}
		if f.match(rec) {
			out = append(out, rec)
		}
		return true
	}
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	var err error
	if f.Newest {
		err = s.be.WalkBack(ctx, f.Cursor, visit)
	} else {
		err = s.be.Walk(ctx, f.Cursor, visit)
	}
	if err == nil {
		err = derr
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// StateValue reads committed tool-visible state outside any transaction,
// for inspection and tests. It reports whether the key exists; the returned
// slice is a copy.
func (s *Store) StateValue(ctx context.Context, namespace, key string) ([]byte, bool, error) {
	if err := validateKey(namespace, key); err != nil {
		return nil, false, err
	}
	if err := s.ready(ctx); err != nil {
		return nil, false, err
	}
	return s.be.StateValue(ctx, namespace, key)
}

// StateValues returns a copy of all committed tool-visible state in a
// namespace (empty if the namespace does not exist), for inspection and
// tests.
func (s *Store) StateValues(ctx context.Context, namespace string) (map[string][]byte, error) {
	if err := validateNamespace(namespace); err != nil {
		return nil, err
	}
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	es, err := s.be.StateScan(ctx, namespace, "")
	if err != nil {
		return nil, err
	}
	out := make(map[string][]byte, len(es))
	for _, e := range es {
		out[e.Key] = e.Value
	}
	return out, nil
}

// Begin persists rec, whose State the caller has set to EXECUTING, in one
// short update and returns an active Tx for the execution. Persisting the
// record is the claim on its ExecutionID: an existing id yields ErrExists
// and an invalid record ErrInvalidRecord. No database transaction stays
// open after Begin returns.
//
// The audit events (of the transitions up to EXECUTING) are appended in the
// same update.
func (s *Store) Begin(ctx context.Context, rec *Record, events ...AuditEvent) (*Tx, error) {
	return s.BeginWith(ctx, rec, nil, events...)
}

// ready checks that the store is open and healthy and ctx not done.
func (s *Store) ready(ctx context.Context) error {
	if s.closed.Load() {
		return ErrClosed
	}
	if err := s.be.Err(); err != nil {
		return err
	}
	return ctx.Err()
}

func validateNamespace(namespace string) error {
	switch {
	case namespace == "":
		return fmt.Errorf("%w: empty namespace", ErrInvalidKey)
	case len(namespace) > MaxKeyLen:
		return fmt.Errorf("%w: namespace longer than %d bytes", ErrInvalidKey, MaxKeyLen)
	}
	return nil
}

func validateKey(namespace, key string) error {
	if err := validateNamespace(namespace); err != nil {
		return err
	}
	switch {
	case key == "":
		return fmt.Errorf("%w: empty key", ErrInvalidKey)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: key longer than %d bytes", ErrInvalidKey, MaxKeyLen)
	}
	return nil
}

// NewStore returns a Store on be, an open backend (one a backend package
// opened; a user's own), which the Store then owns: its Close closes be.
// path is how messages and Path show the database.
func NewStore(be driver.Backend, path string) *Store {
	return &Store{be: be, path: path}
}
