package txn

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The Postgres backend. Many nodes (processes, on one host or many) may
// write to one database at once; each holds a lease in toolgate_nodes (see
// pglease.go). A node's writes are grouped like bbolt's (see pgStore.write)
// and each group is one transaction on a pooled connection. Reads go
// through the same pool.
//
// Schema (version 3), all keys bytea so that they sort bytewise as bbolt's:
//
//   - toolgate_meta: key -> value; "schema" is the schema version.
//   - toolgate_executions: id -> executing (a claim), data (the record in
//     the binary form of encode.go), node (the node holding the claim).
//   - toolgate_state: (namespace, key) -> value.
//   - toolgate_audit: seq of a group's first entry -> the group (the JSON
//     array of its AuditEntry values, byte for byte as bbolt stores it),
//     and the span of its events' timestamps (min_ts, max_ts; indexed).
//   - toolgate_audit_head: one row (id 1): the last seq and its hash. Every
//     write transaction locks it first, which serializes writes and audit
//     appends across connections and nodes: every check a write makes
//     (a free execution id, an intent not yet executed, an idempotency key
//     not yet held) sees every write committed before it.
//   - toolgate_nodes: node -> instance (one run of it), holder (host and
//     pid), expires (its lease, by the database's clock), grp (the number
//     of its last group transaction: how a commit whose answer was lost is
//     found to have happened or not).

// pgSchemaVersion is the newest schema this build knows.
const pgSchemaVersion = 3

// pgWriterLock is the advisory lock key a writer of schema version 1 held
// ("toolgate"); the upgrade to version 2 takes it, so it never runs under
// an older toolgate still writing.
const pgWriterLock int64 = 0x746f6f6c67617465

// pgWriteTimeout bounds one group's transaction: a database that does not
// answer fails the writes rather than hanging them.
const pgWriteTimeout = 30 * time.Second

// pgMigrateLock serializes schema creation and migration ("toolgatm").
const pgMigrateLock int64 = 0x746f6f6c6761746d

// pgSchemaSteps[v] upgrades a schema of version v to v+1.
var pgSchemaSteps = [][]string{
	{
		`CREATE TABLE toolgate_executions (
		id bytea PRIMARY KEY,
		executing boolean NOT NULL,
		data bytea NOT NULL)`,
		`CREATE INDEX toolgate_executions_claims ON toolgate_executions (id) WHERE executing`,
		`CREATE TABLE toolgate_state (
		namespace bytea NOT NULL,
		key bytea NOT NULL,
		value bytea NOT NULL,
		PRIMARY KEY (namespace, key))`,
		`CREATE TABLE toolgate_audit (
		seq bigint PRIMARY KEY CHECK (seq > 0),
		entries bytea NOT NULL)`,
		`CREATE TABLE toolgate_audit_head (
		id int PRIMARY KEY CHECK (id = 1),
		seq bigint NOT NULL,
		hash bytea NOT NULL CHECK (length(hash) = 32))`,
		`INSERT INTO toolgate_audit_head (id, seq, hash) VALUES (1, 0, '\x0000000000000000000000000000000000000000000000000000000000000000')`,
	},
	{
		`ALTER TABLE toolgate_executions ADD COLUMN node text`,
		`CREATE TABLE toolgate_nodes (
		node text PRIMARY KEY,
		instance text NOT NULL,
		holder text NOT NULL,
		started timestamptz NOT NULL,
		expires timestamptz NOT NULL,
		grp bigint NOT NULL DEFAULT 0)`,
	},
	{
		// The span of the events' timestamps in each group, for searches
		// by time through an index (AuditSearch); groups stored before
		// get the widest span: always searched.
		`ALTER TABLE toolgate_audit
		ADD COLUMN min_ts bigint NOT NULL DEFAULT -4611686018427387904,
		ADD COLUMN max_ts bigint NOT NULL DEFAULT 4611686018427387904`,
		`CREATE INDEX toolgate_audit_time ON toolgate_audit USING gist (int8range(min_ts, max_ts, '[]'))`,
	},
}

// IsPostgresURL reports whether path, as given to [Open], names a Postgres
// database (a postgres:// or postgresql:// URL) rather than a file.
func IsPostgresURL(path string) bool { return isPostgresURL(path) }

// ShownPath returns path as messages may show it: a Postgres URL with its
// password hidden, a file path as it is.
func ShownPath(path string) string {
	if isPostgresURL(path) {
		return redactURL(path)
	}
	return path
}

func isPostgresURL(path string) bool {
	return strings.HasPrefix(path, "postgres://") || strings.HasPrefix(path, "postgresql://")
}

// redactURL returns the URL with its password hidden, for messages.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "postgres://(unparsable URL)"
	}
	return u.Redacted()
}

type pgStore struct {
	s    *Store
	pool *pgxpool.Pool

	// The group committer's queue, guarded by s.wmu (as the bbolt one).
	queue   []*pgReq
	leading bool
	grp     int64 // the number of the last group transaction; only the leader touches it

	lease *pgLease // nil when read-only
}

// pgReq is one write waiting for the group committer: check may only
// read; apply writes and returns the audit events to append.
type pgReq struct {
	check func(*pgTx) error
	apply func(*pgTx) error
	evs   []auditEvent
	claim bool // needs this node's lease (it stores a claim)
	done  chan error
	err   error
}

// pgTx is the transaction of a group of writes.
type pgTx struct {
	ctx context.Context
	tx  *pgx.Conn    // in the transaction (BEGIN sent with the head lock, COMMIT with the audit append)
	evs []auditEvent // events an apply adds to its request's (Recover's)
}

// errPGAbort marks a database error inside a request: the transaction is
// aborted, and the group is redone without the request.
type errPGAbort struct{ err error }

func (e *errPGAbort) Error() string { return e.err.Error() }
func (e *errPGAbort) Unwrap() error { return e.err }

func openPostgres(raw string, opts *Options) (*Store, error) {
	shown := redactURL(raw)
	cfg, err := pgxpool.ParseConfig(raw)
	if err != nil {
		return nil, fmt.Errorf("txn: database URL %s: %v", shown, pgMessage(err))
	}
	timeout := opts.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = 10 * time.Second
	}
	if opts.NoSync {
		cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.ConnConfig.ConnectTimeout+timeout)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("txn: connect to %s: %v", shown, pgMessage(err))
	}
	s := &Store{path: shown, readOnly: opts.ReadOnly}
	p := &pgStore{s: s, pool: pool}
	s.be = p
	fail := func(err error) (*Store, error) {
		p.close()
		return nil, err
	}
	if opts.ReadOnly {
		if err := p.checkSchema(ctx, shown); err != nil {
			return fail(err)
		}
		return s, nil
	}
	if err := p.migrate(ctx, shown); err != nil {
		return fail(err)
	}
	l, err := newLease(opts)
	if err != nil {
		return fail(err)
	}
	p.lease = l
	if err := p.acquire(ctx, timeout); err != nil {
		p.lease = nil
		return fail(err)
	}
	go p.keepLease()
	return s, nil
}

// pgMessage is a Postgres error in the user's terms.
func pgMessage(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Message
	}
	return err.Error()
}

// schemaVersion reads the schema version: 0 when there is no schema.
func schemaVersion(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (int64, error) {
	var exists bool
	if err := q.QueryRow(ctx, `SELECT to_regclass('toolgate_meta') IS NOT NULL`).Scan(&exists); err != nil {
		return 0, err
	}
	if !exists {
		return 0, nil
	}
	var v int64
	err := q.QueryRow(ctx, `SELECT value FROM toolgate_meta WHERE key = 'schema'`).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	return v, err
}

func newerSchema(shown string, v int64) error {
	return fmt.Errorf("%w: %s: the toolgate schema in this database is version %d, newer than this build's %d: upgrade toolgate", ErrIncompatible, shown, v, pgSchemaVersion)
}

func (p *pgStore) checkSchema(ctx context.Context, shown string) error {
	v, err := schemaVersion(ctx, p.pool)
	switch {
	case err != nil:
		return fmt.Errorf("txn: %s: read the schema version: %v", shown, pgMessage(err))
	case v == 0:
		return &noSchemaError{shown}
	case v > pgSchemaVersion:
		return newerSchema(shown, v)
	case v < pgSchemaVersion:
		return fmt.Errorf("%w: %s: schema version %d, older than this build's %d: the first write (toolgate run, serve) upgrades it; read-only inspection does not", ErrIncompatible, shown, v, pgSchemaVersion)
	}
	return nil
}

// migrate creates the schema or upgrades it to pgSchemaVersion, in one
// transaction, under a lock that keeps concurrent openers out.
func (p *pgStore) migrate(ctx context.Context, shown string) error {
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, pgMigrateLock); err != nil {
			return err
		}
		v, err := schemaVersion(ctx, tx)
		if err != nil {
			return err
		}
		switch {
		case v > pgSchemaVersion:
			return newerSchema(shown, v)
		case v == pgSchemaVersion:
			return nil
		case v > 0:
			// Version 1 had one writer, holding pgWriterLock for its
			// whole run: it must not be running while the schema changes
			// under it.
			var free bool
			if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock($1)`, pgWriterLock).Scan(&free); err != nil {
				return err
			}
			if !free {
				return fmt.Errorf("%w: %s: an older toolgate (schema version %d) writes to this database: stop it before this version upgrades the schema", ErrLocked, shown, v)
			}
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS toolgate_meta (key text PRIMARY KEY, value bigint NOT NULL)`); err != nil {
			return err
		}
		for _, step := range pgSchemaSteps[v:] {
			for _, stmt := range step {
				if _, err := tx.Exec(ctx, stmt); err != nil {
					return err
				}
			}
		}
		_, err = tx.Exec(ctx, `INSERT INTO toolgate_meta (key, value) VALUES ('schema', $1)
			ON CONFLICT (key) DO UPDATE SET value = excluded.value`, int64(pgSchemaVersion))
		return err
	})
	if err != nil {
		if errors.Is(err, ErrIncompatible) || errors.Is(err, ErrLocked) {
			return err
		}
		return fmt.Errorf("txn: %s: create or migrate the schema: %v", shown, pgMessage(err))
	}
	return nil
}

func (p *pgStore) close() error {
	if p.lease != nil {
		p.release()
	}
	p.pool.Close()
	return nil
}

// write queues a request and returns its outcome, nil once the transaction
// holding it has committed. Like the bbolt writer: a writer that finds no
// group in progress commits at once; those that arrive meanwhile are
// committed together by the next one, in one transaction.
func (p *pgStore) write(ctx context.Context, check, apply func(*pgTx) error, evs []auditEvent) error {
	return p.writeReq(ctx, &pgReq{check: check, apply: apply, evs: evs})
}

func (p *pgStore) writeReq(ctx context.Context, r *pgReq) error {
	s := p.s
	if err := s.ready(ctx); err != nil {
		return err
	}
	if s.readOnly {
		return ErrReadOnly
	}
	r.done = make(chan error, 1)
	s.wmu.Lock()
	if s.closed.Load() {
		s.wmu.Unlock()
		return ErrClosed
	}
	s.writers.Add(1)
	defer s.writers.Done()
	p.queue = append(p.queue, r)
	if p.leading {
		s.wmu.Unlock()
		if err := <-r.done; err != errLead {
			return err
		}
		s.wmu.Lock()
	}
	p.leading = true
	n := min(len(p.queue), maxBatch)
	batch := p.queue[:n:n]
	p.queue = p.queue[n:]
	s.wmu.Unlock()

	p.commitGroup(batch)

	s.wmu.Lock()
	if len(p.queue) > 0 {
		p.queue[0].done <- errLead
	} else {
		p.leading = false
		p.queue = nil
	}
	s.wmu.Unlock()
	for _, q := range batch {
		if q != r {
			q.done <- q.err
		}
	}
	return r.err
}

// pgRetries is how many times a group is tried again on a fresh connection
// when its connection was found lost before the commit was sent (nothing of
// it was written then): a Postgres restart costs the first write after it
// nothing.
const pgRetries = 2

// commitGroup runs a group of requests in one transaction and sets each
// one's err.
func (p *pgStore) commitGroup(batch []*pgReq) {
	s := p.s
	todo := slices.Clone(batch)
	retries := 0
	for len(todo) > 0 {
		s.batches.Add(1)
		failed, err := p.runGroup(todo)
		var lost *errConnLost
		switch {
		case failed >= 0:
			todo[failed].err = err
			todo = slices.Delete(todo, failed, failed+1)
		case errors.As(err, &lost) && retries < pgRetries:
			retries++
			time.Sleep(time.Duration(retries) * 50 * time.Millisecond)
		case err != nil:
			for _, r := range todo {
				r.err = err
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

// ErrUnavailable reports that Postgres could not be reached, or did not
// answer in time: the write it failed wrote nothing (or, said in the
// message, its outcome could not be learned), and the store goes on once
// Postgres is back.
var ErrUnavailable = errors.New("txn: database unavailable")

// unavailable is a group's error when Postgres failed it before its commit.
func (p *pgStore) unavailable(what string, err error) error {
	return fmt.Errorf("%w: %s: %s: %v; nothing was written", ErrUnavailable, p.s.path, what, pgMessage(err))
}

// runGroup runs todo in one transaction. It returns the index of a request
// that failed in a way that aborted the transaction (it must be taken out
// and the rest redone), or -1 and the error of the transaction itself.
func (p *pgStore) runGroup(todo []*pgReq) (failed int, err error) {
	s := p.s
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
	if cerr := br.Close(); err == nil && cerr != nil {
		err = cerr
	}
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return -1, fmt.Errorf("%w: %s: the audit log's head is missing; it was tampered with (toolgate audit verify)", ErrCorrupt, s.path)
	case err != nil:
		return -1, lostBefore("lock the audit log's head", err)
	case len(link) != 32:
		return -1, fmt.Errorf("%w: audit head hash is %d bytes", ErrCorrupt, len(link))
	case last > seq || seq < 0:
		return -1, fmt.Errorf("%w: the audit log's head records %d entries but a group starts at entry %d; it was tampered with (toolgate audit verify)", ErrCorrupt, seq, last)
	}
	var pending []auditEvent
	for i, r := range todo {
		if r.claim && !leased {
			r.err = p.lease.lostErr()
			continue
		}
		r.err = guarded(r.check, t)
		var (
			abort *errPGAbort
			p     *panicError
		)
		if errors.As(r.err, &abort) || errors.As(r.err, &p) {
			if conn.Conn().IsClosed() {
				return -1, lostBefore("write", r.err)
			}
			return i, r.err // the transaction may be mid-statement: redo without it
		}
		if r.err != nil {
			continue
		}
		t.evs = nil
		if err := guarded(r.apply, t); err != nil {
			if conn.Conn().IsClosed() {
				return -1, lostBefore("write", err)
			}
			return i, err
		}
		pending = append(pending, r.evs...)
		pending = append(pending, t.evs...)
	}
	// The audit append and the commit: one round trip.
	b = &pgx.Batch{}
	if len(pending) > 0 {
		if err := s.failpoint(StepAudit); err != nil {
			return -1, err
		}
		group, last, lastLink := auditGroup(uint64(seq), [32]byte(link), pending)
		lo, hi := tsSpan(timestamps(group))
		b.Queue(`INSERT INTO toolgate_audit (seq, entries, min_ts, max_ts) VALUES ($1, $2, $3, $4)`, int64(seq+1), group, lo, hi)
		b.Queue(`UPDATE toolgate_audit_head SET seq = $1, hash = $2 WHERE id = 1`, int64(last), lastLink[:])
	}
	if err := s.failpoint(StepCommit); err != nil {
		return -1, err
	}
	b.Queue(`COMMIT`)
	br = tx.SendBatch(ctx, b)
	var berr error
	for range b.Len() {
		if _, err := br.Exec(); err != nil {
			berr = err
			break
		}
	}
	if err := br.Close(); berr == nil {
		berr = err
	}
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
	return -1, fmt.Errorf("txn: %s: append audit events from %d and commit: %v; nothing was written", s.path, seq+1, pgMessage(berr))
}

// pgResolveWindow is how long a group whose commit went unanswered waits
// for Postgres to say whether it happened.
const pgResolveWindow = 10 * time.Second

// resolve learns whether the group grp, whose commit got no answer (the
// connection lost, no answer in time), was committed: nil if it was (its
// writes stand, their errors as set), else an error saying it was not, or
// that its outcome could not be learned.
func (p *pgStore) resolve(grp int64, cause error) error {
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
			return fmt.Errorf("%w: %s: the connection was lost during the commit (%v), which did not happen: nothing was written", ErrUnavailable, p.s.path, pgMessage(cause))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: %s: the connection was lost during the commit (%v), and Postgres did not answer within %v to say whether it happened: %w",
				ErrUnavailable, p.s.path, pgMessage(cause), pgResolveWindow, errCommitUnknown)
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

// auditGroup encodes events as the group bbolt stores (appendAuditGroup).
func auditGroup(seq uint64, link [32]byte, events []auditEvent) ([]byte, uint64, [32]byte) {
	return appendAuditGroup(make([]byte, 0, auditGroupSize(events)), seq, link, events)
}

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

// get and scan make a pgTx the stateReader of a StateView.
func (t *pgTx) get(namespace, key string) ([]byte, bool, error) {
	return pgStateValue(t.ctx, t.tx, namespace, key)
}

func (t *pgTx) scan(namespace, prefix string, n int) ([]Entry, error) {
	return pgStateScan(t.ctx, t.tx, namespace, prefix, n)
}

type pgQuerier interface {
	QueryRow(context.Context, string, ...any) pgx.Row
	Query(context.Context, string, ...any) (pgx.Rows, error)
}

func pgStateValue(ctx context.Context, q pgQuerier, namespace, key string) ([]byte, bool, error) {
	var v []byte
	err := q.QueryRow(ctx, `SELECT value FROM toolgate_state WHERE namespace = $1 AND key = $2`, []byte(namespace), []byte(key)).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, dbErr("read state", err)
	}
	if v == nil {
		v = []byte{}
	}
	return v, true, nil
}

// prefixEnd returns the least key greater than every key starting with
// prefix, or nil if there is none.
func prefixEnd(prefix string) []byte {
	end := []byte(prefix)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// pgStateScan returns the entries under prefix in key order, at most n
// (n <= 0: all).
func pgStateScan(ctx context.Context, q pgQuerier, namespace, prefix string, n int) ([]Entry, error) {
	limit := int64(n)
	if n <= 0 {
		limit = -1
	}
	rows, err := q.Query(ctx, `SELECT key, value FROM toolgate_state
		WHERE namespace = $1 AND key >= $2 AND ($3::bytea IS NULL OR key < $3)
		ORDER BY key LIMIT CASE WHEN $4 < 0 THEN NULL ELSE $4 END`,
		[]byte(namespace), []byte(prefix), prefixEnd(prefix), limit)
	if err != nil {
		return nil, dbErr("scan state", err)
	}
	return collectEntries(rows)
}

func collectEntries(rows pgx.Rows) ([]Entry, error) {
	defer rows.Close()
	var out []Entry
	for rows.Next() {
		var k, v []byte
		if err := rows.Scan(&k, &v); err != nil {
			return nil, dbErr("read state", err)
		}
		if v == nil {
			v = []byte{}
		}
		out = append(out, Entry{Key: string(k), Value: v})
	}
	if err := rows.Err(); err != nil {
		return nil, dbErr("read state", err)
	}
	return out, nil
}

// applyWrites applies a buffered write-set.
func (t *pgTx) applyWrites(writes map[string]map[string]op, failpoint func(string) error) error {
	for ns, ops := range writes {
		for key, o := range ops {
			if o.deleted {
				if err := t.exec("delete state", `DELETE FROM toolgate_state WHERE namespace = $1 AND key = $2`, []byte(ns), []byte(key)); err != nil {
					return err
				}
				continue
			}
			value := o.value
			if value == nil {
				value = []byte{}
			}
			if err := t.exec("put state", `INSERT INTO toolgate_state (namespace, key, value) VALUES ($1, $2, $3)
				ON CONFLICT (namespace, key) DO UPDATE SET value = excluded.value`, []byte(ns), []byte(key), value); err != nil {
				return err
			}
			if err := failpoint(StepApplyWrite); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkReads is Tx.checkReads against the transaction.
func (t *pgTx) checkReads(x *Tx) error {
	for ns, keys := range x.reads {
		for key, saw := range keys {
			now, found, err := t.get(ns, key)
			if err != nil {
				return err
			}
			if found == saw.deleted || found && !bytes.Equal(now, saw.value) {
				return fmt.Errorf("%w: %s/%s changed since this transaction read it", ErrConflict, ns, key)
			}
		}
	}
	for k, d := range x.scans {
		es, err := t.scan(k.namespace, k.prefix, 0)
		if err != nil {
			return err
		}
		if digest(es) != d {
			return fmt.Errorf("%w: keys under %s/%q changed since this transaction scanned them", ErrConflict, k.namespace, k.prefix)
		}
	}
	return nil
}

// ready checks that the store is open and healthy and ctx not done.
func (p *pgStore) ready(ctx context.Context) error { return p.s.ready(ctx) }

func (p *pgStore) put(ctx context.Context, id string, data []byte, evs []auditEvent) error {
	return p.write(ctx, func(t *pgTx) error { return nil }, func(t *pgTx) error {
		return t.insert(id, false, data, nil)
	}, evs)
}

func (p *pgStore) getRecord(ctx context.Context, id string) ([]byte, error) {
	if err := p.ready(ctx); err != nil {
		return nil, err
	}
	var data []byte
	err := p.pool.QueryRow(ctx, `SELECT data FROM toolgate_executions WHERE id = $1`, []byte(id)).Scan(&data)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, p.readErr(ctx, err)
	}
	return data, nil
}

// readErr is a read's error in the user's terms.
func (p *pgStore) readErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if p.s.closed.Load() {
		return ErrClosed
	}
	var abort *errPGAbort
	if errors.As(err, &abort) {
		return abort.err
	}
	return fmt.Errorf("txn: %s: %v", p.s.path, pgMessage(err))
}

func (p *pgStore) walk(ctx context.Context, after string, fn func(id string, data []byte) bool) error {
	return p.walkQuery(ctx, `SELECT id, data FROM toolgate_executions WHERE id > $1 ORDER BY id`, []byte(after), fn)
}

func (p *pgStore) walkBack(ctx context.Context, before string, fn func(id string, data []byte) bool) error {
	if before == "" {
		return p.walkQuery(ctx, `SELECT id, data FROM toolgate_executions ORDER BY id DESC`, nil, fn)
	}
	return p.walkQuery(ctx, `SELECT id, data FROM toolgate_executions WHERE id < $1 ORDER BY id DESC`, []byte(before), fn)
}

// walkQuery calls fn with each row (id, data) of query until it returns
// false; rows are read as they come.
func (p *pgStore) walkQuery(ctx context.Context, query string, arg []byte, fn func(id string, data []byte) bool) error {
	if err := p.ready(ctx); err != nil {
		return err
	}
	var args []any
	if arg != nil {
		args = append(args, arg)
	}
	rows, err := p.pool.Query(ctx, query, args...)
	if err != nil {
		return p.readErr(ctx, err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, data []byte
		if err := rows.Scan(&id, &data); err != nil {
			return p.readErr(ctx, err)
		}
		if !fn(string(id), data) {
			return nil
		}
	}
	if err := rows.Err(); err != nil {
		return p.readErr(ctx, err)
	}
	return nil
}

func (p *pgStore) stateValue(ctx context.Context, namespace, key string) ([]byte, bool, error) {
	if err := p.ready(ctx); err != nil {
		return nil, false, err
	}
	v, found, err := pgStateValue(ctx, p.pool, namespace, key)
	if err != nil {
		return nil, false, p.readErr(ctx, err)
	}
	return v, found, nil
}

func (p *pgStore) statePage(ctx context.Context, namespace, after string, n int) ([]Entry, error) {
	if err := p.ready(ctx); err != nil {
		return nil, err
	}
	if n <= 0 {
		return nil, nil
	}
	rows, err := p.pool.Query(ctx, `SELECT key, value FROM toolgate_state
		WHERE namespace = $1 AND key > $2 ORDER BY key LIMIT $3`, []byte(namespace), []byte(after), int64(n))
	if err != nil {
		return nil, p.readErr(ctx, err)
	}
	es, err := collectEntries(rows)
	if err != nil {
		return nil, p.readErr(ctx, err)
	}
	return es, nil
}

func (p *pgStore) stateScan(ctx context.Context, namespace, prefix string) ([]Entry, error) {
	if err := p.ready(ctx); err != nil {
		return nil, err
	}
	es, err := pgStateScan(ctx, p.pool, namespace, prefix, 0)
	if err != nil {
		return nil, p.readErr(ctx, err)
	}
	return es, nil
}

func (p *pgStore) begin(ctx context.Context, id string, data []byte, guard func(*StateView) error, evs []auditEvent) error {
	if err := p.lease.check(); err != nil {
		return err
	}
	// Live before it is stored: the sweep of this node's orphaned claims
	// (pglease.go) never takes a claim whose Tx is in use.
	p.lease.hold(id)
	var v *StateView
	err := p.writeReq(ctx, &pgReq{claim: true, check: func(t *pgTx) error {
		if guard == nil {
			v = nil
			return nil
		}
		v = &StateView{alt: t, writes: make(map[string]map[string]op)}
		return v.result(guard(v))
	}, apply: func(t *pgTx) error {
		if err := p.s.failpoint(StepClaim); err != nil {
			return err
		}
		if err := t.insert(id, true, data, p.lease.node); err != nil {
			return err
		}
		if v != nil {
			return t.applyWrites(v.writes, p.s.failpoint)
		}
		return nil
	}, evs: evs})
	if err != nil {
		p.lease.drop(id)
	}
	return err
}

func (p *pgStore) commit(ctx context.Context, x *Tx, data []byte, evs []auditEvent) error {
	s := p.s
	err := p.write(ctx, func(t *pgTx) error {
		if err := s.failpoint(StepCheckReads); err != nil {
			return err
		}
		return t.checkReads(x)
	}, func(t *pgTx) error {
		if err := t.applyWrites(x.writes, s.failpoint); err != nil {
			return err
		}
		if err := s.failpoint(StepRecord); err != nil {
			return err
		}
		if err := t.finishClaim(x.id, data); err != nil {
			return p.lease.claimGone(err)
		}
		return nil
	}, evs)
	if err == nil || errors.Is(err, ErrNotFound) {
		p.lease.drop(x.id)
	}
	return err
}

func (p *pgStore) rollback(ctx context.Context, id string, data []byte, evs []auditEvent) error {
	// The last a Tx does with its claim: if this fails, the claim is an
	// orphan, which the sweep finishes once Postgres answers.
	defer p.lease.drop(id)
	return p.write(ctx, func(t *pgTx) error { return nil }, func(t *pgTx) error {
		if err := t.finishClaim(id, data); err != nil {
			return p.lease.claimGone(err)
		}
		return nil
	}, evs)
}

func (p *pgStore) updateState(ctx context.Context, fn func(*StateView) error, evs []auditEvent) error {
	var v *StateView
	return p.write(ctx, func(t *pgTx) error {
		v = &StateView{alt: t, writes: make(map[string]map[string]op)}
		return v.result(fn(v))
	}, func(t *pgTx) error {
		return t.applyWrites(v.writes, p.s.failpoint)
	}, evs)
}

// recover finishes this node's claims (its previous run's: nothing of this
// run is live yet when the runtime calls it), and those of nodes whose
// lease has expired or that are gone; finish is kept for the background
// sweep that does the same for nodes that die later.
func (p *pgStore) recover(ctx context.Context, finish func(*Record) ([]AuditEvent, error)) ([]*Record, error) {
	p.lease.setFinish(finish)
	return p.sweep(ctx, finish, false)
}

// sweep finishes, with finish, in one transaction: the claims of nodes
// whose lease expired (their rows deleted in the same transaction, so that
// a late renewal finds its claims gone rather than reviving them), of
// nodes that are gone, and this node's own (all of them, or with
// orphansOnly those no Tx of this run holds).
func (p *pgStore) sweep(ctx context.Context, finish func(*Record) ([]AuditEvent, error), orphansOnly bool) ([]*Record, error) {
	var done []*Record
	err := p.write(ctx, func(*pgTx) error { return nil }, func(t *pgTx) error {
		done = done[:0]
		if err := t.exec("end expired leases", `DELETE FROM toolgate_nodes
			WHERE expires < clock_timestamp() AND NOT (node = $1 AND instance = $2)`, p.lease.node, p.lease.run()); err != nil {
			return err
		}
		live := [][]byte{}
		if orphansOnly {
			live = p.lease.live()
		}
		rows, err := t.tx.Query(t.ctx, `SELECT id, data FROM toolgate_executions e WHERE executing
			AND (node IS NULL
				OR (node = $1 AND NOT (id = ANY($2::bytea[])))
				OR NOT EXISTS (SELECT 1 FROM toolgate_nodes n WHERE n.node = e.node))
			ORDER BY id`, p.lease.node, live)
		if err != nil {
			return dbErr("read claims", err)
		}
		type claim struct{ id, data []byte }
		var found []claim
		for rows.Next() {
			var c claim
			if err := rows.Scan(&c.id, &c.data); err != nil {
				rows.Close()
				return dbErr("read claims", err)
			}
			found = append(found, c)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return dbErr("read claims", err)
		}
		for _, c := range found {
			id := string(c.id)
			rec, err := decodeRecord(id, c.data)
			if err != nil {
				return err
			}
			if rec.State != "EXECUTING" {
				return fmt.Errorf("%w: the claim of execution %q is in state %s, not EXECUTING: it was changed outside toolgate", ErrCorrupt, id, rec.State)
			}
			events, err := finish(rec)
			if err != nil {
				return fmt.Errorf("txn: recover execution %q: %w", id, err)
			}
			if rec.ExecutionID != id {
				return fmt.Errorf("%w: recovery changed execution id %q to %q", ErrInvalidRecord, id, rec.ExecutionID)
			}
			out, err := encodeRecord(rec)
			if err != nil {
				return err
			}
			if err := t.finish(id, out); err != nil {
				return err
			}
			evs, err := prepareAudit(events)
			if err != nil {
				return err
			}
			t.evs = append(t.evs, evs...)
			done = append(done, rec)
		}
		return nil
	}, nil)
	if err != nil {
		return nil, err
	}
	return done, nil
}

func (p *pgStore) auditRaw(ctx context.Context, fn func(key, value []byte) error) error {
	if err := p.ready(ctx); err != nil {
		return err
	}
	// One statement: one snapshot of the groups and the head.
	rows, err := p.pool.Query(ctx, `SELECT k, v FROM (
			SELECT 0 AS o, int8send(seq) AS k, entries AS v FROM toolgate_audit
			UNION ALL
			SELECT 1, '\xff'::bytea, int8send(seq) || hash FROM toolgate_audit_head WHERE seq > 0
		) AS log ORDER BY o, k`)
	if err != nil {
		return p.readErr(ctx, err)
	}
	defer rows.Close()
	for n := 1; rows.Next(); n++ {
		if n%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		var k, v []byte
		if err := rows.Scan(&k, &v); err != nil {
			return p.readErr(ctx, err)
		}
		if err := fn(k, v); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return p.readErr(ctx, err)
	}
	return nil
}

func (p *pgStore) auditHead(ctx context.Context) (uint64, error) {
	if err := p.ready(ctx); err != nil {
		return 0, err
	}
	var seq int64
	err := p.pool.QueryRow(ctx, `SELECT seq FROM toolgate_audit_head WHERE id = 1`).Scan(&seq)
	if err != nil {
		return 0, p.readErr(ctx, err)
	}
	return uint64(seq), nil
}

func (p *pgStore) auditGroups(ctx context.Context, from uint64, needle []byte, fn func(seq uint64, group []byte) (bool, error)) error {
	if err := p.ready(ctx); err != nil {
		return err
	}
	rows, err := p.pool.Query(ctx, `SELECT seq, entries FROM toolgate_audit
		WHERE seq >= coalesce((SELECT max(seq) FROM toolgate_audit WHERE seq <= $1), 0)
		AND ($2::bytea IS NULL OR position($2::bytea IN entries) > 0)
		ORDER BY seq`, int64(min(from, 1<<63-1)), needle)
	if err != nil {
		return p.readErr(ctx, err)
	}
	defer rows.Close()
	for rows.Next() {
		var seq int64
		var group []byte
		if err := rows.Scan(&seq, &group); err != nil {
			return p.readErr(ctx, err)
		}
		more, err := fn(uint64(seq), group)
		if err != nil || !more {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return p.readErr(ctx, err)
	}
	return nil
}

// search calls fn with every entry of the groups holding needle whose
// events' timestamps meet [from, to] (by the time index), in seq order,
// until fn returns true; q is the pool, or a read transaction.
func (p *pgStore) search(ctx context.Context, q pgQuerier, needle string, from, to int64, fn func(AuditEntry) bool) error {
	rows, err := q.Query(ctx, `SELECT seq, entries FROM toolgate_audit
		WHERE int8range(min_ts, max_ts, '[]') && int8range($1, $2, '[]')
		AND position($3::bytea IN entries) > 0
		ORDER BY seq`, clampTS(from), clampTS(max(to, from)), []byte(needle))
	if err != nil {
		return p.readErr(ctx, err)
	}
	defer rows.Close()
	for rows.Next() {
		var seq int64
		var v []byte
		if err := rows.Scan(&seq, &v); err != nil {
			return p.readErr(ctx, err)
		}
		var group []AuditEntry
		if err := json.Unmarshal(v, &group); err != nil {
			return fmt.Errorf("%w: audit entries at %d: %v", ErrCorrupt, seq, err)
		}
		for _, e := range group {
			if fn(e) {
				return nil
			}
		}
	}
	if err := rows.Err(); err != nil {
		return p.readErr(ctx, err)
	}
	return nil
}

// getWithAudit is GetWithAudit in one read-only REPEATABLE READ
// transaction: the record and its events of one snapshot.
func (p *pgStore) getWithAudit(ctx context.Context, id string, window func(*Record) (string, int64, int64), fn func(AuditEntry) bool) (*Record, error) {
	if err := p.ready(ctx); err != nil {
		return nil, err
	}
	tx, err := p.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, p.readErr(ctx, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	var data []byte
	err = tx.QueryRow(ctx, `SELECT data FROM toolgate_executions WHERE id = $1`, []byte(id)).Scan(&data)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: execution %q", ErrNotFound, id)
	}
	if err != nil {
		return nil, p.readErr(ctx, err)
	}
	rec, err := decodeRecord(id, data)
	if err != nil {
		return nil, err
	}
	needle, from, to := window(rec)
	if needle == "" {
		return nil, fmt.Errorf("%w: empty audit search", ErrInvalidRecord)
	}
	return rec, p.search(ctx, tx, needle, from, to, fn)
}

// clampTS keeps a timestamp (Unix ms) within ±2^62, so that an inclusive
// int8range over it never overflows; real timestamps are far inside.
func clampTS(ts int64) int64 { return min(max(ts, -1<<62), 1<<62) }

func tsSpan(lo, hi int64) (int64, int64) { return clampTS(lo), clampTS(hi) }
