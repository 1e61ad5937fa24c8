package boltstore

import "github.com/toolgate/toolgate/internal/wal"

// SetCrashTest makes the Stores opened until restore is called open their
// log through open, checkpoint once it passes checkpoint bytes, and leave
// bbolt's syncs out (the test takes the file as the last checkpoint left
// it).
//
// The journal's buffers are made 64 bytes at the least, so that nearly
// every group's entry moves to a new buffer as it is written.
func SetCrashTest(open func(path string) (*wal.Log, []wal.Entry, error), checkpoint int64) (restore func()) {
	o, c, n, j := openLog, checkpointBytes, boltNoSync, journalChunk
	openLog, checkpointBytes, boltNoSync, journalChunk = open, checkpoint, true, 64
	return func() { openLog, checkpointBytes, boltNoSync, journalChunk = o, c, n, j }
}
