// Package testdb gives each test its database on the backend the
// environment selects, so that one suite runs on bbolt and on Postgres:
//
//	go test ./runtime                                                          # bbolt
//	TOOLGATE_TEST_BACKEND=postgres bash scripts/pg-test.sh run go test ./runtime # Postgres
//
// On bbolt a test's database is a file in its t.TempDir(); on Postgres a
// fresh database on the server TOOLGATE_TEST_POSTGRES names (a server where
// the test user may create databases; scripts/pg-test.sh starts one),
// dropped when the test ends. Tests only: it imports the testing package.
package testdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"
)

// HowTo says how to run the suite of the package under test on Postgres.
func HowTo() string {
	return "TOOLGATE_TEST_BACKEND=postgres bash scripts/pg-test.sh run go test " + pkgArg()
}

// pkgArg is the package under test as go test names it from the module's
// root ("./runtime"), found when the test binary starts: go test runs it in
// its package's directory, which a test may leave (t.Chdir) later.
func pkgArg() string { return pkg }

var pkg = findPkg()

func findPkg() string {
	wd, err := os.Getwd()
	if err != nil {
		return "./..."
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			rel, err := filepath.Rel(dir, wd)
			if err != nil || rel == "." {
				return "."
			}
			return "./" + filepath.ToSlash(rel)
		}
		if filepath.Dir(dir) == dir {
			return "./..."
		}
	}
}

// OnPostgres reports whether the suite runs on Postgres
// (TOOLGATE_TEST_BACKEND=postgres).
func OnPostgres() bool { return os.Getenv("TOOLGATE_TEST_BACKEND") == "postgres" }

// Path returns the path of a fresh, empty database for t: a file named
// name in a new t.TempDir(), or on Postgres the URL of a fresh database.
// On Postgres without TOOLGATE_TEST_POSTGRES the test fails: the backend
// was asked for and is not there.
func Path(t testing.TB, name string) string {
	t.Helper()
	if !OnPostgres() {
		return filepath.Join(t.TempDir(), name)
	}
	if os.Getenv("TOOLGATE_TEST_POSTGRES") == "" {
		t.Fatal("TOOLGATE_TEST_BACKEND=postgres needs TOOLGATE_TEST_POSTGRES, the URL of a server where the test user may create databases; run: " + HowTo())
	}
	return FreshPostgres(t)
}

// BboltOnly skips t on Postgres; why says what the test needs of a bbolt
// file (its lock, the holder file beside it, its bytes).
func BboltOnly(t testing.TB, why string) {
	t.Helper()
	if OnPostgres() {
		t.Skip("bbolt only: " + why + "; it runs without TOOLGATE_TEST_BACKEND=postgres")
	}
}

// FreshPostgres creates an empty database on the server
// TOOLGATE_TEST_POSTGRES names, dropped (with its connections) when t ends,
// and returns its URL. Without TOOLGATE_TEST_POSTGRES, t skips, saying how
// to run it.
func FreshPostgres(t testing.TB) string {
	t.Helper()
	base := os.Getenv("TOOLGATE_TEST_POSTGRES")
	if base == "" {
		t.Skip("TOOLGATE_TEST_POSTGRES is not set; run the Postgres tests with: bash scripts/pg-test.sh run go test " + pkgArg())
	}
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("TOOLGATE_TEST_POSTGRES: %v", err)
	}
	defer admin.Close(ctx)
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "toolgate_t_" + hex.EncodeToString(b[:])
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create a test database: %v", err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("drop test database %s: %v", name, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop test database %s: %v", name, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("TOOLGATE_TEST_POSTGRES: %v", err)
	}
	u.Path = "/" + name
	return u.String()
}
