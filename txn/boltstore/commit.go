package boltstore

import (
	"context"
	"errors"
	"fmt"
	goruntime "runtime"
	"slices"
	"strings"

	"github.com/toolgate/toolgate/txn/driver"
	bolt "go.etcd.io/bbolt"
)

// writeReq is what one write asks of a group's bbolt update. check runs
// first and may only read; if it fails, the request fails alone and nothing
// of it is written. apply then writes; if it fails, the whole update is
// undone and run again without it, so one request's failure never fails
// its neighbours.
type writeReq struct {
	check func(*bolt.Tx) error
	apply func(*bolt.Tx) error

	audited bool // apply queued audit events; set by the leader
}

type request = driver.Request[writeReq]

// errAbortBatch makes bbolt roll back an update whose batch must be redone.
var errAbortBatch = errors.New("txn: batch aborted")

// write queues a request for the group committer and returns its outcome:
// nil only once the update holding it has been committed (and, unless
// NoSync, fsynced). The caller's ctx is checked before the request is
// queued, not after: a queued write always completes, so its outcome is
// never unknown to the caller.
func (s *Store) write(ctx context.Context, check, apply func(*bolt.Tx) error) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	if s.readOnly {
		return ErrReadOnly
	}
	return s.w.Write(&request{R: writeReq{check: check, apply: apply}})
}

// audit queues a request's audit events, behind a failpoint, for the group
// commitBatch appends at the end of the update that applies the request.
func (s *Store) audit(events []driver.Event) error {
	if err := s.failpoint(driver.StepAudit); err != nil {
		return err
	}
	s.pending = append(s.pending, events...)
	return nil
}

// commitBatch applies a batch in one bbolt update and sets the outcome of
// every request (its Err); the committer answers them.
func (s *Store) commitBatch(batch []*request) {
	if err := s.Err(); err != nil {
		for _, r := range batch {
			r.Err = err
		}
		return
	}
	todo := slices.Clone(batch) // the requests still to commit
	for len(todo) > 0 {
		failed, failErr, auditErr := -1, error(nil), error(nil)
		auditing := false // appending the batch's audit group
		s.batches.Add(1)
		err := s.update(func(tx *bolt.Tx) error {
			s.pending = s.pending[:0]
			for i, r := range todo {
				failed, r.R.audited = i, false // blamed if check or apply panics
				if r.Err = r.R.check(tx); r.Err != nil {
					continue
				}
				n := len(s.pending)
				if err := r.R.apply(tx); err != nil {
					failErr = err
					return errAbortBatch
				}
				r.R.audited = len(s.pending) > n
			}
			failed = -1
			// The batch's audit events, one group: one put instead of one
			// per request, into pages that fill up.
			auditing = true
			if err := s.appendAudit(tx, s.pending); err != nil {
				auditErr = err
				return errAbortBatch
			}
			auditing = false
			return s.failpoint(driver.StepCommit)
		})
		s.release() // bbolt has copied the values into its pages, or dropped them
		var p *panicError
		switch {
		case errors.As(err, &p) && failed >= 0:
			failErr = p // the request that panicked fails alone, like a failed apply
		case p != nil && auditing:
			auditErr = p // bbolt met a damaged page of the log: as a damaged head
		case failErr == nil:
			failed = -1
		}
		switch {
		case failed >= 0:
			// Undone by bbolt: the failed request fails alone, and the rest
			// are redone without it.
			todo[failed].Err = failErr
			todo = slices.Delete(todo, failed, failed+1)
		case auditErr != nil:
			// The log cannot take events (its head or a page of it is
			// damaged): every request that has some fails with that error,
			// and the others are redone without them.
			todo = slices.DeleteFunc(todo, func(r *request) bool {
				if r.R.audited {
					r.Err = auditErr
				}
				return r.R.audited
			})
		case err != nil:
			// The update itself failed: a write or fsync error, a full disk, a
			// read-only file system. bbolt rolled it back, but what reached the
			// disk is not known for certain, so the store refuses all further
			// work until it is reopened.
			perr := s.poison(err)
			for _, r := range todo {
				r.Err = perr
			}
			return
		default:
			return // committed: each request's err is its check's outcome
		}
	}
}

// maxKept bounds the audit group buffer kept from one update to the next,
// so that one huge group does not pin its memory.
const maxKept = 64 << 10

// release drops the audit events of the update that has just ended, and
// its group's buffer if it grew too large to keep.
func (s *Store) release() {
	clear(s.pending)
	s.pending = s.pending[:0]
	if cap(s.auditBuf) > maxKept {
		s.auditBuf = nil
	}
}

// panicError is a panic recovered from a bbolt transaction. One raised by
// bbolt itself means a page it read is not what it should be: the error
// then wraps ErrCorrupt.
type panicError struct {
	value   any
	corrupt bool // bbolt panicked (or the runtime, in bbolt's code)
}

func (p *panicError) Error() string {
	if p.corrupt {
		return fmt.Sprintf("%v: bbolt failed reading a page (%v); check the file with 'bbolt check'", ErrCorrupt, p.value)
	}
	return fmt.Sprintf("txn: panic during commit: %v", p.value)
}

func (p *panicError) Unwrap() error {
	if p.corrupt {
		return ErrCorrupt
	}
	return nil
}

// recovered turns a recovered panic value into a *panicError. It must be
// called by the deferred function that recovered it, so that the stack
// still shows where the panic began.
func recovered(v any) *panicError {
	var pcs [64]uintptr
	n := goruntime.Callers(2, pcs[:])
	frames := goruntime.CallersFrames(pcs[:n])
	panicking := false
	for {
		f, more := frames.Next()
		switch {
		case f.Function == "runtime.gopanic":
			panicking = true
		case panicking && strings.HasPrefix(f.Function, "runtime."):
			// a runtime error (an index out of range) raised in the caller
		case panicking:
			return &panicError{value: v, corrupt: strings.HasPrefix(f.Function, "go.etcd.io/bbolt")}
		}
		if !more {
			return &panicError{value: v}
		}
	}
}

// update runs db.Update, turning a panic (a caller's callback, or bbolt
// meeting a corrupt page) into an error: bbolt has already rolled the update
// back and released its lock, and the batch's requests must still be
// answered and the leadership handed on.
func (s *Store) update(fn func(*bolt.Tx) error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = recovered(v)
		}
	}()
	return s.db.Update(fn)
}
