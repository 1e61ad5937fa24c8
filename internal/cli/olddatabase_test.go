package cli

import (
	"bytes"
	"crypto/sha256"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// olddb is a bbolt database written by toolgate as it was on 2026-11-27
// (main at 760167f), before the store was split into a contract and its
// backends, with what each reading command printed of it then.
const olddb = "testdata/olddb"

// olddbReads are the commands whose answers on the old database are kept
// under testdata/olddb, one file each (named after the command).
var olddbReads = [][]string{
	{"executions", "--json"},
	{"intent", "list", "--json"},
	{"audit", "export"},
	{"audit", "verify"},
	{"stats"},
}

// A database written by an earlier toolgate opens unchanged: every
// reading command answers on it exactly as the toolgate that wrote it
// did, reading leaves the file's bytes as they were, and a new call
// extends its records and audit chain, which still verify.
//
// TOOLGATE_WRITE_OLDDB=1 go test -run TestDatabaseOfAnEarlierRelease ./internal/cli
// writes the database and the answers again: do that only with the
// release whose format the test is to keep.
func TestDatabaseOfAnEarlierRelease_OpensUnchanged(t *testing.T) {
	testdata, err := filepath.Abs(olddb)
	must(t, err)
	if os.Getenv("TOOLGATE_WRITE_OLDDB") == "1" {
		writeOldDB(t, testdata)
	}
	src, err := os.ReadFile(filepath.Join(testdata, "toolgate.db"))
	if err != nil {
		t.Fatalf("%v (TOOLGATE_WRITE_OLDDB=1 writes it)", err)
	}
	dir := workdir(t)
	db := filepath.Join(dir, "old.db")
	must(t, os.WriteFile(db, src, 0o600))
	t.Setenv("TOOLGATE_DB", db)

	for _, args := range olddbReads {
		want, err := os.ReadFile(filepath.Join(testdata, answerFile(args)))
		must(t, err)
		r := toolgate(t, "", args...)
		if r.code != 0 || r.stdout != string(want) {
			t.Errorf("toolgate %s on the old database: exit %d\n--- got\n%s--- want\n%s%s", strings.Join(args, " "), r.code, r.stdout, want, r.stderr)
		}
	}
	if got, _ := os.ReadFile(db); sha256.Sum256(got) != sha256.Sum256(src) {
		t.Error("reading the old database changed its file")
	}

	// It takes new calls and intents, and its chain still verifies.
	r := toolgate(t, "", "run", "file.read", "--allow", "filesystem.read:.", "--input", `{"path":"hello.txt"}`)
	if r.code != 0 || !strings.Contains(r.stdout, "hello") {
		t.Fatalf("run on the old database: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	want := regexp.MustCompile(`(\d+) execution records and (\d+) intents match`)
	verified, err := os.ReadFile(filepath.Join(testdata, answerFile([]string{"audit", "verify"})))
	must(t, err)
	before := want.FindString(string(verified))
	r = toolgate(t, "", "audit", "verify")
	after := want.FindString(r.stdout)
	if r.code != 0 || before == "" || after == "" || after == before {
		t.Fatalf("audit verify after a new call on the old database: exit %d (before: %q)\n%s%s", r.code, before, r.stdout, r.stderr)
	}
}

func answerFile(args []string) string {
	return strings.Join(args, "_") + ".out"
}

// writeOldDB writes out (testdata/olddb) again with this toolgate: a database
// that holds every kind of record (completed, failed, denied, keyed and
// replayed calls, intents executed, rejected and pending, a process
// tool's run) and what the reading commands print of it.
func writeOldDB(t *testing.T, out string) {
	reg := exampleRegistry(t)
	dir := workdir(t)
	db := filepath.Join(dir, "toolgate.db")
	t.Setenv("TOOLGATE_DB", db)
	read := []string{"--allow", "filesystem.read:."}
	step := func(code int, args ...string) run {
		t.Helper()
		r := toolgate(t, "", args...)
		if r.code != code {
			t.Fatalf("toolgate %s: exit %d, want %d\n%s%s", strings.Join(args, " "), r.code, code, r.stdout, r.stderr)
		}
		return r
	}
	step(0, append([]string{"run", "file.read", "--input", `{"path":"hello.txt"}`}, read...)...)
	step(0, "run", "file.write", "--allow", "filesystem.write:.", "--input", `{"path":"out.txt","content":"written"}`)
	step(ExitDenied, "run", "file.read", "--input", `{"path":"hello.txt"}`)
	step(ExitFailed, append([]string{"run", "file.read", "--input", `{"path":7}`}, read...)...)
	step(0, append([]string{"run", "file.read", "--idempotency-key", "k1", "--input", `{"path":"hello.txt"}`}, read...)...)
	step(0, append([]string{"run", "file.read", "--idempotency-key", "k1", "--input", `{"path":"hello.txt"}`}, read...)...)
	step(0, "--registry", reg, "run", "file.sha256", "--allow", "process.exec:sha256sum", "--allow", "filesystem.read:.",
		"--input", `{"path":"hello.txt","cwd":"."}`)
	propose := func(path string) (string, string) {
		r := step(0, "intent", "propose", "file.read", "--input", `{"path":"`+path+`"}`)
		m := proposedRE.FindStringSubmatch(r.stdout)
		if m == nil {
			t.Fatalf("propose printed no id and hash:\n%s", r.stdout)
		}
		return m[1], m[2]
	}
	id, hash := propose("hello.txt")
	step(0, "intent", "approve", id, "--yes")
	step(0, append([]string{"run", "--intent", id, "--hash", hash}, read...)...)
	rejected, _ := propose("sub")
	step(0, "intent", "reject", rejected, "--reason", "not today")
	propose("big.txt") // left pending

	must(t, os.RemoveAll(out))
	must(t, os.MkdirAll(out, 0o755))
	for _, args := range olddbReads {
		r := step(0, args...)
		must(t, os.WriteFile(filepath.Join(out, answerFile(args)), []byte(r.stdout), 0o644))
	}
	b, err := os.ReadFile(db)
	must(t, err)
	must(t, os.WriteFile(filepath.Join(out, "toolgate.db"), b, 0o644))
	if bytes.Contains(b, []byte("BEGIN PRIVATE")) {
		t.Fatal("the database holds a private key")
	}
	t.Logf("wrote %s", out)
}
