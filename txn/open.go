package txn

import (
	"encoding/json"
	"fmt"
	"log/slog"

	"github.com/toolgate/toolgate/txn/boltstore"
	"github.com/toolgate/toolgate/txn/driver"
	"github.com/toolgate/toolgate/txn/pgstore"
)

// This file is the one place that knows the backends: Open picks one by
// the path, and hands it what is the store's (a record's encoding, the
// test failpoints). Everything else sees a driver.Backend.

// DefaultLease is a node's lease when neither Options.Lease nor
// $TOOLGATE_LEASE sets it.
const DefaultLease = pgstore.DefaultLease

// MinLease is the shortest lease Open accepts, from Options.Lease or
// $TOOLGATE_LEASE.
const MinLease = pgstore.MinLease

// DefaultLogger returns the logger Open uses when Options.Logger is nil:
// each record becomes one line of the standard log package, worded as
// toolgate has always written the lease's messages.
func DefaultLogger() *slog.Logger { return pgstore.DefaultLogger() }

// IsPostgresURL reports whether path, as given to [Open], names a Postgres
// database (a postgres:// or postgresql:// URL) rather than a file.
func IsPostgresURL(path string) bool { return pgstore.IsURL(path) }

// ShownPath returns path as messages may show it: a Postgres URL with its
// password hidden, a file path as it is.
func ShownPath(path string) string {
	if pgstore.IsURL(path) {
		return pgstore.Redact(path)
	}
	return path
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
		if err := pgstore.CheckLease(o.Lease); err != nil {
			return err
		}
	}
	return pgstore.CheckNode(o.Node)
}

// openBackend opens the backend that path names.
func openBackend(path string, opts *Options, failpoint func(string) error) (driver.Backend, error) {
	if pgstore.IsURL(path) {
		be, err := pgstore.Open(path, &pgstore.Options{
			Timeout: opts.Timeout, NoSync: opts.NoSync, ReadOnly: opts.ReadOnly,
			Node: opts.Node, Lease: opts.Lease, Logger: opts.Logger, Failpoint: failpoint,
		})
		if err != nil {
			return nil, err
		}
		return be, nil
	}
	be, err := boltstore.Open(path, &boltstore.Options{
		Timeout: opts.Timeout, NoSync: opts.NoSync, ReadOnly: opts.ReadOnly,
		UpgradeRecord: upgradeRecord, Failpoint: failpoint,
	})
	if err != nil {
		return nil, err
	}
	return be, nil
}

// upgradeRecord re-encodes a record of bbolt format 2 (JSON) in the
// binary form of format 3.
func upgradeRecord(old []byte) ([]byte, error) {
	var r Record
	if err := json.Unmarshal(old, &r); err != nil {
		return nil, &boltstore.DecodeError{Err: err}
	}
	return encodeRecord(&r)
}
