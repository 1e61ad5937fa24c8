package cli

import (
	"regexp"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/txn"
)

// doctor names the backend of the database and its version: the bbolt
// file format, or Postgres's server_version and toolgate's schema there.
func TestDoctor_Backend(t *testing.T) {
	dir := workdir(t)
	file := dir + "/state/toolgate.db"
	t.Setenv("TOOLGATE_DB", file) // whatever backend the suite runs on
	s, err := txn.Open(file, nil)
	must(t, err)
	must(t, s.Close())
	rep, _ := doctor(t)
	if d := databaseCheck(t, rep); !regexp.MustCompile(`\(bbolt file, format \d+; 0 executions recorded\)`).MatchString(d) {
		t.Errorf("bbolt: database check says %q", d)
	}

	db := freshPostgres(t) // skips without TOOLGATE_TEST_POSTGRES, saying how to run it
	rep, _ = doctor(t, "--db", db)
	if d := databaseCheck(t, rep); !strings.HasSuffix(d, " (empty: no toolgate schema yet; the first toolgate run or serve creates it)") {
		t.Errorf("Postgres without toolgate's schema: database check says %q", d)
	}
	node, err := txn.Open(db, &txn.Options{Node: "doctor-test"}) // a node running meanwhile
	must(t, err)
	defer node.Close()
	rep, _ = doctor(t, "--db", db)
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
