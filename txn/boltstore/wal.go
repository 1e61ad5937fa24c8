package boltstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/toolgate/toolgate/internal/wal"
	bolt "go.etcd.io/bbolt"
)

// The write path: a write-ahead log in front of the file.
//
// A writer's Store keeps one bbolt write transaction open (ltx) between
// checkpoints. A group of writes is applied to it, its changes (the puts
// and deletes, as they were made) are appended to the log as one entry,
// and the log is synced: one sync per group, where a bbolt update costs
// two (its pages, then its meta page). Every read of a writer's Store
// reads ltx, under the same lock as the group, so it sees what the
// groups synced so far, and nothing of a group before its sync.
//
// When the log has reached checkpointBytes, the group that grew it
// ends with a checkpoint: ltx commits, as a bbolt update does (synced,
// atomic), with the number of the log's last entry (keyWALApplied in the
// meta bucket); the log then starts over (its next entries overwrite the
// file from its start, which keeps its size) and a new ltx begins. Between
// checkpoints the file is the last checkpoint's, whole; a crash or a lost
// power supply leaves that file and the log, whose entries past the
// checkpoint the next writer's Open applies again (they hold the changes
// themselves, so applying them twice is applying them once). Close ends
// with a checkpoint and removes the log.
//
// The bound: the log holds at most checkpointBytes plus one group, and its
// file at most that plus one extension of the log (4 MiB); ltx
// holds the pages those changes touched, and the log's entries, whose
// bytes bbolt's pages point into until the checkpoint.

// WALPath is the write-ahead log of the database file at path.
func WALPath(path string) string { return path + ".wal" }

// checkpointBytes is the log's size from which a group ends with a
// checkpoint (a variable for tests, which checkpoint often).
var checkpointBytes int64 = 8 << 20

// openLog opens the log of the file at path, which holds the log's entries
// up to applied (tests open one that forgets what was not synced).
var openLog = func(path string, applied uint64) (*wal.Log, []wal.Entry, error) {
	return wal.Open(path, applied)
}

// checkpointFault, when set (tests), is called as a checkpoint commits the
// file: an error fails that commit, as a full disk or an I/O error would.
var checkpointFault func() error

// boltNoSync makes bbolt skip its syncs while the log syncs (tests whose
// crashes are simulated: they take the file as its last checkpoint left it).
var boltNoSync = false

// keyWALApplied, in the meta bucket, holds the 8-byte big-endian number of
// the log's last entry that the file holds (written at each checkpoint).
var keyWALApplied = []byte("wal")

// The buckets a logged change names.
const (
	walMeta byte = iota
	walExecutions
	walExecuting
	walAudit
	walState // and a namespace
)

// The changes a log entry holds.
const (
	walPut    byte = 1
	walDelete byte = 2
)

// journal is the log entry of the group being applied, and how to undo
// its changes in ltx if the group must be applied again without one of its
// writes.
type journal struct {
	// buf holds the encoded changes. The keys and values ltx was given
	// point into it: bbolt keeps them until the checkpoint, so bytes once
	// written here are never written again (buf only grows, or is
	// replaced).
	buf   []byte
	start int // where the group's entry begins in buf
	undo  []undoOp
}

// undoOp puts a key back as it was before a change.
type undoOp struct {
	bucket    byte
	ns, key   []byte
	old       []byte // nil: it had no value
	createdNS bool   // the change created the namespace's bucket: drop it
}

func appendBytes(b, p []byte) ([]byte, []byte) {
	b = binary.AppendUvarint(b, uint64(len(p)))
	at := len(b)
	b = append(b, p...)
	return b, b[at:len(b):len(b)]
}

// bucket returns ltx's bucket id (ns for walState), creating the
// namespace's bucket if create and it has none (created reports it).
func bucketOf(tx *bolt.Tx, id byte, ns []byte, create bool) (b *bolt.Bucket, created bool, err error) {
	switch id {
	case walMeta:
		b = tx.Bucket(bucketMeta)
	case walExecutions:
		b = tx.Bucket(bucketExecutions)
		b.FillPercent = 0.9 // keys are nearly time-ordered: pages fill at the end
	case walExecuting:
		b = tx.Bucket(bucketExecuting)
	case walAudit:
		b = tx.Bucket(bucketAudit)
		b.FillPercent = 1.0 // append-only: split full pages, not half-full ones
	case walState:
		state := tx.Bucket(bucketState)
		if b = state.Bucket(ns); b == nil && create {
			if b, err = state.CreateBucket(ns); err != nil {
				return nil, false, fmt.Errorf("txn: create namespace %q: %w", ns, err)
			}
			created = true
		}
	default:
		return nil, false, fmt.Errorf("%w: a change of an unknown bucket (%d) in the write-ahead log", ErrCorrupt, id)
	}
	return b, created, nil
}

// put sets key to value in ltx's bucket id (ns: the namespace of
// walState), logs the change and keeps how to undo it.
func (s *Store) put(tx *bolt.Tx, id byte, ns, key, value []byte) error {
	b, created, err := bucketOf(tx, id, ns, true)
	if err != nil {
		return err
	}
	u := undoOp{bucket: id, ns: bytes.Clone(ns), key: bytes.Clone(key), createdNS: created}
	if old := b.Get(key); old != nil {
		u.old = bytes.Clone(old)
	}
	s.j.undo = append(s.j.undo, u)
	k, v := s.j.log(walPut, id, ns, key, value)
	return b.Put(k, v)
}

// del deletes key from ltx's bucket id, logs it and keeps how to undo it.
func (s *Store) del(tx *bolt.Tx, id byte, ns, key []byte) error {
	b, _, err := bucketOf(tx, id, ns, false)
	if err != nil || b == nil {
		return err
	}
	old := b.Get(key)
	if old == nil {
		return nil
	}
	s.j.undo = append(s.j.undo, undoOp{bucket: id, ns: bytes.Clone(ns), key: bytes.Clone(key), old: bytes.Clone(old)})
	s.j.log(walDelete, id, ns, key, nil)
	return b.Delete(key)
}

// journalChunk is the least size of a new buffer of the journal (a
// variable for the crash test, which makes it tiny).
var journalChunk = 1 << 20

// reserve makes room for n more bytes of the group's entry. bbolt points
// into the bytes of earlier changes until the checkpoint, so a full buffer
// is never grown by copying it whole (up to the log's 8 MiB, again and
// again): it is left as it is, and the group's entry so far moves to a new
// buffer.
func (j *journal) reserve(n int) {
	if cap(j.buf)-len(j.buf) >= n {
		return
	}
	group := j.buf[j.start:]
	j.buf = append(make([]byte, 0, max(journalChunk, 2*(len(group)+n))), group...)
	j.start = 0
}

// log encodes a change into the group's entry and returns its key and
// value as stored there.
func (j *journal) log(kind, id byte, ns, key, value []byte) (k, v []byte) {
	j.reserve(2 + 3*binary.MaxVarintLen64 + len(ns) + len(key) + len(value))
	j.buf = append(j.buf, kind, id)
	if id == walState {
		j.buf, _ = appendBytes(j.buf, ns)
	}
	j.buf, k = appendBytes(j.buf, key)
	if kind == walPut {
		j.buf, v = appendBytes(j.buf, value)
	}
	return k, v
}

// entry returns the group's log entry, and starts the next one after it.
func (j *journal) entry() []byte {
	e := j.buf[j.start:len(j.buf):len(j.buf)]
	j.start = len(j.buf)
	j.undo = j.undo[:0]
	return e
}

// rollback undoes the group's changes in ltx, last first, and drops its
// entry (its bytes stay: ltx may still point into them).
func (s *Store) rollback(tx *bolt.Tx) error {
	for i := len(s.j.undo) - 1; i >= 0; i-- {
		u := s.j.undo[i]
		if u.createdNS {
			if err := tx.Bucket(bucketState).DeleteBucket(u.ns); err != nil {
				return err
			}
			continue
		}
		b, _, err := bucketOf(tx, u.bucket, u.ns, true)
		if err != nil {
			return err
		}
		if u.old == nil {
			err = b.Delete(u.key)
		} else {
			err = b.Put(u.key, u.old)
		}
		if err != nil {
			return err
		}
	}
	s.j.undo = s.j.undo[:0]
	s.j.buf = s.j.buf[len(s.j.buf):] // never written again
	s.j.start = 0
	return nil
}

// replay applies a log entry's changes to tx. The entry's bytes must
// outlive tx (bbolt keeps slices of them until it commits).
func replay(tx *bolt.Tx, e []byte) error {
	bad := func(what string) error {
		return fmt.Errorf("%w: a change in the write-ahead log has %s", ErrCorrupt, what)
	}
	field := func() ([]byte, error) {
		n, k := binary.Uvarint(e)
		if k <= 0 || uint64(len(e)-k) < n {
			return nil, bad("a truncated field")
		}
		f := e[k : k+int(n) : k+int(n)]
		e = e[k+int(n):]
		return f, nil
	}
	for len(e) > 0 {
		if len(e) < 2 {
			return bad("a truncated header")
		}
		kind, id := e[0], e[1]
		e = e[2:]
		var ns, key, value []byte
		var err error
		if id == walState {
			if ns, err = field(); err != nil {
				return err
			}
		}
		if key, err = field(); err != nil {
			return err
		}
		switch kind {
		case walPut:
			if value, err = field(); err != nil {
				return err
			}
			b, _, err := bucketOf(tx, id, ns, true)
			if err != nil {
				return err
			}
			if err := b.Put(key, value); err != nil {
				return fmt.Errorf("txn: apply the write-ahead log: %w", err)
			}
		case walDelete:
			b, _, err := bucketOf(tx, id, ns, false)
			if err != nil {
				return err
			}
			if b != nil {
				if err := b.Delete(key); err != nil {
					return fmt.Errorf("txn: apply the write-ahead log: %w", err)
				}
			}
		default:
			return bad(fmt.Sprintf("an unknown kind (%d)", kind))
		}
	}
	return nil
}

// appliedSeq reads the number of the last log entry the file holds.
func appliedSeq(tx *bolt.Tx) (uint64, error) {
	v := tx.Bucket(bucketMeta).Get(keyWALApplied)
	switch {
	case v == nil:
		return 0, nil
	case len(v) != 8:
		return 0, fmt.Errorf("%w: the write-ahead log's checkpoint is %d bytes, not 8", ErrCorrupt, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

// startLog opens the log next to the file, applies the entries the file
// does not hold yet and checkpoints them, and begins ltx.
func (s *Store) startLog() (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = recovered(v)
		}
	}()
	if s.ltx, err = s.db.Begin(true); err != nil {
		return err
	}
	if s.applied, err = appliedSeq(s.ltx); err != nil {
		return err
	}
	l, entries, err := openLog(WALPath(s.path), s.applied)
	if err != nil {
		return fmt.Errorf("txn: open the write-ahead log: %w", err)
	}
	s.log = l
	replayed := false
	for _, e := range entries {
		switch {
		case e.Seq <= s.applied:
			continue // in the file already: the checkpoint ended before the log was emptied
		case e.Seq != s.applied+1:
			return fmt.Errorf("%w: %s: the write-ahead log goes on from entry %d, the file from entry %d", ErrCorrupt, WALPath(s.path), e.Seq, s.applied)
		}
		if err := replay(s.ltx, e.Payload); err != nil {
			return err
		}
		s.applied, replayed = e.Seq, true
	}
	if replayed {
		return s.checkpoint()
	}
	// Empty, or every entry in the file already (the checkpoint ended
	// before the log started over): the next is the checkpoint's next.
	return l.Reset(s.applied + 1)
}

// checkpoint commits ltx with the number of the log's last entry, empties
// the log and begins the next ltx. s.mu is held (or the Store is not yet
// shared). An error leaves no ltx: the Store must be poisoned.
func (s *Store) checkpoint() error {
	if err := s.commitLTX(); err != nil {
		return err
	}
	if err := s.log.Reset(s.applied + 1); err != nil {
		return err
	}
	var err error
	s.ltx, err = s.db.Begin(true)
	return err
}

// commitLTX commits ltx, as a bbolt update (synced, atomic), with the
// number of the log's last entry it holds, and leaves no ltx.
func (s *Store) commitLTX() error {
	tx := s.ltx
	s.ltx = nil
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], s.applied)
	if err := tx.Bucket(bucketMeta).Put(keyWALApplied, n[:]); err != nil {
		tx.Rollback()
		return err
	}
	if checkpointFault != nil {
		if err := checkpointFault(); err != nil {
			tx.Rollback()
			return err
		}
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	if !s.noSync {
		s.bboltSyncs.Add(2) // bbolt's commit: its pages, then its meta page
	}
	s.checkpoints.Add(1)
	s.j = journal{} // bbolt has let go of the entries' bytes
	return nil
}

// closeLog ends a writer's Store: a last checkpoint, and the log removed
// (its entries are all in the file; a crash before the removal is durable
// leaves entries the next Open skips). A poisoned Store keeps its log, for
// the next Open to apply.
func (s *Store) closeLog() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var err error
	clean := false
	if s.ltx != nil {
		if s.Err() == nil {
			err = s.commitLTX()
			clean = err == nil
		} else {
			s.ltx.Rollback()
			s.ltx = nil
		}
	}
	if s.log != nil {
		s.closedLogSyncs = s.log.Syncs()
		if cerr := s.log.Close(); err == nil {
			err = cerr
		}
		s.log = nil
		if clean {
			if rerr := os.Remove(WALPath(s.path)); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
				err = rerr
			}
		}
	}
	return err
}

// hotLog reports whether the file at path has a log with entries to apply
// (its writer did not close it).
func hotLog(path string) bool {
	fi, err := os.Stat(WALPath(path))
	return err == nil && fi.Size() > 0
}
