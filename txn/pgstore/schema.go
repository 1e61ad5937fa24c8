package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/toolgate/toolgate/txn/driver"
)

// The schema: created, or upgraded step by step, at a writer's open.

// pgSchemaVersion is the newest schema this build knows.
const pgSchemaVersion = 3

// pgWriterLock is the advisory lock key a writer of schema version 1 held
// ("toolgate"); the upgrade to version 2 takes it, so it never runs under
// an older toolgate still writing.
const pgWriterLock int64 = 0x746f6f6c67617465

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

func (p *Store) checkSchema(ctx context.Context, shown string) error {
	v, err := schemaVersion(ctx, p.pool)
	switch {
	case err != nil:
		return fmt.Errorf("txn: %s: read the schema version: %v", shown, pgMessage(err))
	case v == 0:
		return &driver.NoSchemaError{Shown: shown}
	case v > pgSchemaVersion:
		return newerSchema(shown, v)
	case v < pgSchemaVersion:
		return fmt.Errorf("%w: %s: schema version %d, older than this build's %d: the first write (toolgate run, serve) upgrades it; read-only inspection does not", ErrIncompatible, shown, v, pgSchemaVersion)
	}
	return nil
}

// migrate creates the schema or upgrades it to pgSchemaVersion, in one
// transaction, under a lock that keeps concurrent openers out.
func (p *Store) migrate(ctx context.Context, shown string) error {
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
