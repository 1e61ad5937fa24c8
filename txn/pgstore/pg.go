// Package pgstore is the Postgres backend of toolgate's store: many nodes
// (processes, on one host or many) may write to one database at once; each
// holds a lease in toolgate_nodes (lease.go). It implements the contract
// of package txn/driver, with its optional leases, description and audit
// search by time; package txn opens it for a postgres:// URL (txn.Open). A
// node's writes are grouped by the contract's group committer, and each
// group is one transaction on a pooled connection (commit.go). Reads go
// through the same pool (reads.go, audit.go, search.go).
//
// Schema (version 3, schema.go), all keys bytea so that they sort bytewise
// as bbolt's:
//
//   - toolgate_meta: key -> value; "schema" is the schema version.
//   - toolgate_executions: id -> executing (a claim), data (the record, as
//     txn encodes it), node (the node holding the claim).
//   - toolgate_state: (namespace, key) -> value.
//   - toolgate_audit: seq of a group's first entry -> the group (the JSON
//     array of its entries, byte for byte as every backend stores it), and
//     the span of its events' timestamps (min_ts, max_ts; indexed).
//   - toolgate_audit_head: one row (id 1): the last seq and its hash. Every
//     write transaction locks it first, which serializes writes and audit
//     appends across connections and nodes: every check a write makes
//     (a free execution id, an intent not yet executed, an idempotency key
//     not yet held) sees every write committed before it.
//   - toolgate_nodes: node -> instance (one run of it), holder (host and
//     pid), expires (its lease, by the database's clock), grp (the number
//     of its last group transaction: how a commit whose answer was lost is
//     found to have happened or not).
package pgstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/toolgate/toolgate/txn/driver"
)

// IsURL reports whether path names a Postgres database (a postgres:// or
// postgresql:// URL) rather than a file.
func IsURL(path string) bool {
	return strings.HasPrefix(path, "postgres://") || strings.HasPrefix(path, "postgresql://")
}

// Redact returns the URL with its password hidden, for messages.
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "postgres://(unparsable URL)"
	}
	return u.Redacted()
}

// Store is a Postgres database behind the store contract, as one node of
// those sharing it (or a reader). It is safe for concurrent use.
type Store struct {
	path      string // the URL, its password hidden
	readOnly  bool
	pool      *pgxpool.Pool
	closed    atomic.Bool
	failpoint func(step string) error
	batches   atomic.Int64 // group transactions run

	w   driver.Committer[pgReq]
	grp int64 // the number of the last group transaction; only the leader touches it

	lease *pgLease // nil when read-only
}

var (
	_ driver.Backend       = (*Store)(nil)
	_ driver.Leaser        = (*Store)(nil)
	_ driver.Describer     = (*Store)(nil)
	_ driver.AuditSearcher = (*Store)(nil)
)

// Options configure Open.
type Options struct {
	// Timeout is how long Open waits for a lease that another run of the
	// same node name holds. Zero means DefaultTimeout.
	Timeout time.Duration
	// NoSync sets synchronous_commit off: tests and benchmarks only.
	NoSync bool
	// ReadOnly opens an existing schema for inspection: no lease.
	ReadOnly bool
	// Node, Lease and Logger are txn.Options' (see there); Open refuses
	// a Lease that CheckLease refuses, as txn.Open does.
	Node   string
	Lease  time.Duration
	Logger *slog.Logger
	// Failpoint, when set (tests), is called at each commit step (the
	// driver.Step constants); an error it returns is injected there.
	Failpoint func(step string) error
}

// DefaultTimeout is how long Open waits when Options.Timeout is zero.
const DefaultTimeout = time.Second

// Open connects to the Postgres database at the URL raw, creates or
// upgrades its schema (a reader only checks it: ErrNoSchema when there is
// none), and takes this node's lease.
func Open(raw string, opts *Options) (*Store, error) {
	if opts == nil {
		opts = &Options{}
	}
	shown := Redact(raw)
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
	p := &Store{path: shown, readOnly: opts.ReadOnly, pool: pool, failpoint: opts.Failpoint}
	if p.failpoint == nil {
		p.failpoint = func(string) error { return nil }
	}
	p.w.Commit = p.commitGroup
	fail := func(err error) (*Store, error) {
		p.Close()
		return nil, err
	}
	if opts.ReadOnly {
		if err := p.checkSchema(ctx, shown); err != nil {
			return fail(err)
		}
		return p, nil
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
	return p, nil
}

// pgMessage is a Postgres error in the user's terms.
func pgMessage(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Message
	}
	return err.Error()
}

// Close waits for the writes in progress, ends this node's lease and
// closes the connections.
func (p *Store) Close() error {
	if !p.w.Close() {
		return nil
	}
	p.closed.Store(true)
	if p.lease != nil {
		p.release()
	}
	p.pool.Close()
	return nil
}

// ready checks that the store is open and healthy and ctx not done.
func (p *Store) ready(ctx context.Context) error {
	if p.closed.Load() {
		return ErrClosed
	}
	return ctx.Err()
}

// Err is always nil: a write fails alone, and the store goes on once
// Postgres answers.
func (p *Store) Err() error { return nil }

// Describe says "Postgres 16.4, schema 3, 2 nodes with a live lease", for
// toolgate doctor.
func (p *Store) Describe(ctx context.Context) (string, error) {
	if err := p.ready(ctx); err != nil {
		return "", err
	}
	var version string
	var schema, nodes int64
	err := p.pool.QueryRow(ctx, `SELECT current_setting('server_version'),
		(SELECT value FROM toolgate_meta WHERE key = 'schema'),
		(SELECT count(*) FROM toolgate_nodes WHERE expires > clock_timestamp())`).Scan(&version, &schema, &nodes)
	if err != nil {
		return "", p.readErr(ctx, err)
	}
	plural := "s"
	if nodes == 1 {
		plural = ""
	}
	return fmt.Sprintf("Postgres %s, schema %d, %d node%s with a live lease", version, schema, nodes, plural), nil
}
