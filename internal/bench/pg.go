package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The bench against Postgres (Options.DB): each phase's database is a
// schema of its own in the database the URL names (search_path set to it),
// created for the phase and dropped when Run returns, so the bench never
// touches toolgate's own tables there. The floor is bare pgx transactions
// writing the rows the runtime writes for one invocation: the claim
// (the EXECUTING record, its audit group, the audit head) and the commit
// (the final record, its audit group, the head), each one transaction run
// by its caller, the head row locked first as the audit chain needs.

type pgBench struct {
	base    string // the URL given
	prefix  string // of the schemas made
	schemas []string
	version string // server_version
	lastURL string // of the last schema made
}

func newPGBench(ctx context.Context, raw string) (*pgBench, error) {
	var b [4]byte
	_, _ = rand.Read(b[:])
	p := &pgBench{base: raw, prefix: "toolgate_bench_" + hex.EncodeToString(b[:])}
	conn, err := pgx.Connect(ctx, raw)
	if err != nil {
		return nil, fmt.Errorf("bench: connect to Postgres: %w", err)
	}
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, `SHOW server_version`).Scan(&p.version); err != nil {
		return nil, fmt.Errorf("bench: Postgres: %w", err)
	}
	return p, nil
}

// schema creates the schema of a phase and returns the URL that uses it.
func (p *pgBench) schema(ctx context.Context, name string) (string, error) {
	s := p.prefix + "_" + name
	conn, err := pgx.Connect(ctx, p.base)
	if err != nil {
		return "", fmt.Errorf("bench: connect to Postgres: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{s}.Sanitize()); err != nil {
		return "", fmt.Errorf("bench: create a scratch schema (the bench needs CREATE on the database): %w", err)
	}
	p.schemas = append(p.schemas, s)
	u, err := url.Parse(p.base)
	if err != nil {
		return "", fmt.Errorf("bench: database URL: %w", err)
	}
	q := u.Query()
	q.Set("search_path", s)
	u.RawQuery = q.Encode()
	p.lastURL = u.String()
	return p.lastURL, nil
}

// cleanup drops the schemas made.
func (p *pgBench) cleanup() error {
	if len(p.schemas) == 0 {
		return nil
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, p.base)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	var errs []error
	for _, s := range p.schemas {
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{s}.Sanitize()+" CASCADE"); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// pgRecords reads what the probe stored: the final record and the audit
// groups of its claim and its commit.
func (b *bencher) pgRecords(dbURL, id string) (final []byte, lay layout, err error) {
	ctx := b.ctx
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, lay, fmt.Errorf("bench: reading the probe database: %w", err)
	}
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, `SELECT data FROM toolgate_executions WHERE id = $1`, []byte(id)).Scan(&final); err != nil {
		return nil, lay, fmt.Errorf("bench: the probe's record: %w", err)
	}
	rows, err := conn.Query(ctx, `SELECT entries FROM toolgate_audit ORDER BY seq LIMIT 2`)
	if err != nil {
		return nil, lay, fmt.Errorf("bench: the probe's audit log: %w", err)
	}
	groups, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	if err != nil || len(groups) != 2 {
		return nil, lay, fmt.Errorf("bench: the probe's audit log holds %d groups, not 2: %v", len(groups), err)
	}
	lay.claimAudit, lay.commitAudit = groups[0], groups[1]
	return final, lay, nil
}

// pgFloor measures bare pgx transactions doing the runtime's writes for
// one invocation.
func (b *bencher) pgFloor(name string, callers int, lay layout, claim, final []byte) (Phase, error) {
	ctx := b.ctx
	dbURL, err := b.pg.schema(ctx, name)
	if err != nil {
		return Phase{}, err
	}
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return Phase{}, fmt.Errorf("bench: database URL: %w", err)
	}
	cfg.MaxConns = int32(max(callers, 4))
	if !b.opts.Sync {
		cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return Phase{}, fmt.Errorf("bench: floor database: %w", err)
	}
	defer pool.Close()
	for _, stmt := range []string{
		`CREATE TABLE toolgate_executions (id bytea PRIMARY KEY, executing boolean NOT NULL, data bytea NOT NULL, node text)`,
		`CREATE INDEX ON toolgate_executions (id) WHERE executing`,
		`CREATE TABLE toolgate_audit (seq bigint PRIMARY KEY, entries bytea NOT NULL)`,
		`CREATE TABLE toolgate_audit_head (id int PRIMARY KEY, seq bigint NOT NULL, hash bytea NOT NULL)`,
		`INSERT INTO toolgate_audit_head VALUES (1, 0, '\x00')`,
	} {
		if _, err := pool.Exec(ctx, stmt); err != nil {
			return Phase{}, fmt.Errorf("bench: floor schema: %w", err)
		}
	}
	var ids idGen
	var seq atomic.Int64
	hash := make([]byte, 32)
	// write is one transaction: lock the head, write the record, append
	// the group, move the head.
	write := func(record string, args []any, group []byte) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var s int64
			if err := tx.QueryRow(ctx, `SELECT seq FROM toolgate_audit_head WHERE id = 1 FOR UPDATE`).Scan(&s); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, record, args...); err != nil {
				return err
			}
			n := seq.Add(1)
			if _, err := tx.Exec(ctx, `INSERT INTO toolgate_audit (seq, entries) VALUES ($1, $2)`, n, group); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `UPDATE toolgate_audit_head SET seq = $1, hash = $2 WHERE id = 1`, n, hash)
			return err
		})
	}
	return b.measure(callers, func() error {
		key := ids.next(lay.ordered)
		if err := write(`INSERT INTO toolgate_executions (id, executing, data, node) VALUES ($1, true, $2, 'bench')`,
			[]any{key, claim}, lay.claimAudit); err != nil {
			return fmt.Errorf("bench: floor claim: %w", err)
		}
		if err := write(`UPDATE toolgate_executions SET executing = false, data = $2 WHERE id = $1`,
			[]any{key, final}, lay.commitAudit); err != nil {
			return fmt.Errorf("bench: floor commit: %w", err)
		}
		return nil
	})
}
