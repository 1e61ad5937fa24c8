package driver

import (
	"errors"
	"io/fs"
)

// Sentinel errors, the store's (package txn exports each under the same
// name). A backend's errors wrap one of these (with detail such as the
// execution id or file path), so test them with [errors.Is].
var (
	// ErrNotFound reports that an execution record does not exist.
	ErrNotFound = errors.New("txn: not found")

	// ErrExists reports that an execution record with the same id already
	// exists; records are never overwritten by Put or Begin.
	ErrExists = errors.New("txn: already exists")

	// ErrClosed reports use of a Store (or of a Tx of a Store) after Close.
	ErrClosed = errors.New("txn: store is closed")

	// ErrLocked reports that Open timed out waiting for the file lock.
	ErrLocked = errors.New("txn: database is locked by another process")

	// ErrCorrupt reports a file that is not a bbolt database, or stored data
	// that cannot be decoded.
	ErrCorrupt = errors.New("txn: corrupt database")

	// ErrIncompatible reports a database written in a format this build does
	// not understand, such as a newer format version.
	ErrIncompatible = errors.New("txn: incompatible database format")

	// ErrNoSchema reports a read-only open of a Postgres database that holds
	// no toolgate schema yet: a new, empty database, whose first write
	// creates it. It also matches ErrIncompatible, as it did before it
	// existed.
	ErrNoSchema = errors.New("txn: no toolgate schema in this database")

	// ErrReadOnly reports a write to a Store opened with Options.ReadOnly.
	ErrReadOnly = errors.New("txn: store is read-only")

	// ErrTxDone reports use of a Tx after Commit or Rollback.
	ErrTxDone = errors.New("txn: transaction already committed or rolled back")

	// ErrInvalidRecord reports a Record that fails validation. Nothing is
	// written when it is returned.
	ErrInvalidRecord = errors.New("txn: invalid record")

	// ErrInvalidKey reports an empty or over-long state namespace or key.
	ErrInvalidKey = errors.New("txn: invalid namespace or key")

	// ErrCommit reports that Tx.Commit could not apply its update. The error
	// also wraps the cause. Nothing of the update was applied and the Tx is
	// still active, so the caller can Rollback.
	ErrCommit = errors.New("txn: commit failed")

	// ErrPoisoned reports that an earlier commit failed with an I/O error
	// (a full disk, a read-only file system, a failed fsync). What is
	// durable is then not certain, so the Store refuses all further work;
	// reopening the database recovers.
	ErrPoisoned = errors.New("txn: store poisoned by a failed commit")

	// ErrConflict reports, wrapped in ErrCommit, that state the transaction
	// read was changed by another commit before this one.
	ErrConflict = errors.New("txn: conflict")

	// ErrUnavailable reports that a shared database could not be reached,
	// or did not answer in time: the write it failed wrote nothing (or,
	// said in the message, its outcome could not be learned), and the
	// store goes on once the database is back.
	ErrUnavailable = errors.New("txn: database unavailable")

	// ErrLeaseLost reports that this node's lease on a shared database has
	// lapsed: it starts no execution until the lease is renewed.
	ErrLeaseLost = errors.New("txn: this node's lease has expired")
)

// NoSchemaError is the error of ErrNoSchema for the database shown as
// Shown.
type NoSchemaError struct{ Shown string }

func (e *NoSchemaError) Error() string {
	return "txn: " + e.Shown + ": no toolgate schema in this database yet: it is empty (the first write, toolgate run or serve, creates it)"
}

// Is: ErrNoSchema, ErrIncompatible (what it was before ErrNoSchema), and
// fs.ErrNotExist, as the read-only open of a missing bbolt file is.
func (e *NoSchemaError) Is(target error) bool {
	return target == ErrNoSchema || target == ErrIncompatible || target == fs.ErrNotExist
}

// Commit steps at which a test can inject a failure: a backend calls its
// failpoint function (if any) with each.
const (
	StepCheckReads = "check-reads" // before the read-set is validated
	StepApplyWrite = "apply-write" // after each buffered write is applied
	StepRecord     = "record"      // before the final record is stored
	StepClaim      = "claim"       // before the claim is stored
	StepAudit      = "audit"       // before the audit events are appended
	StepCommit     = "commit"      // after every request, before the database commits
)
