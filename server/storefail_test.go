package server_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/internal/testdb"
	"github.com/toolgate/toolgate/server"
)

// lockedBuffer is a bytes.Buffer safe for the server's handlers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// smallFS mounts a 1 MiB tmpfs at a new directory for the test: a real file
// system that fills up. It needs the privilege to mount (root in the
// container the tests run in); without it the test is skipped.
func smallFS(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "small")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("a full file system needs the privilege to mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir
}

// fill writes a file at path until the file system is full.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 4096)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			return
		}
	}
}

func (f *fixture) readyz(t *testing.T) int {
	t.Helper()
	resp, err := f.http.Client().Get(f.http.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// A store that fails (the file system is full): the server logs the cause
// once, clearly, without telling the operator to reopen while the disk is
// still full; it answers 503 and /readyz reports not ready from then on,
// even once space is freed, since the store refuses all work until it is
// reopened; restarted with space, it is ready and runs again.
func TestServer_StoreFailureNotReady(t *testing.T) {
	testdb.BboltOnly(t, "it fills the file system under the bbolt file")
	dir := smallFS(t)
	var logs lockedBuffer
	opts := &server.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	db := filepath.Join(dir, "toolgate.db")
	f := newFixtureAt(t, db, nil, opts, false)
	agent := f.client(t, agentToken)
	ctx := context.Background()
	if _, err := agent.Execute(ctx, inv("test.echo", `{"msg":"before"}`)); err != nil {
		t.Fatal(err)
	}
	if code := f.readyz(t); code != http.StatusOK {
		t.Fatalf("readyz before the failure: %d", code)
	}

	fill(t, filepath.Join(dir, "filler"))
	var failed error
	for i := 0; i < 1000 && failed == nil; i++ {
		_, failed = agent.Execute(ctx, inv("test.echo", fmt.Sprintf(`{"msg":"full-%d-%s"}`, i, strings.Repeat("x", 40))))
	}
	var e *client.Error
	if !errors.As(failed, &e) || e.Status != http.StatusServiceUnavailable || !strings.HasSuffix(e.Type, "/store-unavailable") {
		t.Fatalf("no call failed on the full file system, or not with 503 store-unavailable: %v", failed)
	}
	for range 3 {
		if _, err := agent.Execute(ctx, inv("test.echo", `{"msg":"again"}`)); status(err) != http.StatusServiceUnavailable {
			t.Errorf("a call after the store failed: %v; want 503", err)
		}
	}
	if code := f.readyz(t); code != http.StatusServiceUnavailable {
		t.Errorf("readyz after the store failed: %d; want 503", code)
	}
	log := logs.String()
	if n := strings.Count(log, "no space left on device"); n != 1 {
		t.Errorf("the cause is logged %d times; want once:\n%s", n, log)
	}
	if !strings.Contains(log, "level=ERROR") || !strings.Contains(log, "free space") {
		t.Errorf("the log does not say what failed and what to do:\n%s", log)
	}
	if strings.Contains(log, "; reopen the database to recover") {
		t.Errorf("the log tells the operator to reopen while the disk is full:\n%s", log)
	}

	// Space is back, but the store refuses work until it is reopened: the
	// server stays not ready rather than flap.
	if err := os.Remove(filepath.Join(dir, "filler")); err != nil {
		t.Fatal(err)
	}
	if code := f.readyz(t); code != http.StatusServiceUnavailable {
		t.Errorf("readyz with space back, before a restart: %d; want 503", code)
	}
	f.http.Close()
	f.rt.Close(ctx)
	again := newFixtureAt(t, db, nil, nil, false)
	if code := again.readyz(t); code != http.StatusOK {
		t.Errorf("readyz after a restart with space: %d; want 200", code)
	}
	if _, err := again.client(t, agentToken).Execute(ctx, inv("test.echo", `{"msg":"after"}`)); err != nil {
		t.Errorf("a call after the restart: %v", err)
	}
}
