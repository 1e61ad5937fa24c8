package boltstore

import "github.com/toolgate/toolgate/internal/wal"

// SetCrashTest makes the Stores opened until restore is called open their
// log through open, checkpoint once it passes checkpoint bytes, and leave
// bbolt's syncs out (the test takes the file as the last checkpoint left
// it).
func SetCrashTest(open func(path string) (*wal.Log, []wal.Entry, error), checkpoint int64) (restore func()) {
	o, c, n := openLog, checkpointBytes, boltNoSync
	openLog, checkpointBytes, boltNoSync = open, checkpoint, true
	return func() { openLog, checkpointBytes, boltNoSync = o, c, n }
}
