package runtime_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/testdb"
	"github.com/toolgate/toolgate/internal/testkit"
	"github.com/toolgate/toolgate/lifecycle"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
	"github.com/toolgate/toolgate/txn"
)

func TestRuntime_CloseRefusesNewWork(t *testing.T) {
	rt, _ := openRuntime(t, nil, echo("test.echo"))
	if err := rt.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Execute(context.Background(), invoke("test.echo", `{"msg":"x"}`)); !errors.Is(err, tgruntime.ErrClosed) {
		t.Fatalf("Execute after Close = %v, want ErrClosed", err)
	}
	if err := rt.Close(context.Background()); err != nil {
		t.Fatalf("second Close = %v", err)
	}
}

// Close waits for running invocations; when its context ends first, they
// are aborted and recorded before the database closes.
func TestRuntime_CloseAbortsInFlight(t *testing.T) {
	started := make(chan struct{}, 1)
	testkit.CloseFails(t, "it closes the runtime with a context that ends while a call runs, and checks Close's DeadlineExceeded itself")
	rt, path := openRuntime(t, nil, tool(decl("test.hang"), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
		env.State.Put("test", "last", []byte("dirty"))
		started <- struct{}{}
		<-ctx.Done()
		return msg{}, ctx.Err()
	}))
	type ret struct {
		res *tgruntime.Result
		err error
	}
	done := make(chan ret, 1)
	go func() {
		res, err := rt.Execute(context.Background(), invoke("test.hang", `{"msg":"x"}`))
		done <- ret{res, err}
	}()
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := rt.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close = %v, want DeadlineExceeded", err)
	}
	r := <-done
	if !errors.Is(r.err, tgruntime.ErrClosed) || r.res.State != lifecycle.RolledBack {
		t.Fatalf("in-flight invocation: %v, %v", r.res.State, r.err)
	}
	store, err := txn.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	recs, err := store.List(context.Background(), txn.Filter{})
	if err != nil || len(recs) != 1 || recs[0].State != "ROLLED_BACK" {
		t.Fatalf("records after close: %+v, %v", recs, err)
	}
	if _, ok, _ := store.StateValue(context.Background(), "test", "last"); ok {
		t.Fatal("aborted invocation's write survived")
	}
}

// A commit that fails (here: the store closed under a running tool) ends
// the attempt ROLLED_BACK with a StateError, never COMPLETED.
func TestExecute_CommitFailure(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	rt, path := openRuntime(t, nil, tool(decl("test.slow"), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
		close(started)
		<-release
		return in, nil
	}))
	type ret struct {
		res *tgruntime.Result
		err error
	}
	done := make(chan ret, 1)
	go func() {
		res, err := rt.Execute(context.Background(), invoke("test.slow", `{"msg":"x"}`))
		done <- ret{res, err}
	}()
	<-started
	if err := tgruntime.StoreOf(rt).Close(); err != nil {
		t.Fatal(err)
	}
	close(release)
	r := <-done
	var se *tgruntime.StateError
	if !errors.As(r.err, &se) || se.Op != "commit" || !errors.Is(r.err, tgruntime.ErrState) {
		t.Fatalf("err = %v, want commit StateError", r.err)
	}
	if r.res.State != lifecycle.RolledBack || r.res.Output != nil {
		t.Fatalf("state %s output %s", r.res.State, r.res.Output)
	}
	// The store was gone, so the rollback record could not be written either:
	// the error says so, and the file still shows the claim, EXECUTING, never
	// COMPLETED, until the next runtime.Open recovers it.
	if !errors.As(r.err, &se) || !strings.Contains(r.err.Error(), "rollback") {
		t.Fatalf("err = %v, want the failed rollback record reported too", r.err)
	}
	rt.Close(context.Background())
	store, err := txn.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	rec, err := store.Get(context.Background(), r.res.ExecutionID)
	if err != nil || rec.State != "EXECUTING" {
		t.Fatalf("stored record: %+v, %v", rec, err)
	}
	store.Close()
	rt2, err := tgruntime.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rt2.Close(context.Background())
	rec, err = rt2.Execution(context.Background(), r.res.ExecutionID)
	if err != nil || rec.State != "ROLLED_BACK" || rec.Error.Code != "interrupted" {
		t.Fatalf("after recovery: %+v, %v", rec, err)
	}
	if got := statePath(rec); !slices.Equal(got, pathAborted) {
		t.Fatalf("recovered path %v, want %v", got, pathAborted)
	}
	checkAudit(t, rt2, rec) // the claim's events, then the recovery's
}

func TestOpen_Errors(t *testing.T) {
	dir := t.TempDir()
	if _, err := tgruntime.Open(filepath.Join(dir, "x.db"), &tgruntime.Options{MaxConcurrent: -1}); err == nil {
		t.Fatal("Open accepted negative MaxConcurrent")
	}
	path := filepath.Join(dir, "locked.db")
	rt, err := tgruntime.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	if _, err := tgruntime.Open(path, &tgruntime.Options{OpenTimeout: 10 * time.Millisecond}); !errors.Is(err, txn.ErrLocked) {
		t.Fatalf("second Open = %v, want ErrLocked", err)
	}
}

// Open with no registry serves the built-in tools.
func TestOpen_DefaultRegistry(t *testing.T) {
	rt, err := tgruntime.Open(testdb.Path(t, "d.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	if !rt.Registry().Frozen() {
		t.Fatal("registry not frozen")
	}
	if _, err := rt.Registry().Lookup("file.read", ""); err != nil {
		t.Fatal(err)
	}
}
