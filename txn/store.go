package txn

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// DefaultTimeout is how long Open waits for the file lock when
// Options.Timeout is zero.
const DefaultTimeout = time.Second

// formatVersion is the storage layout version written to the meta bucket.
//
// 2: claims hold their record in the executing bucket, audit events are
// stored in groups with the chain head in the audit bucket, no exec_index.
// 3: records are stored in a compact binary form (see encode.go), not JSON.
const formatVersion uint64 = 3

var (
	bucketMeta       = []byte("meta")
	bucketExecutions = []byte("executions")
	bucketState      = []byte("state")
	bucketExecuting  = []byte("executing") // the claims: records in EXECUTING, by id
	keyFormat        = []byte("format")
)

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

// Validate reports whether o is usable by Open. A nil *Options is valid.
func (o *Options) Validate() error {
	if o != nil && o.Timeout < 0 {
		return fmt.Errorf("txn: negative lock timeout %v", o.Timeout)
	}
	if o == nil {
		return nil
	}
	if o.Lease != 0 {
		if err := checkLease(o.Lease); err != nil {
			return err
		}
	}
	return checkNode(o.Node)
}

// Store is a bbolt-backed store of execution records and tool-visible state.
// It is safe for concurrent use.
type Store struct {
	be       backend // nil: bbolt, this package's own code; else the backend of a postgres:// URL (pg.go)
	path     string
	db       *bolt.DB
	readOnly bool
	closed   atomic.Bool
	poisoned atomic.Pointer[error]
	hook     func(step string) error // test failpoints; nil in production
	batches  atomic.Int64            // bbolt updates run by the committer

	wmu     sync.Mutex  // guards queue and leading
	queue   []*writeReq // writes waiting for the next batch
	leading bool        // a writer is committing a batch
	used    []*[]byte   // pooled buffers of the update in progress; only the leader touches it
	// The audit events of the update in progress, in request order. They
	// are appended as one group when every request has been applied (see
	// commitBatch); only the leader touches it.
	pending []auditEvent
	// auditTailChecked: checkAuditTail found the stored log consistent with
	// its head; only the leader touches it.
	auditTailChecked bool
	writers          sync.WaitGroup // writes in progress; Close waits for them
}

// Open opens the database at path, creating it (and its parent directory)
// if needed, and checks its format version. A file that is not a database
// yields an error wrapping ErrCorrupt, a database from a newer format
// version one wrapping ErrIncompatible, and a lock held by another Store or
// process one wrapping ErrLocked. A read-only open of a database that
// does not exist yet (no bbolt file; no toolgate schema in the Postgres
// database) yields an error wrapping fs.ErrNotExist.
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
	if isPostgresURL(path) {
		return openPostgres(path, opts)
	}
	if !opts.ReadOnly {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, fmt.Errorf("txn: create database directory: %w", err)
		}
	}
	timeout := opts.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	if !opts.ReadOnly {
		if synced, ok := freelistSynced(path); ok && !synced {
			// bbolt is about to rebuild the freelist by walking every page
			// where a damaged one would crash the process: walk them here
			// first, where that is an error.
			if err := checkPages(path, timeout); err != nil {
				return nil, err
			}
		}
	}
	db, err := openBolt(path, &bolt.Options{
		Timeout:  timeout,
		NoSync:   opts.NoSync,
		ReadOnly: opts.ReadOnly,
		// The map freelist allocates and frees pages in O(1); the default
		// array freelist scans linearly and degrades badly on large,
		// fragmented files.
		FreelistType: bolt.FreelistMapType,
		// Persist the freelist. Without it bbolt rebuilds the freelist by
		// walking every page, at each open for writing and after each
		// rolled-back update, holding the writer meanwhile, and it walks
		// on a goroutine of its own, where a damaged page is a panic that
		// crashes the process instead of an error.
		NoFreelistSync: false,
		// Without fsync on commit, an fsync when the file grows (every
		// 16 MiB) protects nothing and stalls the writer for the whole
		// page cache's flush.
		NoGrowSync: opts.NoSync,
	})
	if err != nil {
		return nil, err
	}
	if err := initialize(db, path, opts.ReadOnly); err != nil {
		_ = db.Close()
		return nil, err
	}
	return &Store{path: path, db: db, readOnly: opts.ReadOnly}, nil
}

// openError translates an error from bolt.Open.
func openError(path string, err error) error {
	var (
		pathErr *fs.PathError
		errno   syscall.Errno
	)
	switch {
	case errors.Is(err, bolterrors.ErrTimeout):
		return fmt.Errorf("%w: %s", ErrLocked, path)
	case errors.Is(err, bolterrors.ErrVersionMismatch):
		return fmt.Errorf("%w: %s: bbolt %v", ErrIncompatible, path, err)
	case errors.As(err, &pathErr), errors.As(err, &errno):
		// The operating system refused (permissions, missing file in
		// read-only mode, mmap): no verdict on the file's content.
		return fmt.Errorf("txn: open %s: %w", path, err)
	default:
		// bbolt rejected the content: ErrInvalid, ErrChecksum, or an
		// unexported "file size too small" error for short foreign files.
		return fmt.Errorf("%w: %s: not a bbolt database: %v", ErrCorrupt, path, err)
	}
}

// openBolt runs bolt.Open, turning a panic (bbolt reading a damaged meta
// or freelist page) into an error wrapping ErrCorrupt.
func openBolt(path string, opts *bolt.Options) (db *bolt.DB, err error) {
	// The file, to close it (and release its lock) if bbolt panics: it
	// never returns the *DB then.
	var file *os.File
	opts.OpenFile = func(name string, flag int, perm os.FileMode) (*os.File, error) {
		f, err := os.OpenFile(name, flag, perm)
		file = f
		return f, err
	}
	defer func() {
		if v := recover(); v != nil {
			if file != nil {
				file.Close()
			}
			db, err = nil, fmt.Errorf("%w: %s: bbolt failed reading a page (%v); check the file with 'bbolt check'", ErrCorrupt, path, v)
		}
	}()
	db, err = bolt.Open(path, 0o600, opts)
	if err != nil {
		return nil, openError(path, err)
	}
	return db, nil
}

// initialize creates the buckets and writes or checks the format version.
// bbolt panics on some forms of page corruption instead of returning an
// error; the panic is turned into ErrCorrupt.
func initialize(db *bolt.DB, path string, readOnly bool) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %s: %v", ErrCorrupt, path, r)
		}
	}()
	if readOnly {
		return db.View(func(tx *bolt.Tx) error {
			if err := checkFormat(path, tx.Bucket(bucketMeta)); err != nil {
				return err
			}
			for _, name := range [][]byte{bucketExecutions, bucketState} { // the claims index is only used by writers
				if tx.Bucket(name) == nil {
					return fmt.Errorf("%w: %s: missing bucket %q", ErrCorrupt, path, name)
				}
			}
			return nil
		})
	}
	return db.Update(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketMeta, bucketExecutions, bucketState, bucketExecuting, bucketAudit} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return fmt.Errorf("%w: %s: bucket %q: %v", ErrIncompatible, path, name, err)
			}
		}
		meta := tx.Bucket(bucketMeta)
		if meta.Get(keyFormat) == nil {
			if err := meta.Put(keyFormat, binary.BigEndian.AppendUint64(nil, formatVersion)); err != nil {
				return fmt.Errorf("txn: %s: write format version: %w", path, err)
			}
			return nil
		}
		if v := meta.Get(keyFormat); len(v) == 8 {
			if got := binary.BigEndian.Uint64(v); got < formatVersion {
				return migrate(tx, path, got)
			}
		}
		return checkFormat(path, meta)
	})
}

// checkFormat checks the format version in the meta bucket, which may be nil.
func checkFormat(path string, meta *bolt.Bucket) error {
	var v []byte
	if meta != nil {
		v = meta.Get(keyFormat)
	}
	switch {
	case v == nil:
		return fmt.Errorf("%w: %s: no format version", ErrIncompatible, path)
	case len(v) != 8:
		return fmt.Errorf("%w: %s: malformed format version %x", ErrCorrupt, path, v)
	}
	if got := binary.BigEndian.Uint64(v); got < formatVersion {
		return fmt.Errorf("%w: %s: format version %d, older than this build's %d: the first write (toolgate run, serve) upgrades it in place; read-only inspection does not", ErrIncompatible, path, got, formatVersion)
	} else if got != formatVersion {
		return fmt.Errorf("%w: %s: format version %d, this build supports %d", ErrIncompatible, path, got, formatVersion)
	}
	return nil
}

// Close closes the store. It is idempotent; afterwards every other method of
// the Store and of its Txs returns ErrClosed.
func (s *Store) Close() error {
	s.wmu.Lock()
	if !s.closed.CompareAndSwap(false, true) {
		s.wmu.Unlock()
		return nil
	}
	s.wmu.Unlock()
	s.writers.Wait() // queued writes finish: their outcome is never left unknown
	if s.be != nil {
		return s.be.close()
	}
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("txn: close %s: %w", s.path, err)
	}
	return nil
}

// Path returns the path the store was opened with (a Postgres URL with its
// password hidden).
func (s *Store) Path() string { return s.path }

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
	defer putBuf(buf) // write returns once the update has ended
	evs, err := prepareAudit(events)
	if err != nil {
		return err
	}
	if s.be != nil {
		return s.be.put(ctx, rec.ExecutionID, data, evs)
	}
	id := []byte(rec.ExecutionID)
	return s.write(ctx, func(tx *bolt.Tx) error { return recordAbsent(tx, id) },
		func(tx *bolt.Tx) error {
			if err := insertRecord(tx, id, data); err != nil {
				return err
			}
			return s.audit(evs)
		})
}

// audit queues a request's audit events, behind a failpoint, for the group
// commitBatch appends at the end of the update that applies the request.
func (s *Store) audit(events []auditEvent) error {
	if err := s.failpoint(StepAudit); err != nil {
		return err
	}
	s.pending = append(s.pending, events...)
	return nil
}

// Get returns the record of an execution, or an error wrapping ErrNotFound.
func (s *Store) Get(ctx context.Context, executionID string) (*Record, error) {
	if s.be != nil {
		data, err := s.be.getRecord(ctx, executionID)
		if err != nil {
			return nil, err
		}
		if data == nil {
			return nil, fmt.Errorf("%w: execution %q", ErrNotFound, executionID)
		}
		return decodeRecord(executionID, data)
	}
	var rec *Record
	err := s.view(ctx, func(tx *bolt.Tx) error {
		data := getRecord(tx, []byte(executionID))
		if data == nil {
			return fmt.Errorf("%w: execution %q", ErrNotFound, executionID)
		}
		var err error
		rec, err = decodeRecord(executionID, data)
		return err
	})
	if err != nil {
		return nil, err
	}
	return rec, nil
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
	var err error
	switch {
	case s.be != nil && f.Newest:
		err = s.be.walkBack(ctx, f.Cursor, visit)
	case s.be != nil:
		err = s.be.walk(ctx, f.Cursor, visit)
	default:
		err = s.view(ctx, func(tx *bolt.Tx) error { return boltWalk(ctx, tx, f.Cursor, f.Newest, visit) })
	}
	if err == nil {
		err = derr
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// boltWalk calls fn with the records (final ones and claims, merged) past
// cursor, in id order or in reverse, until it returns false.
func boltWalk(ctx context.Context, tx *bolt.Tx, cursor string, reverse bool, fn func(id string, data []byte) bool) error {
	start := func(c *bolt.Cursor) ([]byte, []byte) {
		if c == nil {
			return nil, nil
		}
		switch {
		case cursor == "" && reverse:
			return c.Last()
		case cursor == "":
			return c.First()
		}
		k, v := c.Seek([]byte(cursor))
		switch {
		case reverse && k == nil:
			return c.Last()
		case reverse: // k >= cursor
			return c.Prev()
		case k != nil && string(k) == cursor:
			return c.Next()
		}
		return k, v
	}
	step := func(c *bolt.Cursor) ([]byte, []byte) {
		if reverse {
			return c.Prev()
		}
		return c.Next()
	}
	// before reports whether a comes first in the walk's order.
	before := func(a, b []byte) bool {
		if reverse {
			return bytes.Compare(a, b) > 0
		}
		return bytes.Compare(a, b) < 0
	}
	done := tx.Bucket(bucketExecutions).Cursor()
	var claims *bolt.Cursor
	if b := tx.Bucket(bucketExecuting); b != nil {
		claims = b.Cursor()
	}
	dk, dv := start(done)
	ck, cv := start(claims)
	for dk != nil || ck != nil {
		if err := ctx.Err(); err != nil {
			return err
		}
		var id, data []byte
		switch {
		case ck == nil || dk != nil && before(dk, ck):
			id, data = dk, dv
			dk, dv = step(done)
		case dk != nil && bytes.Equal(dk, ck): // never both; the final one
			id, data = dk, dv
			dk, dv = step(done)
			ck, cv = step(claims)
		default:
			id, data = ck, cv
			ck, cv = step(claims)
		}
		if !fn(string(id), data) {
			return nil
		}
	}
	return nil
}

// StateValue reads committed tool-visible state outside any transaction,
// for inspection and tests. It reports whether the key exists; the returned
// slice is a copy.
func (s *Store) StateValue(ctx context.Context, namespace, key string) ([]byte, bool, error) {
	if err := validateKey(namespace, key); err != nil {
		return nil, false, err
	}
	if s.be != nil {
		return s.be.stateValue(ctx, namespace, key)
	}
	var (
		value []byte
		found bool
	)
	err := s.view(ctx, func(tx *bolt.Tx) error {
		value, found = readState(tx, namespace, key)
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	return value, found, nil
}

// StateValues returns a copy of all committed tool-visible state in a
// namespace (empty if the namespace does not exist), for inspection and
// tests.
func (s *Store) StateValues(ctx context.Context, namespace string) (map[string][]byte, error) {
	if err := validateNamespace(namespace); err != nil {
		return nil, err
	}
	out := make(map[string][]byte)
	if s.be != nil {
		es, err := s.be.stateScan(ctx, namespace, "")
		if err != nil {
			return nil, err
		}
		for _, e := range es {
			out[e.Key] = e.Value
		}
		return out, nil
	}
	err := s.view(ctx, func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketState).Bucket([]byte(namespace))
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			out[string(k)] = bytes.Clone(v)
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Begin persists rec, whose State the caller has set to EXECUTING, in one
// short update and returns an active Tx for the execution. Persisting the
// record is the claim on its ExecutionID: an existing id yields ErrExists
// and an invalid record ErrInvalidRecord. No bbolt transaction stays open
// after Begin returns.
//
// The audit events (of the transitions up to EXECUTING) are appended in the
// same update.
func (s *Store) Begin(ctx context.Context, rec *Record, events ...AuditEvent) (*Tx, error) {
	return s.BeginWith(ctx, rec, nil, events...)
}

// view runs fn in one bbolt read transaction, after checking that the store
// is open and ctx is not done.
func (s *Store) view(ctx context.Context, fn func(*bolt.Tx) error) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	return translate(s.viewTx(fn))
}

// viewTx runs db.View, turning a panic into an error as update does: bbolt
// panics on some forms of page corruption instead of returning an error,
// and a reader of a damaged file must get an error, not a crash.
func (s *Store) viewTx(fn func(*bolt.Tx) error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = recovered(v)
		}
	}()
	return s.db.View(fn)
}

func (s *Store) ready(ctx context.Context) error {
	if s.closed.Load() {
		return ErrClosed
	}
	if err := s.poisonedErr(); err != nil {
		return err
	}
	return ctx.Err()
}

// translate maps bbolt errors that callers can act on to this package's
// sentinels. Close may race with the closed check in ready; bbolt then
// reports ErrDatabaseNotOpen.
func translate(err error) error {
	switch {
	case errors.Is(err, bolterrors.ErrDatabaseNotOpen):
		return ErrClosed
	case errors.Is(err, bolterrors.ErrDatabaseReadOnly):
		return ErrReadOnly
	}
	return err
}

// recordAbsent fails with ErrExists if the execution has a record, final
// or claimed.
func recordAbsent(tx *bolt.Tx, id []byte) error {
	if getRecord(tx, id) != nil {
		return fmt.Errorf("%w: execution %q", ErrExists, id)
	}
	return nil
}

// claimPresent fails with ErrNotFound unless the execution is claimed
// (begun and not yet committed or rolled back).
func claimPresent(tx *bolt.Tx, id []byte) error {
	if tx.Bucket(bucketExecuting).Get(id) == nil {
		return fmt.Errorf("%w: execution %q is not executing", ErrNotFound, id)
	}
	return nil
}

// getRecord returns the stored record of id: its final record, or its
// claim while it executes. A claim lives in the small executing bucket
// until the commit or rollback moves the final record into the large,
// append-mostly executions bucket: each record enters that tree once.
func getRecord(tx *bolt.Tx, id []byte) []byte {
	if data := tx.Bucket(bucketExecutions).Get(id); data != nil {
		return data
	}
	if claims := tx.Bucket(bucketExecuting); claims != nil { // absent from files of read-only opens made before it existed
		return claims.Get(id)
	}
	return nil
}

// insertRecord stores a final record; recordAbsent or claimPresent has
// checked the id. Records are keyed by execution id alone: the runtime's ids
// are time-ordered, so records are inserted near the end of the tree, and a
// batch of them dirties a few pages rather than one per record.
func insertRecord(tx *bolt.Tx, key []byte, data []byte) error {
	b := tx.Bucket(bucketExecutions)
	b.FillPercent = 0.9 // keys are nearly time-ordered: pages fill at the end
	if err := b.Put(key, data); err != nil {
		return fmt.Errorf("txn: store execution %q: %w", key, err)
	}
	return nil
}

// finishRecord stores the terminal record of an execution begun by Begin and
// drops its claim. claimPresent has checked that it is claimed.
func finishRecord(tx *bolt.Tx, key []byte, data []byte) error {
	if err := insertRecord(tx, key, data); err != nil {
		return err
	}
	return tx.Bucket(bucketExecuting).Delete(key)
}

// readState returns a copy of a committed state value.
func readState(tx *bolt.Tx, namespace, key string) ([]byte, bool) {
	b := tx.Bucket(bucketState).Bucket([]byte(namespace))
	if b == nil {
		return nil, false
	}
	v := b.Get([]byte(key))
	if v == nil {
		return nil, false
	}
	return bytes.Clone(v), true
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
