package pgstore

import (
	"context"

	"github.com/toolgate/toolgate/txn/driver"
)

// Kill ends p as SIGKILL would: its lease is no longer renewed and its
// connections close, but its row and claims stay.
func Kill(p *Store) {
	p.closed.Store(true)
	p.w.Close()
	close(p.lease.stop)
	<-p.lease.done
	liveInstances.Delete(p.lease.run())
	p.pool.Close()
}

// Sweep runs the background sweep once, with the finish function Recover
// was given.
func Sweep(p *Store) ([]driver.Claim, error) {
	p.lease.mu.Lock()
	f := p.lease.finish
	p.lease.mu.Unlock()
	return p.sweep(context.Background(), f, true)
}

// SchemaSteps are the schema's upgrade steps, by version.
var SchemaSteps = pgSchemaSteps

// WriterLock is the advisory lock a version-1 writer held.
const WriterLock = pgWriterLock

// ClaimsOf returns the ids of the claims of the Postgres store under s.
func ClaimsOf(s interface{ Driver() driver.Backend }) ([]string, error) {
	return s.Driver().(*Store).Claims(context.Background())
}
