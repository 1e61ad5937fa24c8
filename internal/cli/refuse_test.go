package cli

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	tgruntime "github.com/toolgate/toolgate/runtime"
)

// A malformed idempotency key is a usage error, refused before the
// database is opened: nothing is written, nothing is created.
func TestRun_MalformedIdempotencyKey(t *testing.T) {
	dir := workdir(t)
	for _, key := range []string{"a\nb", "tab\there", "nul\x00", "\xff\xfe", strings.Repeat("k", tgruntime.MaxIdempotencyKey+1)} {
		db := filepath.Join(dir, "fresh", "a.db")
		r := toolgate(t, "", "run", "file.read", "--allow", "filesystem.read:.", "--input", `{"path":"hello.txt"}`,
			"--idempotency-key", key, "--db", db)
		if r.code != ExitUsage || !strings.Contains(r.stderr, "--idempotency-key") || r.stdout != "" {
			t.Errorf("key %.40q: exit %d\n%s", key, r.code, r.stderr)
		}
		if _, err := os.Stat(filepath.Dir(db)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("key %.40q: the refused run created %s (%v)", key, filepath.Dir(db), err)
		}
	}
	// The longest key, and one of printable non-ASCII text, run.
	for _, key := range []string{strings.Repeat("k", tgruntime.MaxIdempotencyKey), "clé été"} {
		r := toolgate(t, "", "run", "file.read", "--allow", "filesystem.read:.", "--input", `{"path":"hello.txt"}`, "--idempotency-key", key)
		if r.code != ExitCompleted {
			t.Errorf("key %.40q: exit %d\n%s", key, r.code, r.stderr)
		}
	}
}

// The CLI's check refuses exactly the keys the runtime refuses.
func TestCheckIdempotencyKey_AgreesWithRuntime(t *testing.T) {
	rt, err := tgruntime.Open(filepath.Join(t.TempDir(), "toolgate.db"), &tgruntime.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	keys := []string{"k", "with space", "a\nb", "\r", "\t", "\x7f", "\u00a0", "\u200b", "\u2028", "\ufffd", "\xff", "é", "日本",
		"emoji 🙂", strings.Repeat("x", tgruntime.MaxIdempotencyKey), strings.Repeat("x", tgruntime.MaxIdempotencyKey+1),
		strings.Repeat("é", tgruntime.MaxIdempotencyKey/2+1)}
	for _, key := range keys {
		_, err := rt.Execute(context.Background(), tgruntime.Invocation{Tool: "file.read", Input: []byte(`{"path":"x"}`), IdempotencyKey: key})
		var ke *tgruntime.IdempotencyError
		runtimeRefuses := errors.As(err, &ke) && ke.Code == "idempotency_invalid"
		if cliRefuses := checkIdempotencyKey(key) != nil; cliRefuses != runtimeRefuses {
			t.Errorf("key %.40q: the CLI refuses it: %v, the runtime: %v (%v)", key, cliRefuses, runtimeRefuses, err)
		}
	}
}

// A command refused before it could do anything does not create the
// database (or its directory); nor does an inspection.
func TestRefused_CreatesNoDatabase(t *testing.T) {
	dir := workdir(t)
	const (
		id   = "0b8f9a43-3c1e-4d52-9a6e-2f4c7d1b5e60" // no such intent
		hash = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	)
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"run", "nosuch.tool"}, ExitUsage, "tool not found"},
		{[]string{"run", "file.read@9.9.9"}, ExitUsage, "version not found"},
		{[]string{"run", "file.read", "--idempotency-key", "a\nb"}, ExitUsage, "--idempotency-key"},
		{[]string{"run", "file.read", "--principal", "bob\nCOMPLETED"}, ExitUsage, "not printable"},
		{[]string{"run", "file.read", "--call-id", strings.Repeat("c", 129)}, ExitUsage, "longer than 128"},
		{[]string{"run", "--intent", "nope", "--hash", hash}, ExitUsage, "malformed"},
		{[]string{"run", "--intent", id, "--hash", "abc"}, ExitUsage, "malformed"},
		{[]string{"run", "--intent", id, "--hash", hash}, ExitUsage, "no database"},
		{[]string{"intent", "propose", "nosuch.tool"}, ExitUsage, "tool not found"},
		{[]string{"intent", "propose", "file.read", "--input", `{"path":7}`}, ExitFailed, "invalid input"},
		{[]string{"intent", "show", id}, ExitUsage, "no database"},
		{[]string{"intent", "show", "nope"}, ExitUsage, "malformed"},
		{[]string{"intent", "list"}, ExitCompleted, ""},
		{[]string{"intent", "list", "--json"}, ExitCompleted, ""},
		{[]string{"intent", "approve", id, "--yes"}, ExitUsage, "no database"},
		{[]string{"intent", "approve", "nope", "--yes"}, ExitUsage, "malformed"},
		{[]string{"intent", "reject", id, "--reason", "no"}, ExitUsage, "no database"},
		{[]string{"executions"}, ExitCompleted, ""},
		{[]string{"show", id}, ExitUsage, "no execution"},
		{[]string{"stats"}, ExitCompleted, ""},
		{[]string{"audit", "verify"}, ExitCompleted, ""},
		{[]string{"audit", "tail"}, ExitCompleted, ""},
	}
	db := filepath.Join(dir, "fresh", "f.db")
	for _, tc := range cases {
		r := toolgate(t, "", append(tc.args, "--db", db)...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%q: exit %d, want %d and %q\n%s", tc.args, r.code, tc.code, tc.want, r.stderr)
		}
		if _, err := os.Stat(filepath.Dir(db)); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%q created %s (%v)", tc.args, filepath.Dir(db), err)
		}
	}
	if r := toolgate(t, "", "intent", "list", "--json", "--db", db); strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("intent list --json without a database: %q", r.stdout)
	}
}
