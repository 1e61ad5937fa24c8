package boltstore_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/wal"
	"github.com/toolgate/toolgate/internal/wal/crashfile"
	"github.com/toolgate/toolgate/txn"
	"github.com/toolgate/toolgate/txn/boltstore"
	"github.com/toolgate/toolgate/txn/storetest"
)

// Thousands of crashes, each of a random workload of concurrent writers
// (final records, claims, commits with a state write, rollbacks, claims
// left running) on a store whose log forgets what was not synced, and
// which checkpoints every few groups. The crash comes at a random sync of
// the log: before it takes effect, just after, or after it failed (the
// store is then poisoned); or at rest once the workload is done. It keeps
// the file as its last checkpoint left it and of the log a random mix of
// what was not synced (crashfile). After each, the store reopened and
// recovered shows:
//   - every write acknowledged before the crash: its record in its state,
//     its state value;
//   - every claim acknowledged: its id taken for good (a new claim of it is
//     refused: nothing that must not run twice can), finished as ROLLED_BACK
//     unless its commit made it;
//   - nothing left EXECUTING, and what is there atomic (a completed call's
//     state write present, a rolled-back one's absent);
//   - an audit chain and records that audit verify accepts, and a store
//     that takes new writes.
func TestCrash_AtEverySync(t *testing.T) {
	runs := 2000
	if testing.Short() {
		runs = 200
	}
	logs := map[string]*crashfile.File{}
	var mu sync.Mutex
	restore := boltstore.SetCrashTest(func(path string, applied uint64) (*wal.Log, []wal.Entry, error) {
		mu.Lock()
		f := logs[path]
		mu.Unlock()
		if f == nil {
			return nil, nil, fmt.Errorf("no log for %s", path)
		}
		return wal.OpenFile(f, applied)
	}, 2048)
	defer restore()
	modes := map[string]int{}
	for run := range runs {
		dir := filepath.Join(t.TempDir())
		mode := crashRun(t, run, dir, func(path string, f *crashfile.File) {
			mu.Lock()
			logs[boltstore.WALPath(path)] = f
			mu.Unlock()
		})
		modes[mode]++
	}
	t.Logf("crashes: %v", modes)
	for _, m := range []string{"before a sync", "after a sync", "at a failed sync", "at rest"} {
		if modes[m] == 0 {
			t.Errorf("no run crashed %s", m)
		}
	}
}

// acked is what the workload was told had been written, before the crash.
type acked struct {
	mu      sync.Mutex
	records map[string]string // id -> its state as acknowledged ("EXECUTING": a claim)
	state   map[string]string // key in namespace "s" -> value
}

func (a *acked) set(m map[string]string, k, v string) {
	a.mu.Lock()
	m[k] = v
	a.mu.Unlock()
}

var t0 = time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)

func record(id, state string) *txn.Record {
	return &txn.Record{ExecutionID: id, CallID: "call-" + id, Attempt: 1, ToolID: "tool", ToolVersion: "1.0.0",
		State: state, Transitions: []txn.Transition{{From: "AUTHORIZED", To: state, Event: "run", At: t0}}, StartedAt: t0}
}

func event(s string) txn.AuditEvent { return txn.AuditEvent{Data: []byte(`{"what":"` + s + `"}`)} }

func crashRun(t *testing.T, run int, dir string, register func(string, *crashfile.File)) (mode string) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(uint64(run), 29))
	path := filepath.Join(dir, "toolgate.db")
	live := crashfile.New()
	register(path, live)

	var (
		crashed   atomic.Bool
		boltImage []byte
		logImage  *crashfile.File
		syncs     atomic.Int32
	)
	trigger := int32(1 + rng.IntN(45))
	if run%25 == 24 {
		trigger = math.MaxInt32 // one run in 25 at least crashes at rest
	}
	switch rng.IntN(3) {
	case 0:
		mode = "before a sync"
	case 1:
		mode = "after a sync"
	default:
		mode = "at a failed sync"
	}
	crashRng := rand.New(rand.NewPCG(uint64(run), 31))
	take := func() { // under the store's lock: no checkpoint is running
		if crashed.Load() {
			return
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("run %d: %v", run, err)
		}
		boltImage, logImage = b, live.Crash(crashRng)
		crashed.Store(true)
	}
	live.BeforeSync = func() {
		n := syncs.Add(1)
		switch {
		case n == trigger && mode == "before a sync":
			take()
		case n == trigger && mode == "at a failed sync":
			live.FailSync = syscall.EIO
		}
	}
	live.AfterSync = func() {
		if syncs.Load() == trigger && mode != "before a sync" {
			take()
		}
	}

	s, err := txn.Open(path, &txn.Options{})
	if err != nil {
		t.Fatalf("run %d: open: %v", run, err)
	}
	a := &acked{records: map[string]string{}, state: map[string]string{}}
	var wg sync.WaitGroup
	for g := range 2 {
		grng := rand.New(rand.NewPCG(uint64(run), uint64(g)))
		wg.Go(func() {
			for i := range 12 {
				if crashed.Load() {
					return
				}
				id := fmt.Sprintf("r%d-%02d", g, i)
				switch grng.IntN(3) {
				case 0:
					if s.Put(ctx, record(id, "DENIED"), event("denied "+id)) == nil && !crashed.Load() {
						a.set(a.records, id, "DENIED")
					}
				default:
					tx, err := s.Begin(ctx, record(id, "EXECUTING"), event("begin "+id))
					if err != nil {
						continue
					}
					if !crashed.Load() {
						a.set(a.records, id, "EXECUTING")
					}
					switch grng.IntN(4) {
					case 0, 1:
						tx.Put("s", id, []byte("v-"+id))
						if tx.Commit(ctx, record(id, "COMPLETED"), event("done "+id)) == nil && !crashed.Load() {
							a.set(a.records, id, "COMPLETED")
							a.set(a.state, id, "v-"+id)
						}
					case 2:
						if tx.Rollback(ctx, record(id, "ROLLED_BACK"), event("undone "+id)) == nil && !crashed.Load() {
							a.set(a.records, id, "ROLLED_BACK")
						}
					default: // left running: the crash interrupts it
					}
				}
			}
		})
	}
	wg.Wait()
	if !crashed.Load() {
		mode = "at rest"
		take()
	}
	s.Close() // the crash images are taken: what this writes is not theirs

	// The machine comes back: the file as its last checkpoint left it,
	// and what the log kept.
	after := filepath.Join(dir, "after.db")
	if err := os.WriteFile(after, boltImage, 0o600); err != nil {
		t.Fatal(err)
	}
	register(after, logImage)
	s2, err := txn.Open(after, &txn.Options{})
	if err != nil {
		t.Fatalf("run %d (crash %s at sync %d): reopen: %v", run, mode, trigger, err)
	}
	defer s2.Close()
	if _, err := s2.Recover(ctx, func(r *txn.Record) ([]txn.AuditEvent, error) {
		r.State = "ROLLED_BACK"
		r.Transitions = append(r.Transitions, txn.Transition{From: "EXECUTING", To: "ROLLED_BACK", Event: "interrupted", At: t0})
		return []txn.AuditEvent{event("interrupted " + r.ExecutionID)}, nil
	}); err != nil {
		t.Fatalf("run %d: recover: %v", run, err)
	}
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("run %d (crash %s at sync %d): %s", run, mode, trigger, fmt.Sprintf(format, args...))
	}
	for id, want := range a.records {
		r, err := s2.Get(ctx, id)
		if err != nil {
			fail("acknowledged %s %s is gone: %v", want, id, err)
		}
		switch {
		case want == "EXECUTING" && r.State != "ROLLED_BACK" && r.State != "COMPLETED":
			fail("claim %s recovered as %s", id, r.State)
		case want != "EXECUTING" && r.State != want:
			fail("%s acknowledged %s, found %s", id, want, r.State)
		}
		if want != "DENIED" {
			if _, err := s2.Begin(ctx, record(id, "EXECUTING")); !errors.Is(err, txn.ErrExists) {
				fail("claim %s taken again after the crash: %v", id, err)
			}
		}
	}
	for k, v := range a.state {
		if got, ok, err := s2.StateValue(ctx, "s", k); err != nil || !ok || string(got) != v {
			fail("acknowledged state %s=%s found %q %v %v", k, v, got, ok, err)
		}
	}
	state, err := s2.StateValues(ctx, "s")
	if err != nil {
		fail("%v", err)
	}
	err = s2.WalkRecords(ctx, "", func(id string, r *txn.Record, err error) bool {
		switch {
		case err != nil:
			fail("record %s: %v", id, err)
		case r.State == "EXECUTING":
			fail("%s left EXECUTING after recovery", id)
		case r.State == "COMPLETED" && string(state[id]) != "v-"+id:
			fail("%s COMPLETED without its state write", id)
		case r.State == "ROLLED_BACK" && state[id] != nil:
			fail("%s ROLLED_BACK with its state write", id)
		}
		return true
	})
	if err != nil {
		fail("%v", err)
	}
	if p := storetest.Verify(ctx, s2); len(p) > 0 {
		fail("audit verify: %v", p)
	}
	if err := s2.Put(ctx, record("new", "DENIED"), event("after the crash")); err != nil {
		fail("a write after recovery: %v", err)
	}
	if p := storetest.Verify(ctx, s2); len(p) > 0 {
		fail("audit verify after a new write: %v", p)
	}
	return mode
}

// The log's disk fills up, or fails, at a write or at a sync: the write
// fails with an error that says what to fix, the store refuses every later
// one, and reopened (once the disk has room) it holds every write
// acknowledged before, nothing of the failed one, and a chain audit verify
// accepts.
func TestLog_DiskFullOrFailing(t *testing.T) {
	logs := map[string]*crashfile.File{}
	restore := boltstore.SetCrashTest(func(path string, applied uint64) (*wal.Log, []wal.Entry, error) {
		return wal.OpenFile(logs[path], applied)
	}, 8<<20)
	defer restore()
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		fail func(*crashfile.File)
		want string
	}{
		{"write ENOSPC", func(f *crashfile.File) { f.FailWrite = syscall.ENOSPC }, "full: free space on it, then reopen"},
		{"sync ENOSPC", func(f *crashfile.File) { f.FailSync = syscall.ENOSPC }, "full: free space on it, then reopen"},
		{"write EROFS", func(f *crashfile.File) { f.FailWrite = syscall.EROFS }, "read-only: make it writable, then reopen"},
		{"sync EIO", func(f *crashfile.File) { f.FailSync = syscall.EIO }, "check the disk, then reopen"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "toolgate.db")
			live := crashfile.New()
			logs[boltstore.WALPath(path)] = live
			s, err := txn.Open(path, &txn.Options{})
			if err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				if err := s.Put(ctx, record(fmt.Sprint("ok", i), "DENIED"), event("ok")); err != nil {
					t.Fatal(err)
				}
			}
			tc.fail(live)
			err = s.Put(ctx, record("lost", "DENIED"), event("lost"))
			if !errors.Is(err, txn.ErrPoisoned) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("the write that failed: %v; want ErrPoisoned saying %q", err, tc.want)
			}
			if err := s.Put(ctx, record("after", "DENIED")); !errors.Is(err, txn.ErrPoisoned) {
				t.Fatalf("a write after the failure: %v, want ErrPoisoned", err)
			}
			s.Close()
			// The machine loses what was not synced; the disk has room again.
			s2 := reopenAfterCrash(t, path, live, logs, 1)
			for i := range 3 {
				if _, err := s2.Get(ctx, fmt.Sprint("ok", i)); err != nil {
					t.Errorf("acknowledged ok%d lost: %v", i, err)
				}
			}
			if _, err := s2.Get(ctx, "after"); !errors.Is(err, txn.ErrNotFound) {
				t.Errorf("a write refused after the failure is there: %v", err)
			}
			if p := storetest.Verify(ctx, s2); len(p) > 0 {
				t.Errorf("audit verify: %v", p)
			}
		})
	}
}

// A checkpoint that fails (here its commit of the file, as a full disk
// would fail it) comes after the group that triggered it is durable: that
// write succeeds, the store refuses what follows, and reopened it holds the
// write.
func TestLog_CheckpointFails(t *testing.T) {
	logs := map[string]*crashfile.File{}
	restore := boltstore.SetCrashTest(func(path string, applied uint64) (*wal.Log, []wal.Entry, error) {
		return wal.OpenFile(logs[path], applied)
	}, 1) // every group checkpoints
	defer restore()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "toolgate.db")
	live := crashfile.New()
	logs[boltstore.WALPath(path)] = live
	s, err := txn.Open(path, &txn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	restoreFault := boltstore.SetCheckpointFault(func() error { return syscall.ENOSPC })
	err = s.Put(ctx, record("durable", "DENIED"), event("durable"))
	restoreFault()
	if err != nil {
		t.Fatalf("the write whose checkpoint failed: %v, want success (it is in the log)", err)
	}
	if err := s.Put(ctx, record("after", "DENIED")); !errors.Is(err, txn.ErrPoisoned) {
		t.Fatalf("a write after the failed checkpoint: %v, want ErrPoisoned", err)
	}
	s.Close()
	s2 := reopenAfterCrash(t, path, live, logs, 3)
	if _, err := s2.Get(ctx, "durable"); err != nil {
		t.Fatalf("the acknowledged write is gone: %v", err)
	}
	if p := storetest.Verify(ctx, s2); len(p) > 0 {
		t.Errorf("audit verify: %v", p)
	}
}

// reopenAfterCrash opens, as the machine that comes back would, a copy of
// the file at path with what its log live kept of what was not synced (a
// crash drawn from seed), registered in logs for the crash test's opener.
// The store is closed at cleanup.
func reopenAfterCrash(t *testing.T, path string, live *crashfile.File, logs map[string]*crashfile.File, seed uint64) *txn.Store {
	t.Helper()
	after := filepath.Join(filepath.Dir(path), "after.db")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(after, b, 0o600); err != nil {
		t.Fatal(err)
	}
	logs[boltstore.WALPath(after)] = live.Crash(rand.New(rand.NewPCG(seed, seed+1)))
	s, err := txn.Open(after, &txn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
