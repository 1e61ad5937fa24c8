package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/toolgate/toolgate/txn/driver"
)

// The group commit: each group of writes one transaction, which locks the
// audit head first and appends the group's audit events last.

// pgWriteTimeout bounds one group's transaction: a database that does not
// answer fails the writes rather than hanging them.
const pgWriteTimeout = 30 * time.Second

// pgReq is what one write asks of a group's transaction: check may only
// read; apply writes; evs are the audit events to append.
type pgReq struct {
	check func(*pgTx) error
	apply func(*pgTx) error
	evs   []driver.Event
	claim bool // needs this node's lease (it stores a claim)
}

type request = driver.Request[pgReq]

// pgTx is the transaction of a group of writes.
type pgTx struct {
	ctx context.Context
	tx  *pgx.Conn      // in the transaction (BEGIN sent with the head lock, COMMIT with the audit append)
	evs []driver.Event // events an apply adds to its request's (Recover's)
}

// errPGAbort marks a database error inside a request: the transaction is
// aborted, and the group is redone without the request.
type errPGAbort struct{ err error }

func (e *errPGAbort) Error() string { return e.err.Error() }
func (e *errPGAbort) Unwrap() error { return e.err }

// write queues a request for the group committer and returns its outcome,
// nil once the transaction holding it has committed.
func (p *Store) write(ctx context.Context, check, apply func(*pgTx) error, evs []driver.Event) error {
	return p.writeReq(ctx, pgReq{check: check, apply: apply, evs: evs})
}

func (p *Store) writeReq(ctx context.Context, r pgReq) error {
	if err := p.ready(ctx); err != nil {
		return err
	}
	if p.readOnly {
		return ErrReadOnly
	}
	return p.w.Write(&request{R: r})
}

// pgRetries is how many times a group is tried again on a fresh connection
// when its connection was found lost before the commit was sent (nothing of
// it was written then): a Postgres restart costs the first write after it
// nothing.
const pgRetries = 2

// commitGroup runs a group of requests in one transaction and sets each
// one's err.
func (p *Store) commitGroup(batch []*request) {
	todo := slices.Clone(batch)
	retries := 0
	for len(todo) > 0 {
		p.batches.Add(1)
		failed, err := p.runGroup(todo)
		var lost *errConnLost
		switch {
		case failed >= 0:
			todo[failed].Err = err
			todo = slices.Delete(todo, failed, failed+1)
		case errors.As(err, &lost) && retries < pgRetries:
			retries++
			time.Sleep(time.Duration(retries) * 50 * time.Millisecond)
		case err != nil:
			for _, r := range todo {
				r.Err = err
			}
			return
		default:
			return
		}
	}
}

// errConnLost is a group that failed because its connection was lost
// before the commit was sent: nothing of it was written.
type errConnLost struct{ err error }

func (e *errConnLost) Error() string { return e.err.Error() }
func (e *errConnLost) Unwrap() error { return e.err }

// unavailable is a group's error when Postgres failed it before its commit.
func (p *Store) unavailable(what string, err error) error {
	return fmt.Errorf("%w: %s: %s: %v; nothing was written", ErrUnavailable, p.path, what, pgMessage(err))
}

// runGroup runs todo in one transaction. It returns the index of a request
// that failed in a way that aborted the transaction (it must be taken out
// and the rest redone), or -1 and the error of the transaction itself.
func (p *Store) runGroup(todo []*request) (failed int, err error) {
	// Not the callers' contexts: a queued write completes, so its outcome
	// is never unknown to its caller.
	ctx, cancel := context.WithTimeout(context.Background(), pgWriteTimeout)
	defer cancel()
	conn, err := p.pool.Acquire(ctx)
	if err != nil {
		return -1, p.unavailable("connect", err)
	}
	defer conn.Release()
	// A connection lost before the commit: nothing was written; the group
	// may be tried again on another.
	lostBefore := func(what string, err error) error {
		uerr := p.unavailable(what, err)
		if conn.Conn().IsClosed() || ctx.Err() != nil {
			if ctx.Err() != nil {
				uerr = fmt.Errorf("%w (no answer from Postgres within %v)", uerr, pgWriteTimeout)
			}
			return &errConnLost{uerr}
		}
		return uerr
	}
	// BEGIN goes in the first round trip, COMMIT in the last: the
	// transaction is run by hand on the connection.
	tx := conn.Conn()
	committed := false
	defer func() {
		if !committed && !tx.IsClosed() {
			// A connection still in a transaction is not reused by the
			// pool (pgxpool closes it on release) if this fails too.
			rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, _ = tx.Exec(rctx, "ROLLBACK")
			cancel()
		}
	}()
	t := &pgTx{ctx: ctx, tx: tx}
	var (
		seq, last int64
		link      []byte
		leased    bool
	)
	p.grp++
	grp := p.grp
	// The head row lock: every write transaction takes it first. With it,
	// the start of the last stored group: the next group must go after it,
	// or a head set back would make the store write over entries (as
	// checkAuditTail for bbolt). Then this node's row: whether its lease
	// holds (by the database's clock), and the group's number, by which a
	// commit whose answer is lost is found to have happened or not. One
	// round trip for both.
	b := &pgx.Batch{}
	b.Queue(`BEGIN`)
	b.Queue(`SELECT seq, hash, coalesce((SELECT max(seq) FROM toolgate_audit), 0)
		FROM toolgate_audit_head WHERE id = 1 FOR UPDATE`)
	b.Queue(`UPDATE toolgate_nodes SET grp = $3 WHERE node = $1 AND instance = $2
		RETURNING expires > clock_timestamp()`, p.lease.node, p.lease.run(), grp)
	br := tx.SendBatch(ctx, b)
	_, err = br.Exec()
	if err == nil {
		err = br.QueryRow().Scan(&seq, &link, &last)
	}
	if err == nil {
		if lerr := br.QueryRow().Scan(&leased); lerr != nil && !errors.Is(lerr, pgx.ErrNoRows) {
			err = lerr
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return -1, fmt.Errorf("%w: %s: the audit log's head is missing; it was tampered with (toolgate audit verify)", ErrCorrupt, p.path)
	case err != nil:
		return -1, lostBefore("lock the audit log's head", err)
	case len(link) != 32:
		return -1, fmt.Errorf("%w: audit head hash is %d bytes", ErrCorrupt, len(link))
	case seq < 0:
		return -1, fmt.Errorf("%w: the audit log's head records %d entries but a group starts at entry %d; it was tampered with (toolgate audit verify)", ErrCorrupt, seq, last)
	}
	if err := driver.CheckAuditTail(true, uint64(seq), uint64(last)); err != nil {
		return -1, err
	}
	var pending []driver.Event
	for i, r := range todo {
		if r.R.claim && !leased {
			r.Err = p.lease.lostErr()
			continue
		}
		r.Err = guarded(r.R.check, t)
		var (
			abort *errPGAbort
			p     *panicError
		)
		if errors.As(r.Err, &abort) || errors.As(r.Err, &p) {
			if conn.Conn().IsClosed() {
				return -1, lostBefore("write", r.Err)
			}
			return i, r.Err // the transaction may be mid-statement: redo without it
		}
		if r.Err != nil {
			continue
		}
		t.evs = nil
		if err := guarded(r.R.apply, t); err != nil {
			if conn.Conn().IsClosed() {
				return -1, lostBefore("write", err)
			}
			return i, err
		}
		pending = append(pending, r.R.evs...)
		pending = append(pending, t.evs...)
	}
	// The audit append and the commit: one round trip.
	b = &pgx.Batch{}
	if len(pending) > 0 {
		if err := p.failpoint(driver.StepAudit); err != nil {
			return -1, err
		}
		group, last, lastLink := auditGroup(uint64(seq), [32]byte(link), pending)
		lo, hi := tsSpan(driver.Timestamps(group))
		b.Queue(`INSERT INTO toolgate_audit (seq, entries, min_ts, max_ts) VALUES ($1, $2, $3, $4)`, int64(seq+1), group, lo, hi)
		b.Queue(`UPDATE toolgate_audit_head SET seq = $1, hash = $2 WHERE id = 1`, int64(last), lastLink[:])
	}
	if err := p.failpoint(driver.StepCommit); err != nil {
		return -1, err
	}
	b.Queue(`COMMIT`)
	br = tx.SendBatch(ctx, b)
	berr := br.Close() // runs every statement queued, and answers the first error
	if berr == nil && tx.PgConn().TxStatus() != 'I' {
		// COMMIT of a transaction in error answers ROLLBACK, not an error.
		berr = errors.New("the transaction was rolled back")
	}
	switch {
	case berr == nil:
		committed = true
		return -1, nil
	case tx.IsClosed() || ctx.Err() != nil:
		committed = true // nothing to roll back on this connection
		return -1, p.resolve(grp, berr)
	}
	return -1, fmt.Errorf("txn: %s: append audit events from %d and commit: %v; nothing was written", p.path, seq+1, pgMessage(berr))
}

// pgResolveWindow is how long a group whose commit went unanswered waits
// for Postgres to say whether it happened.
const pgResolveWindow = 10 * time.Second

// resolve learns whether the group grp, whose commit got no answer (the
// connection lost, no answer in time), was committed: nil if it was (its
// writes stand, their errors as set), else an error saying it was not, or
// that its outcome could not be learned.
func (p *Store) resolve(grp int64, cause error) error {
	deadline := time.Now().Add(pgResolveWindow)
	for wait := 20 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		var got int64
		// FOR SHARE: a commit still under way in the server is waited for.
		err := p.pool.QueryRow(ctx, `SELECT grp FROM toolgate_nodes WHERE node = $1 AND instance = $2 FOR SHARE`,
			p.lease.node, p.lease.run()).Scan(&got)
		cancel()
		switch {
		case err == nil && got == grp:
			return nil
		case err == nil || errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("%w: %s: the connection was lost during the commit (%v), which did not happen: nothing was written", ErrUnavailable, p.path, pgMessage(cause))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: %s: the connection was lost during the commit (%v), and Postgres did not answer within %v to say whether it happened: %w",
				ErrUnavailable, p.path, pgMessage(cause), pgResolveWindow, errCommitUnknown)
		}
		time.Sleep(wait)
	}
}

var errCommitUnknown = errors.New("the outcome of the commit is unknown")

// guarded runs a request's check or apply, turning a panic (the caller's
// callback: an UpdateState function, a guard, Recover's finish) into an
// error, so that the request fails alone and the committer goes on.
func guarded(fn func(*pgTx) error, t *pgTx) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &panicError{value: v}
		}
	}()
	return fn(t)
}

// auditGroup encodes events as every backend stores a group.
func auditGroup(seq uint64, link [32]byte, events []driver.Event) ([]byte, uint64, [32]byte) {
	return driver.AppendAuditGroup(make([]byte, 0, driver.AuditGroupSize(events)), seq, link, events)
}

// panicError is a panic recovered from a request's check or apply.
type panicError struct{ value any }

func (p *panicError) Error() string { return fmt.Sprintf("txn: panic during commit: %v", p.value) }

// dbErr marks an error from a statement: it aborts the transaction.
func dbErr(what string, err error) error {
	return &errPGAbort{fmt.Errorf("txn: %s: %v", what, pgMessage(err))}
}

func (t *pgTx) exec(what, sql string, args ...any) error {
	if _, err := t.tx.Exec(t.ctx, sql, args...); err != nil {
		return dbErr(what, err)
	}
	return nil
}

// insert stores a record (a claim if executing) under a free id: the
// primary key is the check (ErrExists), saving a round trip; a taken id
// aborts the request, and its group is redone without it.
func (t *pgTx) insert(id string, executing bool, data []byte, node any) error {
	tag, err := t.tx.Exec(t.ctx, `INSERT INTO toolgate_executions (id, executing, data, node) VALUES ($1, $2, $3, $4)
		ON CONFLICT (id) DO NOTHING`, []byte(id), executing, data, node)
	if err != nil {
		return dbErr("store execution "+strconv.Quote(id), err)
	}
	if tag.RowsAffected() == 0 {
		return &errPGAbort{fmt.Errorf("%w: execution %q", ErrExists, id)}
	}
	return nil
}

// finishClaim replaces a claim by its final record; no claim (ErrNotFound)
// aborts the request, and its group is redone without it.
func (t *pgTx) finishClaim(id string, data []byte) error {
	tag, err := t.tx.Exec(t.ctx, `UPDATE toolgate_executions SET executing = false, data = $2 WHERE id = $1 AND executing`, []byte(id), data)
	if err != nil {
		return dbErr("store execution "+strconv.Quote(id), err)
	}
	if tag.RowsAffected() == 0 {
		return &errPGAbort{fmt.Errorf("%w: execution %q is not executing", ErrNotFound, id)}
	}
	return nil
}

func (t *pgTx) finish(id string, data []byte) error {
	return t.exec("store execution "+strconv.Quote(id),
		`UPDATE toolgate_executions SET executing = false, data = $2 WHERE id = $1`, []byte(id), data)
}

// Get and Scan make a pgTx the driver.StateReader of a guard or a check.
func (t *pgTx) Get(namespace, key string) ([]byte, bool, error) {
	return pgStateValue(t.ctx, t.tx, namespace, key)
}

func (t *pgTx) Scan(namespace, prefix string, n int) ([]driver.Entry, error) {
	return pgStateScan(t.ctx, t.tx, namespace, prefix, n)
}

// applyWrites applies a buffered write-set.
func (t *pgTx) applyWrites(writes driver.Writes, failpoint func(string) error) error {
	for ns, ops := range writes {
		for key, o := range ops {
			if o.Deleted {
				if err := t.exec("delete state", `DELETE FROM toolgate_state WHERE namespace = $1 AND key = $2`, []byte(ns), []byte(key)); err != nil {
					return err
				}
				continue
			}
			value := o.Value
			if value == nil {
				value = []byte{}
			}
			if err := t.exec("put state", `INSERT INTO toolgate_state (namespace, key, value) VALUES ($1, $2, $3)
				ON CONFLICT (namespace, key) DO UPDATE SET value = excluded.value`, []byte(ns), []byte(key), value); err != nil {
				return err
			}
			if err := failpoint(driver.StepApplyWrite); err != nil {
				return err
			}
		}
	}
	return nil
}
