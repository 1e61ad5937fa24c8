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

// commitBatch applies a batch to ltx, logs its changes as one entry of the
// write-ahead log and syncs it (wal.go), and sets the outcome of every
// request (its Err); the committer answers them. s.mu is held throughout:
// no read sees a group's changes before they are durable.
func (s *Store) commitBatch(batch []*request) {
	if err := s.Err(); err != nil {
		for _, r := range batch {
			r.Err = err
		}
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	todo := slices.Clone(batch) // the requests still to commit
	for len(todo) > 0 {
		// blamed is the request whose check or apply is running, and so
		// the one that fails alone if it fails or panics; nil after them.
		var blamed *request
		var failErr, auditErr error
		auditing := false // appending the batch's audit group
		s.batches.Add(1)
		err := s.applyGroup(func(tx *bolt.Tx) error {
			s.pending = s.pending[:0]
			for _, r := range todo {
				blamed, r.R.audited = r, false
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
			blamed = nil
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
		s.release()
		var p *panicError
		switch {
		case errors.As(err, &p) && blamed != nil:
			failErr = p // the request that panicked fails alone, like a failed apply
		case p != nil && auditing:
			auditErr = p // bbolt met a damaged page of the log: as a damaged head
		}
		if blamed != nil || auditErr != nil {
			// Undo the group's changes in ltx, to apply it again without
			// the request(s) that failed; if that fails, what ltx holds
			// is not known.
			if uerr := s.applyGroup(s.rollback); uerr != nil {
				err = uerr
				blamed, auditErr = nil, nil
			}
		}
		switch {
		case blamed != nil:
			// Undone: the failed request fails alone, and the rest are
			// redone without it.
			blamed.Err = failErr
			todo = slices.DeleteFunc(todo, func(r *request) bool { return r == blamed })
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
		case err == nil:
			err = s.logGroup()
			if err == nil {
				return // durable: each request's err is its check's outcome
			}
			fallthrough
		default:
			// The group could not be applied or made durable: a write or
			// sync error, a full disk, a read-only file system. What ltx
			// and the disk hold of it is not known for certain, so the
			// store refuses all further work until it is reopened, which
			// applies what the log holds.
			perr := s.poison(err)
			for _, r := range todo {
				r.Err = perr
			}
			return
		}
	}
}

// logGroup appends the group's changes to the log as one entry and syncs
// it (writes it, with NoSync), then checkpoints if the log has reached
// checkpointBytes. An error leaves the group's outcome unknown: the caller
// poisons the Store. A checkpoint that fails comes after the group is
// durable: it poisons the Store for what follows, and the group succeeds
// (the next Open applies it from the log).
func (s *Store) logGroup() error {
	if e := s.j.entry(); len(e) > 0 {
		seq, err := s.log.Append(e)
		if err != nil {
			return err
		}
		if s.noSync {
			err = s.log.Write()
		} else {
			err = s.log.Sync()
		}
		if err != nil {
			return err
		}
		s.applied = seq
	}
	if s.log.Size() >= checkpointBytes {
		if err := s.checkpoint(); err != nil {
			s.poison(fmt.Errorf("checkpoint: %w", err))
		}
	}
	return nil
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

// applyGroup runs fn on ltx, turning a panic (a caller's callback, or
// bbolt meeting a corrupt page) into an error: the batch's requests must
// still be answered and the leadership handed on.
func (s *Store) applyGroup(fn func(*bolt.Tx) error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = recovered(v)
		}
	}()
	if s.ltx == nil {
		return ErrClosed
	}
	return fn(s.ltx)
}
