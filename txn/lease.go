package txn

import (
	"context"

	"github.com/toolgate/toolgate/txn/driver"
)

// Leases: what a backend shared by many nodes has (driver.Leaser), and
// one a single writer owns (a bbolt file) has not.

// OnSweep registers fn, run (on the lease's goroutine) after each
// background sweep of what expired nodes left: their claims finished, their
// lease rows deleted. The runtime settles their idempotency keys there. A
// no-op on bbolt, where a writer owns the file.
func (s *Store) OnSweep(fn func(context.Context)) {
	if l, ok := s.be.(driver.Leaser); ok {
		l.OnSweep(fn)
	}
}

// Node returns the name of this node on a shared Postgres database, under
// which its claims are stored, or "" (bbolt, or read-only).
func (s *Store) Node() string {
	if l, ok := s.be.(driver.Leaser); ok {
		return l.Node()
	}
	return ""
}

// NodeRun returns this node's name and run ("name/run") on a shared
// Postgres database, or "" (bbolt, or read-only): what the runtime tags an
// idempotency key in flight with.
func (s *Store) NodeRun() string {
	if l, ok := s.be.(driver.Leaser); ok {
		return l.NodeRun()
	}
	return ""
}

// NodeLive reports whether run (a NodeRun of some store, or a bare node
// name) is another run than this store's whose lease on the shared
// database holds: what it has in flight is its own, not to be settled by
// this one. Always false on bbolt (one process owns the file).
func (s *Store) NodeLive(ctx context.Context, run string) (bool, error) {
	l, ok := s.be.(driver.Leaser)
	if !ok || run == "" {
		return false, nil
	}
	if run == l.NodeRun() || run == l.Node() {
		return false, nil
	}
	if err := s.ready(ctx); err != nil {
		return false, err
	}
	return l.NodeLive(ctx, run)
}

// Syncs returns how many times the store has made its writes durable (its
// backend's count: an fsync of a file it writes), and false for a backend
// that does not count them.
func (s *Store) Syncs() (uint64, bool) {
	if c, ok := s.be.(driver.SyncCounter); ok {
		return c.Syncs(), true
	}
	return 0, false
}

// Backend describes the database behind the store, for toolgate doctor:
// "bbolt file, format 3", or "Postgres 16.4, schema 2, 2 nodes with a
// live lease".
func (s *Store) Backend(ctx context.Context) (string, error) {
	if err := s.ready(ctx); err != nil {
		return "", err
	}
	if d, ok := s.be.(driver.Describer); ok {
		return d.Describe(ctx)
	}
	return "a store of an unnamed backend", nil
}
