// Package boltstore is the embedded backend of toolgate's store: one bbolt
// file, one writer at a time (the file lock), its writes group-committed
// into one update and one fsync. It implements the contract of package
// txn/driver; package txn opens it for a file path (txn.Open).
//
// Layout (format 3), buckets of the file:
//
//   - meta: "format" -> the 8-byte big-endian format version.
//   - executions: id -> the final record (its bytes as txn encodes them).
//   - executing: id -> the claim of an execution in progress (its
//     EXECUTING record), until its commit or rollback moves the final
//     record into executions.
//   - state: namespace (a nested bucket) -> key -> value.
//   - audit: the 8-byte big-endian seq of a group's first entry -> the
//     group (a JSON array of entries); "\xff" -> the head (the last seq and
//     the 32-byte hash of the last entry).
package boltstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/toolgate/toolgate/internal/wal"
	"github.com/toolgate/toolgate/txn/driver"
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
// 3: records are stored in a compact binary form (txn's encoding), not JSON.
const formatVersion uint64 = 3

var (
	bucketMeta       = []byte("meta")
	bucketExecutions = []byte("executions")
	bucketState      = []byte("state")
	bucketExecuting  = []byte("executing") // the claims: records in EXECUTING, by id
	bucketAudit      = []byte("audit")
	keyFormat        = []byte("format")
	// keyAuditHead holds the 8-byte last seq and the 32-byte last link. It
	// lives in the audit bucket and sorts after every 8-byte entry key, so
	// it shares the last leaf page with the newest entries.
	keyAuditHead = []byte(driver.AuditHeadKey)
)

// Errors of the contract, by their short names here.
var (
	ErrNotFound     = driver.ErrNotFound
	ErrExists       = driver.ErrExists
	ErrClosed       = driver.ErrClosed
	ErrLocked       = driver.ErrLocked
	ErrCorrupt      = driver.ErrCorrupt
	ErrIncompatible = driver.ErrIncompatible
	ErrReadOnly     = driver.ErrReadOnly
	ErrPoisoned     = driver.ErrPoisoned
)

// Options configure Open.
type Options struct {
	// Timeout is how long Open waits for the file lock before failing
	// with ErrLocked. Zero means DefaultTimeout.
	Timeout time.Duration
	// NoSync skips fsync on commit: tests and benchmarks only.
	NoSync bool
	// ReadOnly opens an existing file for inspection, under a shared lock.
	ReadOnly bool
	// UpgradeRecord re-encodes a record of format 2 (JSON) into format 3's
	// form, for the upgrade of an older file at its first write: a
	// record's encoding is the store's (package txn), not the file's. An
	// error of type *DecodeError says old is not a record of format 2.
	UpgradeRecord func(old []byte) ([]byte, error)
	// Failpoint, when set (tests), is called at each commit step (the
	// driver.Step constants); an error it returns is injected there.
	Failpoint func(step string) error
}

// DecodeError is UpgradeRecord's error for bytes that are not a record of
// format 2.
type DecodeError struct{ Err error }

func (e *DecodeError) Error() string { return e.Err.Error() }
func (e *DecodeError) Unwrap() error { return e.Err }

// Store is a bbolt file behind the store contract. It is safe for
// concurrent use.
type Store struct {
	path      string
	db        *bolt.DB
	readOnly  bool
	closed    atomic.Bool
	poisoned  atomic.Pointer[error]
	failpoint func(step string) error
	batches   atomic.Int64 // groups applied by the committer
	noSync    bool

	// A writer's write-ahead log and the bbolt write transaction its
	// groups are applied to between checkpoints (wal.go). mu serializes
	// the groups, the checkpoints and the reads of ltx; nil in a
	// read-only Store, whose reads are bbolt read transactions.
	mu          sync.Mutex
	ltx         *bolt.Tx
	log         *wal.Log
	applied     uint64  // the number of the last log entry applied to ltx
	j           journal // the group being applied
	checkpoints atomic.Uint64
	bboltSyncs  atomic.Uint64
	// closedLogSyncs: the syncs of the log closed by Close.
	closedLogSyncs uint64

	w driver.Committer[writeReq]
	// The audit events of the update in progress, in request order. They
	// are appended as one group when every request has been applied (see
	// commitBatch); only the leader touches it, as auditBuf, the group's
	// encoding, reused from one update to the next.
	pending  []driver.Event
	auditBuf []byte
	// auditTailChecked: the stored log was found consistent with its
	// head; only the leader touches it.
	auditTailChecked bool
}

var _ driver.Backend = (*Store)(nil)

// Open opens the bbolt file at path, creating it (and its parent
// directory) if needed, and checks its format version, upgrading an older
// one in place at a writer's open. A file that is not a database yields an
// error wrapping ErrCorrupt, one of a newer format ErrIncompatible, a lock
// held by another process ErrLocked, and the read-only open of a missing
// file fs.ErrNotExist.
func Open(path string, opts *Options) (*Store, error) {
	if opts == nil {
		opts = &Options{}
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
	if opts.ReadOnly && hotLog(path) {
		// Its writer did not close it: what its log holds is applied by
		// a writer's open (as SQLite's readers roll back a hot journal),
		// and then read.
		rw := *opts
		rw.ReadOnly = false
		w, err := Open(path, &rw)
		if err != nil {
			return nil, fmt.Errorf("%s was not closed by its writer, and its write-ahead log could not be applied: %w", path, err)
		}
		if err := w.Close(); err != nil {
			return nil, err
		}
	}
	if !opts.ReadOnly {
		if synced, ok := FreelistSynced(path); ok && !synced {
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
		NoSync:   opts.NoSync || boltNoSync,
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
	if err := initialize(db, path, opts.ReadOnly, opts.UpgradeRecord); err != nil {
		_ = db.Close()
		return nil, err
	}
	s := &Store{path: path, db: db, readOnly: opts.ReadOnly, failpoint: opts.Failpoint, noSync: opts.NoSync}
	if s.failpoint == nil {
		s.failpoint = func(string) error { return nil }
	}
	if !opts.ReadOnly {
		if err := s.startLog(); err != nil {
			if s.ltx != nil {
				s.ltx.Rollback()
			}
			if s.log != nil {
				s.log.Close()
			}
			_ = db.Close()
			return nil, err
		}
	}
	s.w.Commit = s.commitBatch
	s.w.Yield = true
	return s, nil
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
func initialize(db *bolt.DB, path string, readOnly bool, upgrade func([]byte) ([]byte, error)) (err error) {
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
				return migrate(tx, path, got, upgrade)
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

// Close waits for the writes in progress and closes the file.
func (s *Store) Close() error {
	if !s.w.Close() {
		return nil
	}
	s.closed.Store(true)
	lerr := s.closeLog()
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("txn: close %s: %w", s.path, err)
	}
	if lerr != nil {
		return fmt.Errorf("txn: close %s: %w", s.path, lerr)
	}
	return nil
}

// Syncs returns how many times the Store has made its writes durable:
// the log's syncs, and bbolt's two per checkpoint.
func (s *Store) Syncs() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.bboltSyncs.Load() + s.closedLogSyncs
	if s.log != nil {
		n += s.log.Syncs()
	}
	return n
}

// Describe says "bbolt file, format N", for toolgate doctor.
func (s *Store) Describe(ctx context.Context) (string, error) {
	var format uint64
	err := s.view(ctx, func(tx *bolt.Tx) error {
		if v := tx.Bucket(bucketMeta).Get(keyFormat); len(v) == 8 {
			format = binary.BigEndian.Uint64(v)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("bbolt file, format %d", format), nil
}

// view runs fn in one bbolt read transaction, after checking that the store
// is open and ctx is not done.
func (s *Store) view(ctx context.Context, fn func(*bolt.Tx) error) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	if s.readOnly {
		return translate(s.viewTx(fn))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ltx == nil {
		if err := s.Err(); err != nil {
			return err
		}
		return ErrClosed
	}
	return translate(s.readLTX(fn))
}

// readLTX runs fn on ltx, s.mu held, turning a panic into an error as
// viewTx does.
func (s *Store) readLTX(fn func(*bolt.Tx) error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = recovered(v)
		}
	}()
	return fn(s.ltx)
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
	if err := s.Err(); err != nil {
		return err
	}
	return ctx.Err()
}

// translate maps bbolt errors that callers can act on to the contract's
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

// poison records the first commit failure; every later operation returns
// it. The message says what to fix before reopening: while the cause
// persists (a full disk), reopening only fails again.
func (s *Store) poison(cause error) error {
	err := fmt.Errorf("%w: %s: %v; %s", ErrPoisoned, s.path, cause, remedy(cause))
	s.poisoned.CompareAndSwap(nil, &err)
	return *s.poisoned.Load()
}

// remedy says what an operator does about the cause of a failed commit.
func remedy(cause error) string {
	switch {
	case errors.Is(cause, syscall.ENOSPC):
		return "the file system holding the database is full: free space on it, then reopen the database to recover"
	case errors.Is(cause, syscall.EDQUOT):
		return "the disk quota of the database's owner is used up: free space or raise the quota, then reopen the database to recover"
	case errors.Is(cause, syscall.EROFS):
		return "the file system holding the database is read-only: make it writable, then reopen the database to recover"
	case errors.Is(cause, syscall.EFBIG):
		return "the database file reached the largest size allowed (by the file system, or the process's file size limit): raise the limit, then reopen the database to recover"
	case errors.Is(cause, syscall.EIO):
		return "the disk reported an I/O error: check the disk, then reopen the database to recover"
	}
	return "find and fix the cause, then reopen the database to recover"
}

// Err returns the error that poisoned the store (wrapping ErrPoisoned), or
// nil while it is healthy.
func (s *Store) Err() error {
	if p := s.poisoned.Load(); p != nil {
		return *p
	}
	return nil
}
