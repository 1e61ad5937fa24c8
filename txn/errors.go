package txn

import "github.com/toolgate/toolgate/txn/driver"

// Sentinel errors. Errors returned by this package wrap one of these (with
// detail such as the execution id or file path), so test them with
// [errors.Is]. They are the store contract's (package txn/driver), so a
// backend's errors are this package's.
var (
	// ErrNotFound reports that an execution record does not exist.
	ErrNotFound = driver.ErrNotFound

	// ErrExists reports that an execution record with the same id already
	// exists; records are never overwritten by Put or Begin.
	ErrExists = driver.ErrExists

	// ErrClosed reports use of a Store (or of a Tx of a Store) after Close.
	ErrClosed = driver.ErrClosed

	// ErrLocked reports that Open timed out waiting for the file lock.
	ErrLocked = driver.ErrLocked

	// ErrCorrupt reports a file that is not a bbolt database, or stored data
	// that cannot be decoded.
	ErrCorrupt = driver.ErrCorrupt

	// ErrIncompatible reports a database written in a format this build does
	// not understand, such as a newer format version.
	ErrIncompatible = driver.ErrIncompatible

	// ErrNoSchema reports a read-only open of a Postgres database that holds
	// no toolgate schema yet: a new, empty database, whose first write
	// creates it. It also matches ErrIncompatible, as it did before it
	// existed.
	ErrNoSchema = driver.ErrNoSchema

	// ErrReadOnly reports a write to a Store opened with Options.ReadOnly.
	ErrReadOnly = driver.ErrReadOnly

	// ErrTxDone reports use of a Tx after Commit or Rollback.
	ErrTxDone = driver.ErrTxDone

	// ErrInvalidRecord reports a Record that fails validation. Nothing is
	// written when it is returned.
	ErrInvalidRecord = driver.ErrInvalidRecord

	// ErrInvalidKey reports an empty or over-long state namespace or key.
	ErrInvalidKey = driver.ErrInvalidKey

	// ErrCommit reports that Tx.Commit could not apply its update. The error
	// also wraps the cause. Nothing of the update was applied and the Tx is
	// still active, so the caller can Rollback.
	ErrCommit = driver.ErrCommit

	// ErrPoisoned reports that an earlier commit failed with an I/O error
	// (a full disk, a read-only file system, a failed fsync). What is
	// durable is then not certain, so the Store refuses all further work;
	// reopening the database recovers.
	ErrPoisoned = driver.ErrPoisoned

	// ErrConflict reports, wrapped in ErrCommit, that state the transaction
	// read was changed by another commit before this one.
	ErrConflict = driver.ErrConflict

	// ErrUnavailable reports that Postgres could not be reached, or did not
	// answer in time: the write it failed wrote nothing (or, said in the
	// message, its outcome could not be learned), and the store goes on
	// once Postgres is back.
	ErrUnavailable = driver.ErrUnavailable

	// ErrLeaseLost reports that this node's lease on a shared Postgres
	// database has lapsed: it starts no execution until the lease is
	// renewed.
	ErrLeaseLost = driver.ErrLeaseLost
)

// Commit steps at which a test can inject a failure (see the test hook
// SetFailpoint).
const (
	StepCheckReads = driver.StepCheckReads // before the read-set is validated
	StepApplyWrite = driver.StepApplyWrite // after each buffered write is applied
	StepRecord     = driver.StepRecord     // before the final record is stored
	StepClaim      = driver.StepClaim      // before the claim is stored
	StepAudit      = driver.StepAudit      // before the audit events are appended
	StepCommit     = driver.StepCommit     // after every request, before the database commits
)
