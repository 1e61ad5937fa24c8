package runtime_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/txn"
)

// A real I/O failure poisons the store and the runtime refuses further work.
// TestPoisonChild (re-executed as a child) lowers its own RLIMIT_FSIZE so the
// database file cannot grow (EFBIG), then executes until a commit fails. It
// must then refuse every later invocation with a StateError naming the
// poisoned store; the parent checks that, and that reopening recovers.
//
// The limit is set in the child process only: the runtime itself never
// calls setrlimit on its own process.
func TestPoisonedStore(t *testing.T) {
	db := filepath.Join(t.TempDir(), "p.db")
	cmd := exec.Command(os.Args[0], "-test.run=^TestPoisonChild$")
	cmd.Env = append(os.Environ(), "TOOLGATE_POISON_CHILD="+db)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	for _, want := range []string{"FAILED-COMMIT", "REFUSED " + txn.ErrPoisoned.Error()} {
		if !bytes.Contains(out, []byte(want)) {
			t.Fatalf("child output lacks %q:\n%s", want, out)
		}
	}
	t.Logf("child:\n%s", out)
	// Reopened without the limit, the store works again and nothing is left
	// EXECUTING.
	rt, err := tgruntime.Open(db, &tgruntime.Options{Registry: registry(t), Grants: grantAll})
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer rt.Close(context.Background())
	if _, err := rt.Execute(context.Background(), invoke("test.echo", `{"msg":"after"}`)); err != nil {
		t.Fatalf("after reopening: %v", err)
	}
	if recs, _ := rt.Executions(context.Background(), txn.Filter{State: "EXECUTING"}); len(recs) != 0 {
		t.Fatalf("%d attempts left EXECUTING", len(recs))
	}
}

// TestPoisonChild is the child half of TestPoisonedStore; it does nothing
// unless TOOLGATE_POISON_CHILD names a database.
func TestPoisonChild(t *testing.T) {
	db := os.Getenv("TOOLGATE_POISON_CHILD")
	if db == "" {
		return
	}
	signal.Ignore(syscall.SIGXFSZ) // a write past the limit then fails with EFBIG
	rt, err := tgruntime.Open(db, &tgruntime.Options{Registry: registry(t), Grants: grantAll})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	fi, err := os.Stat(db)
	if err != nil {
		t.Fatal(err)
	}
	// The file may not grow past its current size.
	lim := syscall.Rlimit{Cur: uint64(fi.Size()), Max: uint64(fi.Size())}
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &lim); err != nil {
		t.Fatal(err)
	}
	big := `{"msg":"` + strings.Repeat("x", 60) + `"}`
	var failed error
	for i := 0; i < 100000 && failed == nil; i++ {
		if _, err := rt.Execute(context.Background(), invoke("test.echo", big)); err != nil {
			failed = err
		}
	}
	if !errors.Is(failed, tgruntime.ErrState) {
		t.Fatalf("no commit failed, or not with a StateError: %v", failed)
	}
	os.Stdout.WriteString("FAILED-COMMIT " + failed.Error() + "\n")
	_, err = rt.Execute(context.Background(), invoke("test.echo", `{"msg":"again"}`))
	if !errors.Is(err, txn.ErrPoisoned) || !errors.Is(err, tgruntime.ErrState) {
		t.Fatalf("a poisoned runtime ran an invocation: %v", err)
	}
	os.Stdout.WriteString("REFUSED " + txn.ErrPoisoned.Error() + "\n")
}
