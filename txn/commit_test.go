package txn_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/toolgate/toolgate/txn"
)

func dump(t *testing.T, s *txn.Store) map[string]map[string]string {
	t.Helper()
	d, err := txn.DumpState(s)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// Atomicity: a failure injected at each step of a commit leaves state,
// execution record and claim exactly as before the commit.
func TestTx_Commit_Atomic(t *testing.T) {
	for _, step := range []string{txn.StepCheckReads, txn.StepApplyWrite, txn.StepRecord, txn.StepAudit, txn.StepCommit} {
		t.Run(step, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "a.db")
			s := openStoreAt(t, path)
			ctx := context.Background()
			seed, _ := s.Begin(ctx, executing("seed"))
			seed.Put("ns", "a", []byte("1"))
			seed.Put("ns", "b", []byte("2"))
			if err := seed.Commit(ctx, finalOf("seed"), txn.AuditEvent{Data: []byte(`{"n":1}`)}); err != nil {
				t.Fatal(err)
			}
			before := dump(t, s)
			auditBefore, _ := s.AuditLog(ctx, 0, 0)

			tx, err := s.Begin(ctx, executing("x"))
			if err != nil {
				t.Fatal(err)
			}
			tx.Get("ns", "a")
			tx.Put("ns", "a", []byte("changed"))
			tx.Delete("ns", "b")
			tx.Put("other", "c", []byte("new"))
			injected := errors.New("injected at " + step)
			txn.SetFailpoint(s, func(st string) error {
				if st == step {
					return injected
				}
				return nil
			})
			err = tx.Commit(ctx, finalOf("x"), txn.AuditEvent{Data: []byte(`{"n":2}`)}, txn.AuditEvent{Data: []byte(`{"n":3}`)})
			if err == nil {
				t.Fatal("Commit succeeded despite the failpoint")
			}
			txn.SetFailpoint(s, nil)
			if step == txn.StepCommit {
				// The update itself failed: the store is poisoned, and only a
				// reopen tells what is durable.
				if !errors.Is(err, txn.ErrPoisoned) {
					t.Fatalf("err = %v, want ErrPoisoned", err)
				}
				if _, err := s.Get(ctx, "x"); !errors.Is(err, txn.ErrPoisoned) {
					t.Fatalf("poisoned store served a read: %v", err)
				}
				s.Close()
				s = openStoreAt(t, path)
			} else if !errors.Is(err, injected) || !tx.Active() {
				t.Fatalf("err = %v (active %v), want the injected error and an active tx", err, tx.Active())
			}
			if after := dump(t, s); !reflect.DeepEqual(before, after) {
				t.Fatalf("state changed by a failed commit:\nbefore %v\nafter  %v", before, after)
			}
			rec, err := s.Get(ctx, "x")
			if err != nil || rec.State != "EXECUTING" {
				t.Fatalf("record after failed commit: %+v, %v", rec, err)
			}
			if claims, _ := txn.Claims(s); !reflect.DeepEqual(claims, []string{"x"}) {
				t.Fatalf("claims = %v, want [x]", claims)
			}
			if auditAfter, _ := s.AuditLog(ctx, 0, 0); !reflect.DeepEqual(auditBefore, auditAfter) {
				t.Fatalf("audit log changed by a failed commit: %d -> %d entries", len(auditBefore), len(auditAfter))
			}
			if step == txn.StepCommit {
				return // the store was reopened; the Tx belonged to the poisoned one
			}
			// And without the failpoint the same commit lands whole.
			if err := tx.Commit(ctx, finalOf("x"), txn.AuditEvent{Data: []byte(`{"n":2}`)}); err != nil {
				t.Fatal(err)
			}
			if log, _ := s.AuditLog(ctx, 0, 0); len(log) != len(auditBefore)+1 {
				t.Fatalf("audit log has %d entries after the commit", len(log))
			}
		})
	}
}

// Rollback exactness, as a property over random write-sets: whatever a
// transaction buffered, a rollback or a failed commit leaves the state
// byte-identical.
func TestTx_Rollback_Property(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	key := func() string { return fmt.Sprintf("k%02d", rng.IntN(20)) }
	ns := func() string { return []string{"a", "b", "c/d"}[rng.IntN(3)] }
	value := func() []byte {
		v := make([]byte, rng.IntN(64))
		for i := range v {
			v[i] = byte(rng.IntN(256))
		}
		return v
	}
	for i := range 300 {
		id := fmt.Sprintf("e%d", i)
		tx, err := s.Begin(ctx, executing(id))
		if err != nil {
			t.Fatal(err)
		}
		for range rng.IntN(30) {
			switch rng.IntN(4) {
			case 0:
				tx.Delete(ns(), key())
			case 1:
				tx.Get(ns(), key())
			default:
				tx.Put(ns(), key(), value())
			}
		}
		if i%3 == 0 { // every third commits, so the state is not empty
			if err := tx.Commit(ctx, finalOf(id)); err != nil {
				t.Fatal(err)
			}
			continue
		}
		before := dump(t, s)
		if i%3 == 1 {
			err = tx.Rollback(ctx, newRecord(id, "t", "ROLLED_BACK"))
		} else {
			txn.SetFailpoint(s, func(st string) error {
				if st == txn.StepRecord {
					return errors.New("injected")
				}
				return nil
			})
			if tx.Commit(ctx, finalOf(id)) == nil {
				t.Fatal("commit succeeded despite the failpoint")
			}
			txn.SetFailpoint(s, nil)
			err = tx.Rollback(ctx, newRecord(id, "t", "ROLLED_BACK"))
		}
		if err != nil {
			t.Fatal(err)
		}
		if after := dump(t, s); !reflect.DeepEqual(before, after) {
			t.Fatalf("iteration %d: state not byte-identical after rollback", i)
		}
	}
}

// Group commit: concurrent commits share updates, and one request's
// failing write-set fails only that request.
func TestStore_GroupCommit(t *testing.T) {
	s, err := txn.Open(filepath.Join(t.TempDir(), "g.db"), &txn.Options{}) // fsync on: commits pile up behind it
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	const n = 64
	var fails atomic.Int32
	txn.SetFailpoint(s, func(st string) error {
		if st == txn.StepApplyWrite && fails.CompareAndSwap(0, 1) {
			return errors.New("injected into one write-set")
		}
		return nil
	})
	start := txn.Batches(s)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			id := fmt.Sprintf("g%02d", i)
			tx, err := s.Begin(ctx, executing(id))
			if err != nil {
				errs[i] = err
				return
			}
			tx.Put("g", id, []byte(id))
			if errs[i] = tx.Commit(ctx, finalOf(id)); errs[i] != nil {
				tx.Rollback(ctx, newRecord(id, "t", "ROLLED_BACK"))
			}
		})
	}
	wg.Wait()
	failed := 0
	state, _ := s.StateValues(ctx, "g")
	for i, err := range errs {
		id := fmt.Sprintf("g%02d", i)
		if err != nil {
			failed++
			if _, ok := state[id]; ok {
				t.Errorf("%s failed but its write is present", id)
			}
			continue
		}
		if string(state[id]) != id {
			t.Errorf("%s committed but its write is missing", id)
		}
	}
	if failed != 1 {
		t.Fatalf("%d commits failed, want exactly the one with the injected failure: %v", failed, errs)
	}
	// 2n writes (claims and commits) plus the redone batch: sharing means fewer updates.
	if used := txn.Batches(s) - start; used >= 2*n {
		t.Fatalf("%d bbolt updates for %d writes: no group commit", used, 2*n)
	}
}

// The audit events of a batch are appended as one group, in the same
// update: concurrent writes share groups, the chain stays whole, and the
// events of a request that failed in the batch are not in it.
func TestStore_GroupCommitAudit(t *testing.T) {
	s := openStoreAt(t, filepath.Join(t.TempDir(), "a.db"))
	ctx := context.Background()
	const n = 48
	var fails atomic.Int32
	// While hold is set, the next update waits before it commits: the
	// writes that arrive meanwhile queue behind it and then form one batch,
	// whatever the scheduler does.
	var hold atomic.Pointer[chan struct{}]
	entered := make(chan struct{}, 1)
	txn.SetFailpoint(s, func(st string) error {
		switch st {
		case txn.StepApplyWrite:
			if fails.CompareAndSwap(0, 1) {
				return errors.New("injected into one write-set")
			}
		case txn.StepCommit:
			if h := hold.Swap(nil); h != nil {
				entered <- struct{}{}
				<-*h
			}
		}
		return nil
	})
	// holdWriter holds the writer with a write that carries no audit event,
	// runs start, and lets the writer go once want writes are queued.
	holdWriter := func(id string, start func(), want int) {
		t.Helper()
		release := make(chan struct{})
		hold.Store(&release)
		done := make(chan error, 1)
		go func() {
			_, err := s.Begin(ctx, executing(id))
			done <- err
		}()
		<-entered
		start()
		deadline := time.Now().Add(time.Minute)
		for txn.Queued(s) < want {
			if time.Now().After(deadline) {
				close(release)
				t.Fatalf("%d writes queued behind the held writer, want %d", txn.Queued(s), want)
			}
			time.Sleep(time.Millisecond)
		}
		close(release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	event := func(what, id string) txn.AuditEvent {
		return txn.AuditEvent{Data: []byte(`{"` + what + `":"` + id + `"}`)}
	}
	var wg, claimed sync.WaitGroup
	failed := make([]bool, n)
	commit := make(chan struct{})
	claimed.Add(n)
	holdWriter("hold-claims", func() {
		for i := range n {
			wg.Go(func() {
				id := fmt.Sprintf("a%02d", i)
				tx, err := s.Begin(ctx, executing(id), event("claim", id))
				claimed.Done()
				if err != nil {
					t.Error(err)
					return
				}
				<-commit
				tx.Put("a", id, []byte(id))
				if err := tx.Commit(ctx, finalOf(id), event("commit", id)); err != nil {
					failed[i] = true
					if err := tx.Rollback(ctx, newRecord(id, "t", "ROLLED_BACK"), event("rollback", id)); err != nil {
						t.Error(err)
					}
				}
			})
		}
	}, n)
	// Once every claim has returned, hold the writer again so that the
	// commits queue up as one batch too.
	claimed.Wait()
	holdWriter("hold-commits", func() { close(commit) }, n)
	wg.Wait()
	if got := fails.Load(); got != 1 {
		t.Fatalf("the failpoint fired %d times", got)
	}

	log, err := s.AuditLog(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	var prev [32]byte
	for i, e := range log {
		if e.Seq != uint64(i+1) {
			t.Fatalf("entry %d has seq %d", i+1, e.Seq)
		}
		wantPrev := hex.EncodeToString(prev[:])
		if i == 0 {
			wantPrev = ""
		}
		sum := sha256.Sum256(e.Event)
		link := sha256.Sum256(append(prev[:], sum[:]...))
		if e.PrevHash != wantPrev || e.Hash != hex.EncodeToString(link[:]) {
			t.Fatalf("entry %d breaks the chain: %+v", e.Seq, e)
		}
		prev = link
		seen[string(e.Event)]++
	}
	for i := range n {
		id := fmt.Sprintf("a%02d", i)
		want := map[string]int{"claim": 1, "commit": 1, "rollback": 0}
		if failed[i] {
			want["commit"], want["rollback"] = 0, 1
		}
		for what, count := range want {
			if got := seen[string(event(what, id).Data)]; got != count {
				t.Errorf("%s: %d %s events, want %d", id, got, what, count)
			}
		}
	}
	if len(log) != 2*n {
		t.Errorf("%d events, want %d", len(log), 2*n)
	}
	groups := 0
	err = s.AuditRaw(ctx, func(k, v []byte) error {
		if string(k) != txn.AuditHeadKey {
			groups++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The claims' batch, the commits' batch (the failed write redone
	// without it) and the failed write's rollback: three groups. Without
	// grouping there would be one per write.
	if groups != 3 {
		t.Errorf("%d groups for %d events, want 3: the batches' events were not grouped", groups, len(log))
	}
}

// A damaged audit head fails the writes that carry audit events, with
// ErrCorrupt and nothing of them stored, and not the writes in their batch
// that carry none. A head that was deleted or set back is damaged too: the
// store must not write over the entries stored (which would erase the
// evidence of the tampering).
func TestStore_DamagedAuditHead(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(log *bolt.Bucket) error
	}{
		{"malformed", func(log *bolt.Bucket) error { return log.Put([]byte(txn.AuditHeadKey), []byte("bad")) }},
		{"deleted", func(log *bolt.Bucket) error { return log.Delete([]byte(txn.AuditHeadKey)) }},
		{"set back", func(log *bolt.Bucket) error {
			head := bytes.Clone(log.Get([]byte(txn.AuditHeadKey)))
			binary.BigEndian.PutUint64(head, 1) // the log holds 3 entries, in 3 groups
			return log.Put([]byte(txn.AuditHeadKey), head)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "h.db")
			s := openStoreAt(t, path)
			ctx := context.Background()
			for i := range 3 {
				if err := s.Put(ctx, newRecord(fmt.Sprint("first", i), "t", "FAILED"), txn.AuditEvent{Data: []byte(fmt.Sprintf(`{"n":%d}`, i))}); err != nil {
					t.Fatal(err)
				}
			}
			before := auditRaw(t, s)
			s.Close()
			db, err := bolt.Open(path, 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			err = db.Update(func(tx *bolt.Tx) error { return tc.damage(tx.Bucket([]byte("audit"))) })
			db.Close()
			if err != nil {
				t.Fatal(err)
			}
			s = openStoreAt(t, path)
			damaged := auditRaw(t, s)

			const n = 16
			var wg sync.WaitGroup
			errs := make([]error, 2*n)
			for i := range n {
				wg.Go(func() {
					id := fmt.Sprintf("h%02d", i)
					errs[i] = s.Put(ctx, newRecord(id, "t", "FAILED"), txn.AuditEvent{Data: []byte(`{"n":2}`)})
				})
				wg.Go(func() { errs[n+i] = s.PutState(ctx, "h", fmt.Sprint(i), []byte("v")) })
			}
			wg.Wait()
			for i := range n {
				if !errors.Is(errs[i], txn.ErrCorrupt) {
					t.Errorf("Put with an audit event over a damaged head = %v, want ErrCorrupt", errs[i])
				}
				if _, err := s.Get(ctx, fmt.Sprintf("h%02d", i)); !errors.Is(err, txn.ErrNotFound) {
					t.Errorf("the refused record was stored: %v", err)
				}
				if errs[n+i] != nil {
					t.Errorf("PutState without audit events = %v", errs[n+i])
				}
			}
			if s.Err() != nil {
				t.Fatalf("the store was poisoned: %v", s.Err())
			}
			if after := auditRaw(t, s); !reflect.DeepEqual(after, damaged) {
				t.Errorf("the damaged log changed:\nbefore %q\nafter  %q", damaged, after)
			}
			if len(damaged) < len(before)-1 {
				t.Fatalf("the damage removed more than the head: %q", damaged)
			}
		})
	}
}

// auditRaw returns the audit log's keys and values as stored.
func auditRaw(t *testing.T, s *txn.Store) map[string]string {
	t.Helper()
	m := map[string]string{}
	if err := s.AuditRaw(context.Background(), func(k, v []byte) error { m[string(k)] = string(v); return nil }); err != nil {
		t.Fatal(err)
	}
	return m
}

// A Store poisoned by a failed update refuses everything until reopened.
func TestStore_Poisoned(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.db")
	s := openStoreAt(t, path)
	ctx := context.Background()
	txn.SetFailpoint(s, func(st string) error {
		if st == txn.StepCommit {
			return errors.New("input/output error")
		}
		return nil
	})
	err := s.Put(ctx, newRecord("a", "t", "FAILED"))
	if !errors.Is(err, txn.ErrPoisoned) || s.Err() == nil {
		t.Fatalf("Put = %v, Err = %v; want poisoned", err, s.Err())
	}
	txn.SetFailpoint(s, nil)
	if _, err := s.Begin(ctx, executing("b")); !errors.Is(err, txn.ErrPoisoned) {
		t.Fatalf("Begin on a poisoned store = %v", err)
	}
	if _, err := s.List(ctx, txn.Filter{}); !errors.Is(err, txn.ErrPoisoned) {
		t.Fatalf("List on a poisoned store = %v", err)
	}
	s.Close()
	s = openStoreAt(t, path)
	if s.Err() != nil {
		t.Fatal(s.Err())
	}
	if err := s.Put(ctx, newRecord("a", "t", "FAILED")); err != nil {
		t.Fatalf("after reopen: %v", err)
	}
}

// Claims left by a crash are finished by Recover, once.
func TestStore_Recover(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.db")
	s := openStoreAt(t, path)
	ctx := context.Background()
	tx, _ := s.Begin(ctx, executing("crashed"))
	tx.Put("n", "k", []byte("never"))
	done, _ := s.Begin(ctx, executing("done"))
	done.Commit(ctx, finalOf("done"))
	s.Close() // the process "dies" with "crashed" in EXECUTING

	s = openStoreAt(t, path)
	if claims, _ := txn.Claims(s); !reflect.DeepEqual(claims, []string{"crashed"}) {
		t.Fatalf("claims before recovery: %v", claims)
	}
	recs, err := s.Recover(ctx, func(r *txn.Record) ([]txn.AuditEvent, error) {
		r.State = "ROLLED_BACK"
		r.Error = &txn.ErrorInfo{Type: "ExecutionError", Code: "interrupted", Message: "interrupted"}
		return []txn.AuditEvent{{Data: []byte(`{"state":"ROLLED_BACK"}`)}}, nil
	})
	if err != nil || len(recs) != 1 || recs[0].ExecutionID != "crashed" {
		t.Fatalf("Recover = %v, %v", recs, err)
	}
	if rec, _ := s.Get(ctx, "crashed"); rec.State != "ROLLED_BACK" {
		t.Fatalf("recovered record: %+v", rec)
	}
	if _, found, _ := s.StateValue(ctx, "n", "k"); found {
		t.Fatal("an interrupted transaction's write is present")
	}
	if log, _ := s.AuditLog(ctx, 0, 0); len(log) != 1 || string(log[0].Event) != `{"state":"ROLLED_BACK"}` {
		t.Fatalf("recovery's audit event: %+v", log)
	}
	if recs, _ := s.Recover(ctx, func(*txn.Record) ([]txn.AuditEvent, error) { t.Fatal("recovered twice"); return nil, nil }); len(recs) != 0 {
		t.Fatal("second Recover found claims")
	}
}

func TestTx_Scan(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	seed, _ := s.Begin(ctx, executing("seed"))
	for _, k := range []string{"a/1", "a/2", "a/3", "b/1"} {
		seed.Put("n", k, []byte(k))
	}
	seed.Commit(ctx, finalOf("seed"))

	tx, _ := s.Begin(ctx, executing("x"))
	tx.Put("n", "a/0", []byte("mine"))
	tx.Delete("n", "a/2")
	got, err := tx.Scan("n", "a/", 0)
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{}
	for _, e := range got {
		keys = append(keys, e.Key)
	}
	if !reflect.DeepEqual(keys, []string{"a/0", "a/1", "a/3"}) {
		t.Fatalf("Scan keys %v", keys)
	}
	if lim, _ := tx.Scan("n", "a/", 2); len(lim) != 2 || lim[1].Key != "a/1" {
		t.Fatalf("Scan with limit: %v", lim)
	}
	// A phantom: another commit adds a key under the scanned prefix.
	other, _ := s.Begin(ctx, executing("other"))
	other.Put("n", "a/9", []byte("phantom"))
	if err := other.Commit(ctx, finalOf("other")); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx, finalOf("x")); !errors.Is(err, txn.ErrConflict) {
		t.Fatalf("Commit after a phantom = %v, want ErrConflict", err)
	}
	state, _ := s.StateValues(ctx, "n")
	if _, ok := state["a/0"]; ok || len(state) != 5 {
		t.Fatalf("conflicting commit applied: %v", slices.Sorted(maps.Keys(state)))
	}
}

// The audit chain: numbered without gaps, each entry linked to the one
// before, appended in the same update as the write it accompanies, even
// when writes are group-committed.
func TestStore_AuditChain(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Go(func() {
			id := fmt.Sprintf("a%02d", i)
			ev := func(state string) txn.AuditEvent {
				return txn.AuditEvent{Data: fmt.Appendf(nil, `{"id":%q,"state":%q}`, id, state)}
			}
			tx, err := s.Begin(ctx, executing(id), ev("VALIDATED"), ev("EXECUTING"))
			if err != nil {
				t.Error(err)
				return
			}
			if err := tx.Commit(ctx, finalOf(id), ev("COMPLETED")); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	log, err := s.AuditLog(ctx, 0, 0)
	if err != nil || len(log) != 96 {
		t.Fatalf("%d entries, %v; want 96", len(log), err)
	}
	link := make([]byte, 32)
	for i, e := range log {
		if e.Seq != uint64(i+1) {
			t.Fatalf("entry %d has seq %d", i, e.Seq)
		}
		if (i == 0) != (e.PrevHash == "") || i > 0 && e.PrevHash != log[i-1].Hash {
			t.Fatalf("entry %d not linked to the one before", e.Seq)
		}
		sum := sha256.Sum256(e.Event)
		next := sha256.Sum256(append(link, sum[:]...))
		if hex.EncodeToString(next[:]) != e.Hash {
			t.Fatalf("entry %d: hash does not match its content and predecessor", e.Seq)
		}
		link = next[:]
	}
	if tail, _ := s.AuditLog(ctx, 95, 0); len(tail) != 2 || tail[0].Seq != 95 {
		t.Fatalf("AuditLog(from 95) = %d entries", len(tail))
	}
}

// A panic inside a write's callback fails that write and leaves the store
// usable: the next writes commit and Close returns.
func TestStore_PanicInCommit(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	s.Put(ctx, newRecord("a", "t", "FAILED"))
	tx, _ := s.Begin(ctx, executing("c"))
	tx.Put("n", "k", []byte("v"))
	s.Close()
	s = openStoreAt(t, s.Path())
	_, err := s.Recover(ctx, func(*txn.Record) ([]txn.AuditEvent, error) { panic("boom") })
	if err == nil || !strings.Contains(err.Error(), "panic") {
		t.Fatalf("Recover with a panicking callback = %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Put(ctx, newRecord("b", "t", "FAILED")) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Put after a panicked write: %v", err)
		}
	case <-time.After(10 * time.Second): // a hang guard, not a timing assertion
		t.Fatal("the store is wedged after a panic in a write")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// Namespaces may hold any byte; a scan's conflict check must look at the
// namespace and prefix it scanned.
func TestTx_Scan_NamespaceWithNUL(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	tx, _ := s.Begin(ctx, executing("x"))
	if _, err := tx.Scan("a\x00b", "c", 0); err != nil {
		t.Fatal(err)
	}
	other, _ := s.Begin(ctx, executing("o"))
	other.Put("a\x00b", "c1", []byte("1"))
	if err := other.Commit(ctx, finalOf("o")); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx, finalOf("x")); !errors.Is(err, txn.ErrConflict) {
		t.Fatalf("Commit = %v, want ErrConflict", err)
	}
}

// Concurrent writers, a failed apply that redoes a batch, and pooled
// buffers: every stored record and audit event is exactly what its writer
// gave, and the chain links in order.
func TestStore_GroupCommitStoresExactBytes(t *testing.T) {
	s := openStoreAt(t, filepath.Join(t.TempDir(), "x.db"))
	ctx := context.Background()
	var fails atomic.Int32
	txn.SetFailpoint(s, func(st string) error {
		if st == txn.StepApplyWrite && fails.Add(1)%17 == 0 {
			return errors.New("injected")
		}
		return nil
	})
	const n, rounds = 32, 20
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			for r := range rounds {
				id := fmt.Sprintf("w%02d-%02d", i, r)
				ev := func(what string) txn.AuditEvent {
					return txn.AuditEvent{Data: fmt.Appendf(nil, `{"id":%q,"what":%q,"pad":%q}`, id, what, strings.Repeat(id, r)), Checked: r%2 == 0}
				}
				rec := executing(id)
				rec.InputHash = strings.Repeat(id, i)
				tx, err := s.Begin(ctx, rec, ev("claim"), ev("claim2"))
				if err != nil {
					t.Error(err)
					return
				}
				tx.Put("x", id, []byte(id))
				final := finalOf(id)
				final.InputHash = rec.InputHash
				if err := tx.Commit(ctx, final, ev("done")); err != nil {
					if err := tx.Rollback(ctx, newRecord(id, "t", "ROLLED_BACK"), ev("rolled back")); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
	wg.Wait()
	recs, err := s.List(ctx, txn.Filter{})
	if err != nil || len(recs) != n*rounds {
		t.Fatalf("List: %d records, %v", len(recs), err)
	}
	for _, r := range recs {
		var i, round int
		fmt.Sscanf(r.ExecutionID, "w%02d-%02d", &i, &round)
		if r.State == "COMPLETED" && r.InputHash != strings.Repeat(r.ExecutionID, i) {
			t.Fatalf("record %s: input hash %q", r.ExecutionID, r.InputHash)
		}
	}
	entries, err := s.AuditLog(ctx, 1, 0)
	if err != nil || len(entries) != 3*n*rounds {
		t.Fatalf("AuditLog: %d entries, %v", len(entries), err)
	}
	var link [32]byte
	claims := map[string]int{}
	for k, e := range entries {
		var ev struct{ ID, What, Pad string }
		if err := json.Unmarshal(e.Event, &ev); err != nil {
			t.Fatalf("entry %d: %v: %s", k+1, err, e.Event)
		}
		var i, round int
		fmt.Sscanf(ev.ID, "w%02d-%02d", &i, &round)
		if ev.Pad != strings.Repeat(ev.ID, round) {
			t.Fatalf("entry %d: event bytes changed: %s", k+1, e.Event)
		}
		if ev.What == "claim" || ev.What == "claim2" {
			claims[ev.ID]++
		}
		sum := sha256.Sum256(e.Event)
		link = sha256.Sum256(append(link[:], sum[:]...))
		if e.Seq != uint64(k+1) || e.Hash != hex.EncodeToString(link[:]) {
			t.Fatalf("entry %d: seq %d, hash %s: the chain is broken", k+1, e.Seq, e.Hash)
		}
	}
	for id, c := range claims {
		if c != 2 {
			t.Fatalf("%s: %d claim events", id, c)
		}
	}
}
