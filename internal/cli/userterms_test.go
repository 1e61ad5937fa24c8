package cli

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/txn"
)

// goInternals matches what a message a person reads must not hold (issue
// 17 §5): a Go package's prefix at the start of a message or of one of its
// parts ("runtime: ", "txn: ", "json: ", "strconv.ParseInt: "), a system
// call's name ("statat", "openat", "readdirent"), and Go's own words for
// JSON decoding ("Go struct field", "Go value of type"), and a file
// error's Go form ("open PATH: REASON").
var goInternals = regexp.MustCompile(`(?:^|[\s(\[";,]|: )(?:runtime|tools|capability|txn|lifecycle|json|time|strconv|bbolt|bolt|proc|os|fs|io|syscall|yaml|jsonschema|url|x509|errors|fmt|filepath|exec)(?:\.[A-Za-z]+)?: ` +
	`|\b(?:statat|fstatat|newfstatat|openat2?|readdirent|getdents(?:64)?|mkdirat|unlinkat|renameat2?|fchmodat|lstat|fstat|fdatasync)\b` +
	`|Go struct field|Go value of type|\*[a-z]+\.[A-Z][A-Za-z]*Error\b` +
	// A file error's Go form, "open PATH: no such file or directory" (its
	// rendering is "cannot open PATH: ...").
	`|(?:^|: |; |[("\[])(?:open|read|write|stat|lstat|mkdir|remove|rename|unlink|readlink|chmod|close) [^\s:]+: (?:no such file or directory|permission denied|not a directory|is a directory|file exists|read-only file system|no space left on device|too many open files|file too large|directory not empty|input/output error)`)

// checkUserTerms fails t when text, which where names, holds Go internals.
// Every run of the toolgate helper passes its stdout and stderr through it,
// and every database those runs used is scanned when the test ends
// (scanDatabase): one rule for every message the CLI tests produce.
func checkUserTerms(t *testing.T, where, text string) {
	t.Helper()
	for line := range strings.Lines(text) {
		if m := goInternals.FindString(line); m != "" {
			t.Errorf("%s: a message holds Go internals (%q), issue 17 §5:\n%s", where, strings.TrimSpace(m), strings.TrimRight(line, "\n"))
		}
	}
}

// scanRun checks a run's stdout and stderr, and scans the database it
// used when t ends.
func scanRun(t *testing.T, args []string, stdout, stderr string) {
	t.Helper()
	checkUserTerms(t, "toolgate "+strings.Join(args, " ")+": stdout", stdout)
	checkUserTerms(t, "toolgate "+strings.Join(args, " ")+": stderr", stderr)
	scanDatabaseAtEnd(t, args)
}

// scanned remembers the databases a test's cleanup scans, once each.
var scanned sync.Map // "test name\x00path" -> true

// scanDatabaseAtEnd scans, when t ends, the database a toolgate run of it
// used (--db, else $TOOLGATE_DB): its records' error messages and
// transition reasons and its audit events' error messages.
func scanDatabaseAtEnd(t *testing.T, args []string) {
	path := os.Getenv("TOOLGATE_DB")
	for i, a := range args {
		if a == "--" {
			break
		}
		if a == "--db" && i+1 < len(args) {
			path = args[i+1]
		} else if v, ok := strings.CutPrefix(a, "--db="); ok {
			path = v
		}
	}
	if path == "" || strings.Contains(path, "://") && !txn.IsPostgresURL(path) {
		return
	}
	if !txn.IsPostgresURL(path) && !filepath.IsAbs(path) {
		wd, err := os.Getwd()
		if err != nil {
			return
		}
		path = filepath.Join(wd, path)
	}
	if _, loaded := scanned.LoadOrStore(t.Name()+"\x00"+path, true); loaded {
		return
	}
	t.Cleanup(func() { scanDatabase(t, path) })
}

func scanDatabase(t *testing.T, path string) {
	t.Helper()
	if fi, err := os.Stat(path); !txn.IsPostgresURL(path) && (err != nil || fi.Size() == 0) {
		return
	}
	store, err := txn.Open(path, &txn.Options{ReadOnly: true, Timeout: 2 * time.Second})
	if errors.Is(err, fs.ErrNotExist) { // on Postgres: no toolgate schema, nothing written
		return
	}
	if err != nil {
		t.Logf("not scanned for Go internals: %s: %v", path, err)
		return
	}
	defer store.Close()
	ctx := context.Background()
	recs, err := store.List(ctx, txn.Filter{})
	if err != nil {
		t.Logf("not scanned for Go internals: %s: %v", path, err)
		return
	}
	for _, r := range recs {
		if r.Error != nil {
			checkUserTerms(t, "stored record "+r.ExecutionID+" error message", r.Error.Message)
		}
		for _, tr := range r.Transitions {
			checkUserTerms(t, "stored record "+r.ExecutionID+" transition reason", tr.Reason)
		}
	}
	for from := uint64(1); ; {
		entries, err := store.AuditLog(ctx, from, 1000)
		if err != nil || len(entries) == 0 {
			return
		}
		for _, e := range entries {
			var ev struct {
				Error *struct {
					Message string `json:"message"`
				} `json:"error"`
			}
			if json.Unmarshal(e.Event, &ev) == nil && ev.Error != nil {
				checkUserTerms(t, "audit event error message", ev.Error.Message)
			}
			from = e.Seq + 1
		}
	}
}

// The places Go internals used to reach a user (issue 17 §5), each run as
// a user would: the toolgate helper checks every message (checkUserTerms)
// and the database each run used (scanDatabase); the file errors read as
// what could not be done to which file.
func TestMessages_UserTerms(t *testing.T) {
	workdir(t)
	must(t, os.WriteFile("bad-policy.json", []byte(`{"principals": {"alice": [7]}}`), 0o600))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "file.read", "--allow", "filesystem.read:.", "--input", `{"path":"nope.txt"}`}, "cannot access nope.txt: no such file or directory"},
		{[]string{"run", "file.list", "--allow", "filesystem.read:.", "--input", `{"path":"nope"}`}, "cannot open nope: no such file or directory"},
		{[]string{"run", "file.read", "--input", "@nope.json"}, "cannot open nope.json: no such file or directory"},
		{[]string{"run", "file.read", "--allow", "filesystem.read:.", "--input", `{"path":7}`}, "invalid input: input does not match schema: /path"},
		{[]string{"run", "file.read", "--input", `{"path":"hello.txt"}`}, "capability denied: file.read requires filesystem.read"},
		{[]string{"run", "no.such.tool"}, `tool not found: "no.such.tool"`},
		{[]string{"run", "--intent", "nope", "--hash", "x"}, "intent nope: malformed"},
		{[]string{"executions", "--limit", "many"}, `"many" is not a whole number`},
		{[]string{"run", "file.read", "--policy", "bad-policy.json", "--input", `{"path":"hello.txt"}`}, "bad-policy.json"},
	} {
		for _, args := range [][]string{tc.args, append(slices.Clone(tc.args), "--json")} {
			r := toolgate(t, "", args...)
			if !strings.Contains(r.stdout+r.stderr, tc.want) {
				t.Errorf("%q: exit %d, does not say %q:\n%s%s", args, r.code, tc.want, r.stdout, r.stderr)
			}
		}
	}
}

// A database another process holds: the message says so in the user's terms.
func TestMessages_UserTermsLocked(t *testing.T) {
	bboltOnly(t, whyLock)
	workdir(t)
	store, err := txn.Open(theDB(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for _, args := range [][]string{{"run", "file.read", "--allow", "filesystem.read:.", "--input", `{"path":"hello.txt"}`}, {"executions", "--json"}} {
		if r := toolgate(t, "", args...); !strings.Contains(r.stdout+r.stderr, "locked by another process") {
			t.Errorf("%q: exit %d:\n%s%s", args, r.code, r.stdout, r.stderr)
		}
	}
}
