package pgstore

import "github.com/toolgate/toolgate/txn/driver"

// Errors of the contract, by their short names here.
var (
	ErrNotFound      = driver.ErrNotFound
	ErrExists        = driver.ErrExists
	ErrClosed        = driver.ErrClosed
	ErrLocked        = driver.ErrLocked
	ErrCorrupt       = driver.ErrCorrupt
	ErrIncompatible  = driver.ErrIncompatible
	ErrReadOnly      = driver.ErrReadOnly
	ErrUnavailable   = driver.ErrUnavailable
	ErrLeaseLost     = driver.ErrLeaseLost
	ErrInvalidRecord = driver.ErrInvalidRecord
)
