package txn

import (
	"context"
	"errors"
	"fmt"
	goruntime "runtime"
	"slices"
	"strings"
	"syscall"

	bolt "go.etcd.io/bbolt"
)

// maxBatch bounds how many writes share one bbolt update.
const maxBatch = 512

// writeReq is one write waiting for the group committer. check runs first
// and may only read; if it fails, the request fails alone and nothing of it
// is written. apply then writes; if it fails, the whole update is undone and
// run again without it, so one request's failure never fails its
// neighbours.
type writeReq struct {
	check func(*bolt.Tx) error
	apply func(*bolt.Tx) error
	done  chan error // the outcome, or errLead to a writer made leader

	// Set by the leader during commitBatch.
	err     error // the outcome
	audited bool  // apply queued audit events
}

// errAbortBatch makes bbolt roll back an update whose batch must be redone.
var errAbortBatch = errors.New("txn: batch aborted")

// errLead wakes a queued writer to take over as leader.
var errLead = errors.New("txn: lead the next batch")

// write queues a request and returns its outcome: nil only once the update
// holding it has been committed (and, unless NoSync, fsynced). The caller's
// ctx is checked before the request is queued, not after: a queued write
// always completes, so its outcome is never unknown to the caller.
//
// This is group commit without a timer or a dedicated goroutine. A writer
// that finds no batch in progress becomes the leader and commits at once on
// its own goroutine, so a lone caller pays no handoff. Writers that arrive
// while the leader's update (and its fsync) runs queue up; when the leader
// is done it wakes the first of them to commit all that queued, in one
// update and one fsync. Under load, many commits share each fsync.
func (s *Store) write(ctx context.Context, check, apply func(*bolt.Tx) error) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	if s.readOnly {
		return ErrReadOnly
	}
	r := &writeReq{check: check, apply: apply, done: make(chan error, 1)}
	s.wmu.Lock()
	if s.closed.Load() {
		s.wmu.Unlock()
		return ErrClosed
	}
	s.writers.Add(1)
	defer s.writers.Done()
	s.queue = append(s.queue, r)
	if s.leading {
		s.wmu.Unlock()
		if err := <-r.done; err != errLead {
			return err
		}
		s.wmu.Lock() // woken as the next leader; r is still queued
	}
	s.leading = true
	n := min(len(s.queue), maxBatch)
	batch := s.queue[:n:n]
	s.queue = s.queue[n:]
	s.wmu.Unlock()

	s.commitBatch(batch) // sets the outcome of every request, r included

	s.wmu.Lock()
	handedOff := len(s.queue) > 0
	if handedOff {
		s.queue[0].done <- errLead
	} else {
		s.leading = false
		s.queue = nil
	}
	s.wmu.Unlock()
	if handedOff {
		// Let the next leader run now, before this goroutine answers the
		// batch: under load every processor is busy, and the scheduler
		// would otherwise leave it waiting behind the writers answered,
		// with the store idle meanwhile.
		goruntime.Gosched()
	}
	for _, q := range batch {
		if q != r {
			q.done <- q.err
		}
	}
	return r.err
}

// commitBatch applies a batch in one bbolt update and sets the outcome of
// every request (its err); the leader answers them.
func (s *Store) commitBatch(batch []*writeReq) {
	if err := s.poisonedErr(); err != nil {
		for _, r := range batch {
			r.err = err
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
				failed, r.audited = i, false // blamed if check or apply panics
				if r.err = r.check(tx); r.err != nil {
					continue
				}
				n := len(s.pending)
				if err := r.apply(tx); err != nil {
					failErr = err
					return errAbortBatch
				}
				r.audited = len(s.pending) > n
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
			return s.failpoint(StepCommit)
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
			todo[failed].err = failErr
			todo = slices.Delete(todo, failed, failed+1)
		case auditErr != nil:
			// The log cannot take events (its head or a page of it is
			// damaged): every request that has some fails with that error,
			// and the others are redone without them.
			todo = slices.DeleteFunc(todo, func(r *writeReq) bool {
				if r.audited {
					r.err = auditErr
				}
				return r.audited
			})
		case err != nil:
			// The update itself failed: a write or fsync error, a full disk, a
			// read-only file system. bbolt rolled it back, but what reached the
			// disk is not known for certain, so the store refuses all further
			// work until it is reopened.
			perr := s.poison(err)
			for _, r := range todo {
				r.err = perr
			}
			return
		default:
			return // committed: each request's err is its check's outcome
		}
	}
}

// release returns the pooled buffers of the update that has just ended,
// and drops its audit events.
func (s *Store) release() {
	clear(s.pending)
	s.pending = s.pending[:0]
	for i, p := range s.used {
		putBuf(p)
		s.used[i] = nil
	}
	s.used = s.used[:0]
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

// poison records the first commit failure; every later operation returns
// it. The message says what to fix before reopening: while the cause
// persists (a full disk), reopening only fails again.
func (s *Store) poison(cause error) error {
	err := fmt.Errorf("%w: %s: %v; %s", ErrPoisoned, s.path, cause, remedy(cause))
	s.poisoned.CompareAndSwap(nil, &err)
	return *s.poisoned.Load()
}

// remedy says what an operator does about the cause of a failed commit.
func remedy(cause error) string {
	switch {
	case errors.Is(cause, syscall.ENOSPC):
		return "the file system holding the database is full: free space on it, then reopen the database to recover"
	case errors.Is(cause, syscall.EDQUOT):
		return "the disk quota of the database's owner is used up: free space or raise the quota, then reopen the database to recover"
	case errors.Is(cause, syscall.EROFS):
		return "the file system holding the database is read-only: make it writable, then reopen the database to recover"
	case errors.Is(cause, syscall.EFBIG):
		return "the database file reached the largest size allowed (by the file system, or the process's file size limit): raise the limit, then reopen the database to recover"
	case errors.Is(cause, syscall.EIO):
		return "the disk reported an I/O error: check the disk, then reopen the database to recover"
	}
	return "find and fix the cause, then reopen the database to recover"
}

// Err returns the error that poisoned the store (wrapping ErrPoisoned), or
// nil while it is healthy.
func (s *Store) Err() error { return s.poisonedErr() }

func (s *Store) poisonedErr() error {
	if p := s.poisoned.Load(); p != nil {
		return *p
	}
	return nil
}

// Commit steps at which a test can inject a failure (see failpoint).
const (
	StepCheckReads = "check-reads" // before the read-set is validated
	StepApplyWrite = "apply-write" // after each buffered write is applied
	StepRecord     = "record"      // before the final record is stored
	StepClaim      = "claim"       // before the executing index is updated
	StepAudit      = "audit"       // before the audit events are appended
	StepCommit     = "commit"      // after every request, before bbolt commits
)

// failpoint returns the error a test hook injects at step, or nil.
func (s *Store) failpoint(step string) error {
	if s.hook == nil {
		return nil
	}
	return s.hook(step)
}
