package cli

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/toolgate/toolgate/internal/testdb"
	"github.com/toolgate/toolgate/txn"
)

// The CLI's suite runs on the backend TOOLGATE_TEST_BACKEND selects: bbolt
// (the default), a file in the test's directory, or postgres, a fresh
// database per test on the server TOOLGATE_TEST_POSTGRES names:
//
//	TOOLGATE_TEST_BACKEND=postgres bash scripts/pg-test.sh run go test ./internal/cli
//
// workdir sets TOOLGATE_DB to the test's database (testDB); a test that
// needs a file (the lock, the holder file and socket beside it, its bytes,
// file modes) calls bboltOnly, which skips it on Postgres saying why.

// onPostgres reports whether the suite runs on Postgres.
func onPostgres() bool { return testdb.OnPostgres() }

// testDB returns the path of a fresh database for a test whose directory
// is dir: dir/state/toolgate.db, or on Postgres the URL of a fresh
// database, dropped when the test ends.
func testDB(t testing.TB, dir string) string {
	t.Helper()
	if !onPostgres() {
		return filepath.Join(dir, "state", "toolgate.db")
	}
	return testdb.Path(t, "")
}

// theDB is the database of the running test (workdir set it), as the CLI
// resolves it without --db.
func theDB() string { return os.Getenv("TOOLGATE_DB") }

// Why a test runs on bbolt only.
const (
	whyLock   = "a bbolt file's writer locks other processes out (Postgres has no such lock: readers and other nodes work beside a writer)"
	whyHolder = "the holder file beside a bbolt database names the process that holds its lock (a Postgres database has no lock to hold)"
	whySocket = "the local socket beside a bbolt database lets commands reach the process that holds its lock (a Postgres database has no lock to hold)"
)

// bboltOnly skips the test on Postgres: why says what it needs of a file.
func bboltOnly(t testing.TB, why string) {
	t.Helper()
	testdb.BboltOnly(t, why)
}

// freshPostgres is a fresh Postgres database, whatever the suite's backend;
// without TOOLGATE_TEST_POSTGRES the test skips, saying how to run it.
func freshPostgres(t testing.TB) string {
	t.Helper()
	return testdb.FreshPostgres(t)
}

// readAuditPostgres is readAudit on Postgres: the stored groups of the
// log, as toolgate_audit holds them (seq of the first entry, JSON array).
func readAuditPostgres(t *testing.T, dbURL string) (groups []storedGroup) {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, dbURL)
	must(t, err)
	defer c.Close(ctx)
	rows, err := c.Query(ctx, `SELECT seq, entries FROM toolgate_audit ORDER BY seq`)
	must(t, err)
	defer rows.Close()
	for rows.Next() {
		var (
			first int64
			v     []byte
		)
		must(t, rows.Scan(&first, &v))
		g := storedGroup{first: uint64(first)}
		must(t, json.Unmarshal(v, &g.entries))
		groups = append(groups, g)
	}
	must(t, rows.Err())
	return groups
}

// modifyAuditPostgres is modifyAudit on Postgres, as someone who may write
// the database could: it edits the stored group holding seq in place.
func modifyAuditPostgres(t *testing.T, dbURL string, seq uint64, edit func(value []byte) []byte) {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, dbURL)
	must(t, err)
	defer c.Close(ctx)
	var (
		first int64
		v     []byte
	)
	must(t, c.QueryRow(ctx, `SELECT seq, entries FROM toolgate_audit WHERE seq <= $1 ORDER BY seq DESC LIMIT 1`, int64(seq)).Scan(&first, &v))
	_, err = c.Exec(ctx, `UPDATE toolgate_audit SET entries = $2 WHERE seq = $1`, first, edit(v))
	must(t, err)
}

// dbCreated reports whether the database at path exists: the file, or on
// Postgres toolgate's schema in the database.
func dbCreated(t *testing.T, path string) bool {
	t.Helper()
	if !txn.IsPostgresURL(path) {
		_, err := os.Stat(path)
		return !errors.Is(err, fs.ErrNotExist)
	}
	s, err := txn.Open(path, &txn.Options{ReadOnly: true})
	if errors.Is(err, fs.ErrNotExist) {
		return false
	}
	must(t, err)
	must(t, s.Close())
	return true
}
