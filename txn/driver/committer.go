package driver

import (
	"errors"
	goruntime "runtime"
	"sync"
)

// MaxGroup bounds how many writes share one group.
const MaxGroup = 512

// Committer is group commit without a timer or a dedicated goroutine,
// generic over what a request of a group writes (R: a bbolt update's
// functions, a Postgres transaction's). A writer that finds no group in
// progress becomes the leader and commits at once on its own goroutine, so
// a lone caller pays no handoff. Writers that arrive while the leader's
// group (and its sync) runs queue up; when the leader is done it wakes the
// first of them to commit all that queued, in one group. Under load, many
// writes share each sync.
//
// A backend sets Commit, the function that writes one group and sets each
// request's Err; it runs on the leader's goroutine, one group at a time,
// so what it touches needs no lock of its own.
type Committer[R any] struct {
	// Commit writes a group (at most MaxGroup requests, in queue order)
	// and sets the outcome (Err) of each.
	Commit func(group []*Request[R])
	// Yield lets the next leader run before this one answers its group:
	// under load every processor is busy, and the scheduler would
	// otherwise leave it waiting behind the writers answered, with the
	// database idle meanwhile (a local file; a remote database's round
	// trips leave processors free).
	Yield bool

	mu      sync.Mutex
	queue   []*Request[R] // writes waiting for the next group
	leading bool          // a writer is committing a group
	closed  bool
	writers sync.WaitGroup // writes in progress; Close waits for them
}

// Request is one write waiting for the committer.
type Request[R any] struct {
	R    R
	Err  error      // the outcome, set by Commit
	done chan error // the outcome, or errLead to a writer made leader
}

// errLead wakes a queued writer to take over as leader.
var errLead = errors.New("txn: lead the next group")

// Write queues r and returns its outcome once the group holding it has
// been committed. A queued write always completes, so its outcome is never
// unknown to the caller: check the caller's context before. After Close it
// returns ErrClosed.
func (c *Committer[R]) Write(r *Request[R]) error {
	r.done = make(chan error, 1)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	c.writers.Add(1)
	defer c.writers.Done()
	c.queue = append(c.queue, r)
	if c.leading {
		c.mu.Unlock()
		if err := <-r.done; err != errLead {
			return err
		}
		c.mu.Lock() // woken as the next leader; r is still queued
	}
	c.leading = true
	n := min(len(c.queue), MaxGroup)
	group := c.queue[:n:n]
	c.queue = c.queue[n:]
	c.mu.Unlock()

	c.Commit(group) // sets the outcome of every request, r included

	c.mu.Lock()
	handedOff := len(c.queue) > 0
	if handedOff {
		c.queue[0].done <- errLead
	} else {
		c.leading = false
		c.queue = nil
	}
	c.mu.Unlock()
	if handedOff && c.Yield {
		goruntime.Gosched()
	}
	for _, q := range group {
		if q != r {
			q.done <- q.Err
		}
	}
	return r.Err
}

// Close refuses new writes and waits for those queued or committing: their
// outcome is never left unknown. It reports whether this call closed it
// (false: closed before).
func (c *Committer[R]) Close() bool {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return false
	}
	c.closed = true
	c.mu.Unlock()
	c.writers.Wait()
	return true
}

// Closed reports whether Close was called.
func (c *Committer[R]) Closed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// Queued returns how many writes wait for the next group.
func (c *Committer[R]) Queued() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queue)
}
