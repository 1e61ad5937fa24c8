package pgstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/toolgate/toolgate/txn"
	"github.com/toolgate/toolgate/txn/pgstore"
)

// A database of schema version 1 (one writer, no leases) is upgraded at the
// first open for writing, in one transaction: its records and audit log are
// kept, and it works with leases after. While a version-1 writer runs (its
// advisory lock held), the upgrade is refused.
func TestPostgresMigrateFromVersion1(t *testing.T) {
	dbURL := freshPostgres(t)
	ctx := context.Background()
	c, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	for _, stmt := range append([]string{`CREATE TABLE toolgate_meta (key text PRIMARY KEY, value bigint NOT NULL)`,
		`INSERT INTO toolgate_meta VALUES ('schema', 1)`}, pgstore.SchemaSteps[0]...) {
		if _, err := c.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	// A claim left by the version-1 writer (no node).
	rec := newRecord("old", "tool", "EXECUTING")
	data, err := txn.EncodeRecord(rec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, `INSERT INTO toolgate_executions (id, executing, data) VALUES ('old', true, $1)`, data); err != nil {
		t.Fatal(err)
	}
	// A reader does not upgrade it, and says so.
	if _, err := txn.Open(dbURL, &txn.Options{ReadOnly: true}); !errors.Is(err, txn.ErrIncompatible) ||
		!strings.Contains(err.Error(), "schema version 1, older than this build's 3: the first write (toolgate run, serve) upgrades it; read-only inspection does not") {
		t.Fatalf("read-only Open of a version-1 database = %v, want ErrIncompatible saying a write upgrades it", err)
	}
	// An old writer runs: refused, nothing changed.
	if _, err := c.Exec(ctx, `SELECT pg_advisory_lock($1)`, pgstore.WriterLock); err != nil {
		t.Fatal(err)
	}
	_, err = txn.Open(dbURL, nil)
	if !errors.Is(err, txn.ErrLocked) || !strings.Contains(err.Error(), "older toolgate") {
		t.Fatalf("Open while a version-1 writer runs = %v, want ErrLocked", err)
	}
	var v int
	if err := c.QueryRow(ctx, `SELECT value FROM toolgate_meta WHERE key = 'schema'`).Scan(&v); err != nil || v != 1 {
		t.Fatalf("schema after the refused upgrade = %d, %v", v, err)
	}
	if _, err := c.Exec(ctx, `SELECT pg_advisory_unlock($1)`, pgstore.WriterLock); err != nil {
		t.Fatal(err)
	}
	s := openNode(t, dbURL, "a", 0)
	done, err := s.Recover(ctx, interrupted)
	if err != nil || len(done) != 1 || done[0].ExecutionID != "old" {
		t.Fatalf("Recover of the version-1 claim = %v, %v", done, err)
	}
	if err := s.Put(ctx, newRecord("new", "tool", "DENIED"), ev("new")); err != nil {
		t.Fatal(err)
	}
	if err := c.QueryRow(ctx, `SELECT value FROM toolgate_meta WHERE key = 'schema'`).Scan(&v); err != nil || v != 3 {
		t.Fatalf("schema after the upgrade = %d, %v", v, err)
	}
	verifyChain(t, s, 2)
	var found int
	if err := s.AuditSearch(ctx, "new", 0, 1<<62, func(txn.AuditEntry) bool { found++; return false }); err != nil || found != 1 {
		t.Fatalf("AuditSearch found %d, %v", found, err)
	}
}

// A database holding a table of toolgate's name that toolgate did not
// make: creating the schema fails, saying why, and leaves nothing of it
// (one transaction). A schema version that cannot be read fails a reader,
// saying so.
func TestPostgresMigrateConflictingTable(t *testing.T) {
	dbURL := freshPostgres(t)
	pgExec(t, dbURL, `CREATE TABLE toolgate_state (something int)`)
	_, err := txn.Open(dbURL, nil)
	if err == nil || !strings.Contains(err.Error(), `create or migrate the schema: relation "toolgate_state" already exists`) {
		t.Fatalf("Open of a database with a table of toolgate's name = %v", err)
	}
	pgExec(t, dbURL, `DO $$ BEGIN
		IF to_regclass('toolgate_meta') IS NOT NULL OR to_regclass('toolgate_executions') IS NOT NULL THEN
			RAISE EXCEPTION 'a failed schema creation left tables';
		END IF; END $$`)

	pgExec(t, dbURL, `DROP TABLE toolgate_state; CREATE TABLE toolgate_meta (key text PRIMARY KEY, value text NOT NULL);
		INSERT INTO toolgate_meta VALUES ('schema', 'three')`)
	for _, ro := range []bool{true, false} {
		_, err = txn.Open(dbURL, &txn.Options{ReadOnly: ro})
		if err == nil || errors.Is(err, txn.ErrIncompatible) {
			t.Errorf("Open (read-only %v) of a database whose schema version is %q = %v; want an error reading it", ro, "three", err)
		}
	}
	if _, err = txn.Open(dbURL, &txn.Options{ReadOnly: true}); err == nil || !strings.Contains(err.Error(), ": read the schema version: ") {
		t.Errorf("read-only Open of an unreadable schema version = %v; want it to say so", err)
	}
}
