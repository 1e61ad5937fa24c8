package txn_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/txn"
)

// begin starts a Tx for a fresh EXECUTING record.
func begin(t *testing.T, s *txn.Store, id string) *txn.Tx {
	t.Helper()
	tx, err := s.Begin(context.Background(), newRecord(id, "echo", "EXECUTING"))
	if err != nil {
		t.Fatalf("Begin(%q): %v", id, err)
	}
	return tx
}

// seed commits values into namespace through a Tx of its own.
func seed(t *testing.T, s *txn.Store, namespace string, values map[string]string) {
	t.Helper()
	id := "seed-" + namespace
	tx := begin(t, s, id)
	for k, v := range values {
		if err := tx.Put(namespace, k, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(context.Background(), newRecord(id, "echo", "COMPLETED")); err != nil {
		t.Fatal(err)
	}
}

// state returns the committed contents of namespace.
func state(t *testing.T, s *txn.Store, namespace string) map[string]string {
	t.Helper()
	raw, err := s.StateValues(context.Background(), namespace)
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]string, len(raw))
	for k, v := range raw {
		out[k] = string(v)
	}
	return out
}

// wantValue checks a Get-style result.
func wantValue(t *testing.T, what string, v []byte, ok bool, err error, want string, wantOK bool) {
	t.Helper()
	if err != nil || ok != wantOK || string(v) != want {
		t.Errorf("%s = %q, %t, %v; want %q, %t, nil", what, v, ok, err, want, wantOK)
	}
}

func TestStore_Begin(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	if err := s.Put(ctx, newRecord("stored", "echo", "DENIED")); err != nil {
		t.Fatal(err)
	}
	tx := begin(t, s, "exec-1")
	if tx.ID() != "exec-1" || !tx.Active() {
		t.Errorf("ID() = %q, Active() = %t; want exec-1, true", tx.ID(), tx.Active())
	}
	rec, err := s.Get(ctx, "exec-1")
	if err != nil {
		t.Fatalf("Get of the record of an active Tx: %v", err)
	}
	if rec.State != "EXECUTING" {
		t.Errorf("State of the record of an active Tx = %q, want EXECUTING", rec.State)
	}

	tests := []struct {
		name string
		rec  *txn.Record
		want error
	}{
		{"id of an active Tx", newRecord("exec-1", "echo", "EXECUTING"), txn.ErrExists},
		{"id of a stored record", newRecord("stored", "echo", "EXECUTING"), txn.ErrExists},
		{"nil record", nil, txn.ErrInvalidRecord},
		{"empty tool", newRecord("exec-2", "", "EXECUTING"), txn.ErrInvalidRecord},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tx, err := s.Begin(ctx, tt.rec)
			if !errors.Is(err, tt.want) || tx != nil {
				t.Errorf("Begin() = %v, %v; want nil, %v", tx, err, tt.want)
			}
		})
	}
	if recs, _ := s.List(ctx, txn.Filter{}); len(recs) != 2 {
		t.Errorf("refused Begins wrote records: %v", ids(recs))
	}
}

func TestTx_Get(t *testing.T) {
	s := openStore(t)
	seed(t, s, "kv", map[string]string{"a": "1", "b": "2"})
	tx := begin(t, s, "exec")

	steps := []struct {
		op     string // "put", "delete" or "get"
		key    string
		value  string // put value, or expected get value
		wantOK bool   // get: expected found
	}{
		{"get", "a", "1", true}, // committed state
		{"put", "a", "10", false},
		{"get", "a", "10", true}, // own put shadows committed state
		{"delete", "b", "", false},
		{"get", "b", "", false}, // own delete shadows committed state
		{"get", "c", "", false},
		{"put", "c", "", false},
		{"get", "c", "", true}, // empty values exist
		{"delete", "c", "", false},
		{"get", "c", "", false},
		{"put", "b", "20", false},
		{"get", "b", "20", true}, // put after delete
	}
	for i, st := range steps {
		var err error
		switch st.op {
		case "put":
			err = tx.Put("kv", st.key, []byte(st.value))
		case "delete":
			err = tx.Delete("kv", st.key)
		case "get":
			v, ok, err := tx.Get("kv", st.key)
			wantValue(t, fmt.Sprintf("step %d: Get(%q)", i, st.key), v, ok, err, st.value, st.wantOK)
		}
		if err != nil {
			t.Fatalf("step %d: %s(%q): %v", i, st.op, st.key, err)
		}
	}
	if got, want := state(t, s, "kv"), map[string]string{"a": "1", "b": "2"}; !reflect.DeepEqual(got, want) {
		t.Errorf("committed state while Tx is active = %v, want %v", got, want)
	}
}

func TestTx_Get_Isolation(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	tx1, tx2 := begin(t, s, "exec-1"), begin(t, s, "exec-2")
	if err := tx1.Put("kv", "k", []byte("v1")); err != nil {
		t.Fatal(err)
	}
	v, ok, err := tx2.Get("kv", "k")
	wantValue(t, "Get of another Tx's uncommitted put", v, ok, err, "", false)
	v, ok, err = s.StateValue(ctx, "kv", "k")
	wantValue(t, "StateValue of an uncommitted put", v, ok, err, "", false)

	if err := tx1.Commit(ctx, newRecord("exec-1", "echo", "COMPLETED")); err != nil {
		t.Fatal(err)
	}
	v, ok, err = tx2.Get("kv", "k")
	wantValue(t, "Get of another Tx's committed put", v, ok, err, "v1", true)
}

func TestTx_Commit(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	seed(t, s, "a", map[string]string{"old": "x", "keep": "y"})
	tx := begin(t, s, "exec")
	for _, w := range []struct{ ns, key, value string }{
		{"a", "k1", "v1"}, {"a", "k2", "v2"}, {"b", "k1", "v3"}, {"a", "old", ""},
	} {
		var err error
		if w.value == "" {
			err = tx.Delete(w.ns, w.key)
		} else {
			err = tx.Put(w.ns, w.key, []byte(w.value))
		}
		if err != nil {
			t.Fatal(err)
		}
	}

	final := newRecord("exec", "echo", "COMPLETED")
	final.Output = json.RawMessage(`{"ok":true}`)
	final.EndedAt = t0.Add(time.Second)
	if err := tx.Commit(ctx, final); err != nil {
		t.Fatal(err)
	}
	if tx.Active() {
		t.Error("Tx active after Commit")
	}
	wantSummary := &txn.WriteSetSummary{Puts: 3, Deletes: 1, Namespaces: []string{"a", "b"}, Committed: true}
	if !reflect.DeepEqual(final.WriteSet, wantSummary) {
		t.Errorf("final.WriteSet = %+v, want %+v", final.WriteSet, wantSummary)
	}
	got, err := s.Get(ctx, "exec")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, final) {
		t.Errorf("stored record = %+v\nwant %+v", got, final)
	}
	for ns, want := range map[string]map[string]string{
		"a": {"k1": "v1", "k2": "v2", "keep": "y"},
		"b": {"k1": "v3"},
	} {
		if got := state(t, s, ns); !reflect.DeepEqual(got, want) {
			t.Errorf("namespace %q after Commit = %v, want %v", ns, got, want)
		}
	}
}

func TestTx_Commit_InvalidRecord(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	tx := begin(t, s, "exec")
	if err := tx.Put("kv", "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	for _, final := range []*txn.Record{
		nil,
		newRecord("other", "echo", "COMPLETED"),
		newRecord("exec", "echo", ""),
	} {
		if err := tx.Commit(ctx, final); !errors.Is(err, txn.ErrInvalidRecord) {
			t.Errorf("Commit(%+v) = %v, want ErrInvalidRecord", final, err)
		}
	}
	if !tx.Active() {
		t.Fatal("Tx inactive after refused Commits")
	}
	if recs, _ := s.List(ctx, txn.Filter{}); len(recs) != 1 || recs[0].State != "EXECUTING" {
		t.Errorf("records after refused Commits = %+v, want only the EXECUTING one", recs)
	}
	if err := tx.Commit(ctx, newRecord("exec", "echo", "COMPLETED")); err != nil {
		t.Fatalf("Commit after refused Commits: %v", err)
	}
}

func TestTx_Commit_Fails(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name       string
		breakStore func(*txn.Store) context.Context
		cause      error
	}{
		{"context done", func(*txn.Store) context.Context { return canceled }, context.Canceled},
		{"store closed", func(s *txn.Store) context.Context { s.Close(); return context.Background() }, txn.ErrClosed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := openStore(t)
			tx := begin(t, s, "exec")
			if err := tx.Put("kv", "k", []byte("v")); err != nil {
				t.Fatal(err)
			}
			ctx := tt.breakStore(s)
			err := tx.Commit(ctx, newRecord("exec", "echo", "COMPLETED"))
			if !errors.Is(err, txn.ErrCommit) || !errors.Is(err, tt.cause) {
				t.Fatalf("Commit() = %v, want ErrCommit wrapping %v", err, tt.cause)
			}
			if !tx.Active() {
				t.Fatal("Tx inactive after a failed Commit")
			}
			v, ok, err := tx.Get("kv", "k")
			wantValue(t, "Get after a failed Commit", v, ok, err, "v", true)
			err = tx.Rollback(ctx, newRecord("exec", "echo", "ROLLED_BACK"))
			if !errors.Is(err, tt.cause) || tx.Active() {
				t.Errorf("Rollback() = %v, Active() = %t; want %v, false", err, tx.Active(), tt.cause)
			}
		})
	}
}

func TestTx_Rollback(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	seed(t, s, "kv", map[string]string{"a": "1", "b": "2"})
	before := state(t, s, "kv")

	tx := begin(t, s, "exec")
	for _, err := range []error{
		tx.Put("kv", "a", []byte("changed")),
		tx.Put("kv", "new", []byte("x")),
		tx.Delete("kv", "b"),
		tx.Put("fresh", "k", []byte("y")),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	final := newRecord("exec", "echo", "ROLLED_BACK")
	final.Error = &txn.ErrorInfo{Type: "TimeoutError", Code: "timeout", Message: "deadline exceeded"}
	if err := tx.Rollback(ctx, final); err != nil {
		t.Fatal(err)
	}
	if tx.Active() {
		t.Error("Tx active after Rollback")
	}
	if after := state(t, s, "kv"); !reflect.DeepEqual(after, before) {
		t.Errorf("namespace after Rollback = %v, want %v", after, before)
	}
	if fresh := state(t, s, "fresh"); len(fresh) != 0 {
		t.Errorf("namespace created only by the rolled-back Tx holds %v", fresh)
	}
	wantSummary := &txn.WriteSetSummary{Puts: 3, Deletes: 1, Namespaces: []string{"fresh", "kv"}}
	got, err := s.Get(ctx, "exec")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.WriteSet, wantSummary) || !reflect.DeepEqual(got, final) {
		t.Errorf("stored record = %+v (write-set %+v)\nwant %+v (write-set %+v)", got, got.WriteSet, final, wantSummary)
	}
}

func TestTx_Rollback_InvalidRecord(t *testing.T) {
	s := openStore(t)
	tx := begin(t, s, "exec")
	if err := tx.Rollback(context.Background(), newRecord("other", "echo", "ROLLED_BACK")); !errors.Is(err, txn.ErrInvalidRecord) {
		t.Errorf("Rollback() = %v, want ErrInvalidRecord", err)
	}
	if tx.Active() {
		t.Error("Tx active after Rollback with an invalid record")
	}
}

func TestTx_Done(t *testing.T) {
	ends := map[string]func(*txn.Tx) error{
		"Commit": func(tx *txn.Tx) error {
			return tx.Commit(context.Background(), newRecord(tx.ID(), "echo", "COMPLETED"))
		},
		"Rollback": func(tx *txn.Tx) error {
			return tx.Rollback(context.Background(), newRecord(tx.ID(), "echo", "ROLLED_BACK"))
		},
	}
	calls := map[string]func(*txn.Tx) error{
		"Get":      func(tx *txn.Tx) error { _, _, err := tx.Get("kv", "k"); return err },
		"Put":      func(tx *txn.Tx) error { return tx.Put("kv", "k", []byte("late")) },
		"Delete":   func(tx *txn.Tx) error { return tx.Delete("kv", "k") },
		"Commit":   ends["Commit"],
		"Rollback": ends["Rollback"],
	}
	for endName, end := range ends {
		for callName, call := range calls {
			t.Run(endName+"/"+callName, func(t *testing.T) {
				s := openStore(t)
				tx := begin(t, s, "exec")
				if err := end(tx); err != nil {
					t.Fatal(err)
				}
				if err := call(tx); !errors.Is(err, txn.ErrTxDone) {
					t.Errorf("%s after %s = %v, want ErrTxDone", callName, endName, err)
				}
				if tx.Active() {
					t.Errorf("Active() after %s = true", endName)
				}
				if v, ok, err := s.StateValue(context.Background(), "kv", "k"); ok || err != nil {
					t.Errorf("state after late %s = %q, %t, %v; want nothing", callName, v, ok, err)
				}
			})
		}
	}
}

func TestTx_InvalidKey(t *testing.T) {
	s := openStore(t)
	tx := begin(t, s, "exec")
	long := strings.Repeat("k", txn.MaxKeyLen+1)
	tests := []struct {
		name, namespace, key string
		wantErr              bool
	}{
		{"empty namespace", "", "k", true},
		{"empty key", "ns", "", true},
		{"long namespace", long, "k", true},
		{"long key", "ns", long, true},
		{"longest key", "ns", long[1:], false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := map[string]error{
				"Put":    tx.Put(tt.namespace, tt.key, []byte("v")),
				"Delete": tx.Delete(tt.namespace, tt.key),
			}
			_, _, errs["Get"] = tx.Get(tt.namespace, tt.key)
			for op, err := range errs {
				if tt.wantErr != errors.Is(err, txn.ErrInvalidKey) || (!tt.wantErr && err != nil) {
					t.Errorf("%s(%q, %q) = %v, want ErrInvalidKey: %t", op, tt.namespace, tt.key, err, tt.wantErr)
				}
			}
		})
	}
}

func TestTx_CopiesValues(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	tx := begin(t, s, "exec")
	buf := []byte("original")
	if err := tx.Put("kv", "k", buf); err != nil {
		t.Fatal(err)
	}
	copy(buf, "XXXXXXXX")
	v, _, _ := tx.Get("kv", "k")
	copy(v, "YYYYYYYY")
	v, ok, err := tx.Get("kv", "k")
	wantValue(t, "Get after mutating the put and got slices", v, ok, err, "original", true)

	if err := tx.Commit(ctx, newRecord("exec", "echo", "COMPLETED")); err != nil {
		t.Fatal(err)
	}
	v, _, _ = s.StateValue(ctx, "kv", "k")
	copy(v, "ZZZZZZZZ")
	v, ok, err = s.StateValue(ctx, "kv", "k")
	wantValue(t, "StateValue after mutating a returned slice", v, ok, err, "original", true)
}

func TestTx_ConcurrentUse(t *testing.T) {
	const workers, perWorker = 8, 50
	s := openStore(t)
	tx := begin(t, s, "exec")
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				key := fmt.Sprintf("w%d-%d", w, i)
				if err := tx.Put("kv", key, []byte(key)); err != nil {
					t.Error(err)
					return
				}
				if v, ok, err := tx.Get("kv", key); err != nil || !ok || string(v) != key {
					t.Errorf("Get(%q) = %q, %t, %v", key, v, ok, err)
				}
			}
		})
	}
	wg.Wait()
	if err := tx.Commit(context.Background(), newRecord("exec", "echo", "COMPLETED")); err != nil {
		t.Fatal(err)
	}
	if got := len(state(t, s, "kv")); got != workers*perWorker {
		t.Errorf("committed %d keys, want %d", got, workers*perWorker)
	}
}

// TestTx_LateWriter models a tool goroutine that keeps writing while the
// runtime commits: every write accepted before Commit is committed, and
// every later one is refused.
func TestTx_LateWriter(t *testing.T) {
	s := openStore(t)
	tx := begin(t, s, "exec")
	accepted := make(chan int)
	go func() {
		i := 0
		for ; tx.Put("kv", fmt.Sprint(i), nil) == nil; i++ {
			if i == 100 {
				accepted <- -1 // enough writes: let the runtime commit
			}
		}
		accepted <- i
	}()
	<-accepted
	if err := tx.Commit(context.Background(), newRecord("exec", "echo", "COMPLETED")); err != nil {
		t.Fatal(err)
	}
	n := <-accepted
	if got := len(state(t, s, "kv")); got != n {
		t.Errorf("committed %d keys, want the %d accepted before Commit", got, n)
	}
}

// TestTx_DoesNotHoldWriter proves that an active Tx holds no bbolt write
// transaction: with tx1 active, the same goroutine can begin and commit tx2
// and Put a record. Were the writer held, this would deadlock.
func TestTx_DoesNotHoldWriter(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	done := make(chan error, 1)
	var tx1 *txn.Tx
	go func() {
		done <- func() error {
			var err error
			if tx1, err = s.Begin(ctx, newRecord("exec-1", "echo", "EXECUTING")); err != nil {
				return err
			}
			if err := tx1.Put("kv", "one", []byte("1")); err != nil {
				return err
			}
			tx2, err := s.Begin(ctx, newRecord("exec-2", "echo", "EXECUTING"))
			if err != nil {
				return err
			}
			if err := tx2.Put("kv", "two", []byte("2")); err != nil {
				return err
			}
			if err := tx2.Commit(ctx, newRecord("exec-2", "echo", "COMPLETED")); err != nil {
				return err
			}
			return s.Put(ctx, newRecord("exec-3", "echo", "DENIED"))
		}()
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Begin/Commit blocked while another Tx was active: the bbolt writer is held")
	}
	if got, want := state(t, s, "kv"), map[string]string{"two": "2"}; !reflect.DeepEqual(got, want) {
		t.Errorf("state with tx1 active = %v, want %v", got, want)
	}
	if err := tx1.Commit(ctx, newRecord("exec-1", "echo", "COMPLETED")); err != nil {
		t.Fatal(err)
	}
	if got, want := state(t, s, "kv"), map[string]string{"one": "1", "two": "2"}; !reflect.DeepEqual(got, want) {
		t.Errorf("state after both commits = %v, want %v", got, want)
	}
}

// Two read-modify-write transactions on one key: the second to commit sees
// that what it read has changed and fails with ErrConflict, applying
// nothing; no update is lost.
func TestTx_Commit_Conflict(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	seed, err := s.Begin(ctx, executing("seed"))
	if err != nil {
		t.Fatal(err)
	}
	seed.Put("n", "k", []byte("x"))
	if err := seed.Commit(ctx, finalOf("seed")); err != nil {
		t.Fatal(err)
	}
	a, _ := s.Begin(ctx, executing("a"))
	b, _ := s.Begin(ctx, executing("b"))
	for _, tx := range []*txn.Tx{a, b} {
		v, _, err := tx.Get("n", "k")
		if err != nil {
			t.Fatal(err)
		}
		tx.Put("n", "k", append(v, 'x'))
	}
	if err := a.Commit(ctx, finalOf("a")); err != nil {
		t.Fatal(err)
	}
	err = b.Commit(ctx, finalOf("b"))
	if !errors.Is(err, txn.ErrConflict) || !errors.Is(err, txn.ErrCommit) || !b.Active() {
		t.Fatalf("second Commit = %v (active %v), want ErrConflict and still active", err, b.Active())
	}
	if v, _, _ := s.StateValue(ctx, "n", "k"); string(v) != "xx" {
		t.Fatalf("value %q, want xx", v)
	}
	// A read of a missing key conflicts with its creation too.
	c, _ := s.Begin(ctx, executing("c"))
	if _, found, _ := c.Get("n", "new"); found {
		t.Fatal("found")
	}
	d, _ := s.Begin(ctx, executing("d"))
	d.Put("n", "new", []byte("1"))
	if err := d.Commit(ctx, finalOf("d")); err != nil {
		t.Fatal(err)
	}
	c.Put("n", "other", []byte("1"))
	if err := c.Commit(ctx, finalOf("c")); !errors.Is(err, txn.ErrConflict) {
		t.Fatalf("Commit after a read key was created = %v, want ErrConflict", err)
	}
	// Blind writes never conflict.
	e, _ := s.Begin(ctx, executing("e"))
	e.Put("n", "k", []byte("blind"))
	if err := e.Commit(ctx, finalOf("e")); err != nil {
		t.Fatal(err)
	}
}

func executing(id string) *txn.Record { return newRecord(id, "t", "EXECUTING") }
func finalOf(id string) *txn.Record   { return newRecord(id, "t", "COMPLETED") }
