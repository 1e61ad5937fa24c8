package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"regexp"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/toolgate/toolgate/txn"
)

// doctor names the backend of the database and its version: the bbolt
// file format, or Postgres's server_version and toolgate's schema there.
func TestDoctor_Backend(t *testing.T) {
	dir := workdir(t)
	s, err := txn.Open(dir+"/state/toolgate.db", nil)
	must(t, err)
	must(t, s.Close())
	rep, _ := doctor(t)
	if d := databaseCheck(t, rep); !regexp.MustCompile(`\(bbolt file, format \d+; 0 executions recorded\)`).MatchString(d) {
		t.Errorf("bbolt: database check says %q", d)
	}

	base := os.Getenv("TOOLGATE_TEST_POSTGRES")
	if base == "" {
		t.Skip("TOOLGATE_TEST_POSTGRES is not set; run the Postgres part with: bash scripts/pg-test.sh run go test -run TestDoctor_Backend ./internal/cli")
	}
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, base)
	must(t, err)
	defer admin.Close(ctx)
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "toolgate_doctor_" + hex.EncodeToString(b[:])
	_, err = admin.Exec(ctx, "CREATE DATABASE "+name)
	must(t, err)
	t.Cleanup(func() { _, _ = admin.Exec(ctx, "DROP DATABASE "+name+" WITH (FORCE)") })
	u, err := url.Parse(base)
	must(t, err)
	u.Path = "/" + name
	node, err := txn.Open(u.String(), &txn.Options{Node: "doctor-test"}) // a node running meanwhile
	must(t, err)
	defer node.Close()
	rep, _ = doctor(t, "--db", u.String())
	if d := databaseCheck(t, rep); !regexp.MustCompile(`\(Postgres \d+[.\d]* .*schema \d+, 1 node with a live lease; 0 executions recorded\)`).MatchString(d) {
		t.Errorf("Postgres: database check says %q", d)
	}
}

func databaseCheck(t *testing.T, rep doctorReport) string {
	t.Helper()
	for _, c := range rep.Checks {
		if c.Name == "database" {
			return c.Detail
		}
	}
	t.Fatal("no database check")
	return ""
}
