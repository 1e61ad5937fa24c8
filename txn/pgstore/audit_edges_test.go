package pgstore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/toolgate/toolgate/txn/pgstore"
)

// AuditRaw reads the whole log, however long, and a context cancelled
// while it reads ends it with the context's error within the next 1024
// rows (it looks every 1024: how often is not a promise).
func TestPostgresAuditRawLongAndCancelled(t *testing.T) {
	dbURL := freshPostgres(t)
	ctx := context.Background()
	p, err := pgstore.Open(dbURL, &pgstore.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// Rows as stored, not a valid chain: AuditRaw hands them over as they are.
	const n = 2100
	pgExec(t, dbURL, `INSERT INTO toolgate_audit (seq, entries) SELECT g, '[]' FROM generate_series(1, 2100) g`)
	rows := 0
	if err := p.AuditRaw(ctx, func(k, v []byte) error { rows++; return nil }); err != nil || rows != n {
		t.Fatalf("AuditRaw read %d rows, %v; want all %d", rows, err, n)
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rows = 0
	err = p.AuditRaw(cctx, func(k, v []byte) error {
		rows++
		cancel()
		return nil
	})
	if !errors.Is(err, context.Canceled) || rows >= 1024 {
		t.Fatalf("AuditRaw cancelled at its first row = %v after %d rows; want context.Canceled within 1024 rows", err, rows)
	}
}
