package cli

import (
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/txn"
)

// helpExitCodes parses the "Exit codes:" list of a --help text: each
// code with its meaning, its lines joined.
func helpExitCodes(t *testing.T, help string) map[int]string {
	t.Helper()
	_, list, ok := strings.Cut(help, "\nExit codes:\n")
	if !ok {
		t.Fatalf("no exit codes in:\n%s", help)
	}
	codes := map[int]string{}
	last := -1
	for line := range strings.Lines(list) {
		if strings.TrimSpace(line) == "" {
			break
		}
		if m := regexp.MustCompile(`^  (\d+)  (.*)$`).FindStringSubmatch(strings.TrimRight(line, "\n")); m != nil {
			last, _ = strconv.Atoi(m[1])
			codes[last] = m[2]
			continue
		}
		if last < 0 || !strings.HasPrefix(line, "     ") {
			t.Fatalf("not a line of the exit codes: %q", line)
		}
		codes[last] += " " + strings.TrimSpace(line)
	}
	return codes
}

// The audit commands list their exit codes from the one table (exitCodes,
// its audit column): each code their --help lists is a row of it, saying
// what the row says; and the codes listed are the codes they exit with,
// each produced here as a user would.
func TestExitCodes_AuditHelp(t *testing.T) {
	want := map[int]string{}
	for _, e := range exitCodes {
		if e.audit != "" {
			want[e.code] = strings.Join(strings.Fields(strings.ReplaceAll(e.audit, "`", "")), " ")
		}
	}
	dir := workdir(t)
	t.Setenv("TOOLGATE_AUDIT_KEY", filepath.Join(dir, "audit.key")) // not the user's
	for _, cmd := range [][]string{{"audit"}, {"audit", "verify"}, {"audit", "checkpoint"}} {
		r := toolgate(t, "", append(cmd, "--help")...)
		if got := helpExitCodes(t, r.stdout); !maps.Equal(got, want) {
			t.Errorf("toolgate %s --help lists the exit codes\n%v\nthe table (exitCodes' audit column) says\n%v", strings.Join(cmd, " "), got, want)
		}
	}

	// What the audit commands exit with.
	exits := map[int][]string{}
	runAs := func(args ...string) {
		r := toolgate(t, "", args...)
		exits[r.code] = append(exits[r.code], strings.Join(args, " "))
	}
	if r := toolgate(t, "", "run", "file.read", "--allow", "filesystem.read:.", "--input", `{"path":"hello.txt"}`); r.code != 0 {
		t.Fatalf("run: exit %d\n%s", r.code, r.stderr)
	}
	runAs("audit", "verify")                                  // 0: valid
	runAs("audit", "checkpoint")                              // 0: creates the key
	runAs("audit", "verify", "--frobnicate")                  // 2: a bad flag
	runAs("audit", "verify", "--checkpoint", "nope.txt")      // 2: a checkpoint that cannot be read
	must(t, os.WriteFile("cp.txt", []byte("hello\n"), 0o600)) // not a checkpoint
	runAs("audit", "verify", "--checkpoint", "cp.txt")        // 7
	if onPostgres() {
		// 1: a database the server does not have
		u, err := url.Parse(theDB())
		must(t, err)
		u.Path = "/toolgate_no_such_database"
		runAs("--db", u.String(), "audit", "verify")
	} else {
		store, err := txn.Open(theDB(), nil) // 1: held by a writer
		must(t, err)
		runAs("audit", "verify")
		store.Close()
	}
	got := slices.Sorted(maps.Keys(exits))
	if listed := slices.Sorted(maps.Keys(want)); !slices.Equal(got, listed) {
		t.Errorf("the audit commands exited with %v (%v); their --help lists %v", got, exits, listed)
	}
}
