package boltstore

import (
	"context"
	"encoding/binary"

	"github.com/toolgate/toolgate/internal/wal"
	bolt "go.etcd.io/bbolt"
)

// SetCrashTest makes the Stores opened until restore is called open their
// log through open, checkpoint once it reaches checkpoint bytes, and leave
// bbolt's syncs out (the test takes the file as the last checkpoint left
// it).
//
// The journal's buffers are made 64 bytes at the least, so that nearly
// every group's entry moves to a new buffer as it is written.
func SetCrashTest(open func(path string, applied uint64) (*wal.Log, []wal.Entry, error), checkpoint int64) (restore func()) {
	o, c, n, j := openLog, checkpointBytes, boltNoSync, journalChunk
	openLog, checkpointBytes, boltNoSync, journalChunk = open, checkpoint, true, 64
	return func() { openLog, checkpointBytes, boltNoSync, journalChunk = o, c, n, j }
}

// SetCheckpointFault makes every checkpoint's commit of the file call fault
// first, and fail with its error, until restore is called.
func SetCheckpointFault(fault func() error) (restore func()) {
	o := checkpointFault
	checkpointFault = fault
	return func() { checkpointFault = o }
}

// AuditSearchStart returns the first seq of the group where a search of
// the audit log for events made at or after from starts reading (0: none,
// the search reads nothing).
func AuditSearchStart(s *Store, from int64) (uint64, error) {
	var seq uint64
	err := s.view(context.Background(), func(tx *bolt.Tx) error {
		if k, _ := searchStart(tx.Bucket(bucketAudit).Cursor(), from); len(k) == 8 {
			seq = binary.BigEndian.Uint64(k)
		}
		return nil
	})
	return seq, err
}

// LogSize returns the bytes of the entries of a writer's log.
func LogSize(s *Store) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log.Size()
}

// Checkpoints returns how many checkpoints the Store has made.
func Checkpoints(s *Store) uint64 { return s.checkpoints.Load() }

// MaxKept is the largest audit group buffer kept from one update to the
// next.
const MaxKept = maxKept

// KeptAfterRelease returns the capacity of the audit group buffer kept for
// the next update when the one just used has capacity c.
func KeptAfterRelease(c int) int {
	var s Store
	s.auditBuf = make([]byte, 0, c)
	s.release()
	return cap(s.auditBuf)
}
