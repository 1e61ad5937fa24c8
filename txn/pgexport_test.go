package txn

import "context"

// KillNode ends a Postgres store as SIGKILL would: its lease is no longer
// renewed and its connections close, but its row and claims stay.
func KillNode(s *Store) {
	p := s.be.(*pgStore)
	s.closed.Store(true)
	close(p.lease.stop)
	<-p.lease.done
	liveInstances.Delete(p.lease.run())
	p.pool.Close()
}

// Sweep runs the background sweep once, with the finish function Recover
// was given.
func Sweep(s *Store) ([]*Record, error) {
	p := s.be.(*pgStore)
	p.lease.mu.Lock()
	f := p.lease.finish
	p.lease.mu.Unlock()
	return p.sweep(context.Background(), f, true)
}

// PGSchemaSteps are the schema's upgrade steps, by version.
var PGSchemaSteps = pgSchemaSteps

// PGWriterLock is the advisory lock a version-1 writer held.
const PGWriterLock = pgWriterLock
