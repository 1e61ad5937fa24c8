package pgstore_test

import (
	"context"
	"errors"
	"io/fs"
	"net/url"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/txn"
)

// Tests about the Postgres backend alone: its schema and its connections
// (many nodes: pgnodes_test.go).

func TestPostgresNewerSchemaRefused(t *testing.T) {
	dbURL := freshPostgres(t)
	s, err := txn.Open(dbURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Reopening migrates nothing and keeps the data.
	s = openAt(t, dbURL)
	if err := s.PutState(context.Background(), "ns", "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	s = openAt(t, dbURL)
	if v, _, err := s.StateValue(context.Background(), "ns", "k"); err != nil || string(v) != "v" {
		t.Fatalf("after reopening: %q, %v", v, err)
	}
	_ = s.Close()

	pgExec(t, dbURL, `UPDATE toolgate_meta SET value = 99 WHERE key = 'schema'`)
	for _, ro := range []bool{false, true} {
		_, err := txn.Open(dbURL, &txn.Options{ReadOnly: ro})
		if !errors.Is(err, txn.ErrIncompatible) || !strings.Contains(err.Error(), "version 99, newer than this build's") {
			t.Fatalf("Open (read-only %v) of a newer schema = %v, want ErrIncompatible saying so", ro, err)
		}
	}
}

func TestPostgresReadOnlyNeedsSchema(t *testing.T) {
	dbURL := freshPostgres(t)
	_, err := txn.Open(dbURL, &txn.Options{ReadOnly: true})
	if !errors.Is(err, txn.ErrIncompatible) || !errors.Is(err, txn.ErrNoSchema) || !errors.Is(err, fs.ErrNotExist) ||
		!strings.HasSuffix(err.Error(), "no toolgate schema in this database yet: it is empty (the first write, toolgate run or serve, creates it)") {
		t.Fatalf("read-only Open of an empty database = %v", err)
	}
	pgExec(t, dbURL, `SELECT 1`) // the database is still there, untouched
}

func TestPostgresPasswordNotShown(t *testing.T) {
	base := freshPostgres(t)
	u, _ := url.Parse(base)
	u.User = url.UserPassword(u.User.Username(), "s3cret-pw")
	s, err := txn.Open(u.String(), nil)
	if err != nil {
		// trust authentication ignores the password; other setups may refuse it
		if strings.Contains(err.Error(), "s3cret-pw") {
			t.Fatalf("an error shows the password: %v", err)
		}
		t.Skipf("the server refused the made-up password: %v", err)
	}
	defer s.Close()
	if strings.Contains(s.Path(), "s3cret-pw") {
		t.Fatalf("Path() shows the password: %s", s.Path())
	}
	if !txn.IsPostgresURL(u.String()) || txn.IsPostgresURL("/var/lib/toolgate.db") {
		t.Fatal("IsPostgresURL is wrong")
	}
	if shown := txn.ShownPath(u.String()); strings.Contains(shown, "s3cret-pw") || !strings.HasPrefix(shown, "postgres://") {
		t.Fatalf("ShownPath = %s", shown)
	}
	u.Host = "127.0.0.1:1" // nothing listens there
	u.RawQuery = "connect_timeout=2"
	_, err = txn.Open(u.String(), nil)
	if err == nil || strings.Contains(err.Error(), "s3cret-pw") {
		t.Fatalf("Open of an unreachable server = %v", err)
	}
}

// Postgres ends every session of the store (an operator, a failover): the
// next write is tried again on a fresh connection and goes through.
func TestPostgresWriterConnectionLost(t *testing.T) {
	dbURL := freshPostgres(t)
	ctx := context.Background()
	s := openAt(t, dbURL)
	if err := s.PutState(ctx, "ns", "k", []byte("1")); err != nil {
		t.Fatal(err)
	}
	pgExec(t, dbURL, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid()`)
	if err := s.PutState(ctx, "ns", "k", []byte("2")); err != nil {
		t.Fatalf("a write after the connections were lost = %v", err)
	}
	if err := s.Err(); err != nil {
		t.Fatalf("Err = %v", err)
	}
	if v, _, err := s.StateValue(ctx, "ns", "k"); err != nil || string(v) != "2" {
		t.Fatalf("after the write: %q, %v", v, err)
	}
}

// A head set back (or deleted) must not make the store write over stored
// entries: writes fail with ErrCorrupt and write nothing.
func TestPostgresTamperedHeadRefused(t *testing.T) {
	dbURL := freshPostgres(t)
	ctx := context.Background()
	s := openAt(t, dbURL)
	for i := range 3 {
		if err := s.PutState(ctx, "ns", "k", nil); err != nil {
			t.Fatal(err)
		}
		if err := s.UpdateState(ctx, func(v *txn.StateView) error { return v.Put("ns", "k", []byte{byte(i)}) }, ev("e"), ev("f")); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct{ tamper, want string }{
		{`UPDATE toolgate_audit_head SET seq = 3`, "tampered"},
		// The schema checks the hash's length too: one who drops the check.
		{`ALTER TABLE toolgate_audit_head DROP CONSTRAINT toolgate_audit_head_hash_check;
			UPDATE toolgate_audit_head SET seq = 6, hash = '\x00'`, "audit head hash is 1 bytes"},
		{`UPDATE toolgate_audit_head SET seq = -1, hash = decode(repeat('00', 32), 'hex')`, "the audit log's head records -1 entries but a group starts at entry 5; it was tampered with"},
		{`DELETE FROM toolgate_audit_head`, "the audit log's head is missing; it was tampered with"},
	} {
		tamper := tc.tamper
		pgExec(t, dbURL, tamper)
		err := s.UpdateState(ctx, func(v *txn.StateView) error { return v.Put("ns", "k", []byte("x")) }, ev("g"))
		if !errors.Is(err, txn.ErrCorrupt) || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("after %q: write = %v, want ErrCorrupt saying %q", tamper, err, tc.want)
		}
		if v, _, _ := s.StateValue(ctx, "ns", "k"); string(v) != "\x02" {
			t.Fatalf("after %q: a refused write wrote %q", tamper, v)
		}
	}
	log, err := s.AuditLog(ctx, 0, 0)
	if err != nil || len(log) != 6 {
		t.Fatalf("the log has %d entries, %v; want the 6 written", len(log), err)
	}
}
