package txn_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math/rand"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/toolgate/toolgate/txn"
	"github.com/toolgate/toolgate/txn/storetest"
)

var t0 = time.Date(2025, 3, 4, 5, 6, 7, 890, time.UTC)

// openStore opens a fresh store in a temporary directory, closed at cleanup;
// with TOOLGATE_TEST_BACKEND=postgres, in a fresh Postgres database (see
// conformance_test.go).
func openStore(t *testing.T) *txn.Store {
	t.Helper()
	if onPostgres() {
		return openStoreAt(t, freshPostgres(t))
	}
	return openStoreAt(t, filepath.Join(t.TempDir(), "toolgate.db"))
}

// openStoreAt opens the store at path, closed at cleanup.
func openStoreAt(t *testing.T, path string) *txn.Store {
	t.Helper()
	s, err := txn.Open(path, &txn.Options{NoSync: true})
	if err != nil {
		t.Fatalf("Open(%q): %v", path, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// newRecord returns a valid record in the given state.
var newRecord = storetest.Record

func ids(recs []*txn.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.ExecutionID
	}
	return out
}

func TestOptions_Validate(t *testing.T) {
	tests := []struct {
		name    string
		opts    *txn.Options
		wantErr bool
	}{
		{"nil", nil, false},
		{"default", txn.DefaultOptions(), false},
		{"zero", &txn.Options{}, false},
		{"negative timeout", &txn.Options{Timeout: -time.Second}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.opts.Validate(); (err != nil) != tt.wantErr {
				t.Errorf("Validate() = %v, want error: %t", err, tt.wantErr)
			}
		})
	}
	if _, err := txn.Open(filepath.Join(t.TempDir(), "x.db"), &txn.Options{Timeout: -1}); err == nil {
		t.Error("Open with negative timeout succeeded")
	}
}

func TestOpen_CreatesDirAndFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state", "nested")
	path := filepath.Join(dir, "toolgate.db")
	s := openStoreAt(t, path)
	if s.Path() != path {
		t.Errorf("Path() = %q, want %q", s.Path(), path)
	}
	for _, c := range []struct {
		path string
		mode os.FileMode
	}{{dir, os.ModeDir | 0o700}, {path, 0o600}} {
		fi, err := os.Stat(c.path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != c.mode {
			t.Errorf("mode of %s = %v, want %v", c.path, fi.Mode(), c.mode)
		}
	}
}

func TestOpen_ReopenKeepsData(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "toolgate.db")
	s := openStoreAt(t, path)
	if err := s.Put(ctx, newRecord("e1", "echo", "DENIED")); err != nil {
		t.Fatal(err)
	}
	tx, err := s.Begin(ctx, newRecord("e2", "echo", "EXECUTING"))
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Put("ns", "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx, newRecord("e2", "echo", "COMPLETED")); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openStoreAt(t, path)
	got, err := s.List(ctx, txn.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"e1", "e2"}; !slices.Equal(ids(got), want) {
		t.Errorf("List after reopen = %v, want %v", ids(got), want)
	}
	v, ok, err := s.StateValue(ctx, "ns", "k")
	if err != nil || !ok || string(v) != "v" {
		t.Errorf("StateValue after reopen = %q, %t, %v; want \"v\", true, nil", v, ok, err)
	}
}

func TestOpen_NotBoltFile(t *testing.T) {
	random := func(n int) []byte {
		b := make([]byte, n)
		rand.New(rand.NewSource(int64(n))).Read(b)
		return b
	}
	tests := []struct {
		name    string
		content []byte
	}{
		{"short text", []byte("not a database\n")},
		{"one page of text", []byte(strings.Repeat("not a database\n", 300))},
		{"random 5000 bytes", random(5000)},
		{"random 64KiB", random(64 << 10)},
		{"zeros 16KiB", make([]byte, 16<<10)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "toolgate.db")
			if err := os.WriteFile(path, tt.content, 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := txn.Open(path, nil)
			if err == nil {
				s.Close()
				t.Fatal("Open succeeded on a file that is not a database")
			}
			if !errors.Is(err, txn.ErrCorrupt) || !strings.Contains(err.Error(), path) {
				t.Errorf("Open error = %v, want ErrCorrupt mentioning %s", err, path)
			}
		})
	}
}

func TestOpen_Locked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "toolgate.db")
	first := openStoreAt(t, path)
	for _, opts := range []*txn.Options{
		{Timeout: 50 * time.Millisecond},
		{Timeout: 50 * time.Millisecond, ReadOnly: true},
	} {
		s, err := txn.Open(path, opts)
		if err == nil {
			s.Close()
			t.Fatalf("second Open(%+v) succeeded while the file is locked", *opts)
		}
		if !errors.Is(err, txn.ErrLocked) {
			t.Errorf("second Open(%+v) error = %v, want ErrLocked", *opts, err)
		}
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	openStoreAt(t, path) // the lock is released by Close
}

func TestOpen_IncompatibleVersion(t *testing.T) {
	path := filepath.Join(t.TempDir(), "toolgate.db")
	if err := openStoreAt(t, path).Close(); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("meta")).Put([]byte("format"), binary.BigEndian.AppendUint64(nil, 99))
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, readOnly := range []bool{false, true} {
		s, err := txn.Open(path, &txn.Options{ReadOnly: readOnly})
		if err == nil {
			s.Close()
			t.Fatalf("Open(ReadOnly: %t) accepted format version 99", readOnly)
		}
		if !errors.Is(err, txn.ErrIncompatible) {
			t.Errorf("Open(ReadOnly: %t) error = %v, want ErrIncompatible", readOnly, err)
		}
	}
}

func TestOpen_ReadOnly(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "toolgate.db")

	if _, err := txn.Open(path, &txn.Options{ReadOnly: true}); err == nil || errors.Is(err, txn.ErrCorrupt) {
		t.Errorf("read-only Open of a missing file: error = %v, want a plain open error", err)
	}

	w := openStoreAt(t, path)
	if err := w.Put(ctx, newRecord("e1", "echo", "FAILED")); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	s, err := txn.Open(path, &txn.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Get(ctx, "e1"); err != nil {
		t.Errorf("Get on read-only store: %v", err)
	}
	if err := s.Put(ctx, newRecord("e2", "echo", "FAILED")); !errors.Is(err, txn.ErrReadOnly) {
		t.Errorf("Put on read-only store = %v, want ErrReadOnly", err)
	}
	if _, err := s.Begin(ctx, newRecord("e3", "echo", "EXECUTING")); !errors.Is(err, txn.ErrReadOnly) {
		t.Errorf("Begin on read-only store = %v, want ErrReadOnly", err)
	}
}

func TestStore_PutGet(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	want := &txn.Record{
		ExecutionID:  "exec-1",
		CallID:       "call-1",
		Attempt:      2,
		ToolID:       "fs.read",
		ToolVersion:  "1.2.3",
		Principal:    "alice",
		State:        "FAILED",
		Transitions:  []txn.Transition{{From: "DECLARED", To: "FAILED", Event: "validate", At: t0, Reason: "bad input"}},
		Capabilities: []string{"fs:read"},
		InputHash:    "sha256:in",
		Output:       json.RawMessage(`{"partial":true}`),
		OutputHash:   "sha256:out",
		Error:        &txn.ErrorInfo{Type: "ValidationError", Code: "schema", Message: "missing field", Stack: "main.go:1"},
		StartedAt:    t0,
		EndedAt:      t0.Add(time.Second),
	}
	if err := s.Put(ctx, want); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, want.ExecutionID)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Get() = %+v\nwant %+v", got, want)
	}

	if _, err := s.Get(ctx, "missing"); !errors.Is(err, txn.ErrNotFound) {
		t.Errorf("Get(missing) error = %v, want ErrNotFound", err)
	}
}

func TestStore_Put(t *testing.T) {
	ctx := context.Background()
	longID := strings.Repeat("x", txn.MaxKeyLen+1)
	with := func(f func(r *txn.Record)) *txn.Record {
		r := newRecord("new", "echo", "FAILED")
		f(r)
		return r
	}
	tests := []struct {
		name string
		rec  *txn.Record
		want error
	}{
		{"valid", with(func(*txn.Record) {}), nil},
		{"existing id", with(func(r *txn.Record) { r.ExecutionID = "existing" }), txn.ErrExists},
		{"nil", nil, txn.ErrInvalidRecord},
		{"empty id", with(func(r *txn.Record) { r.ExecutionID = "" }), txn.ErrInvalidRecord},
		{"id too long", with(func(r *txn.Record) { r.ExecutionID = longID }), txn.ErrInvalidRecord},
		{"id of MaxKeyLen", with(func(r *txn.Record) { r.ExecutionID = longID[1:] }), nil},
		{"empty tool", with(func(r *txn.Record) { r.ToolID = "" }), txn.ErrInvalidRecord},
		{"empty state", with(func(r *txn.Record) { r.State = "" }), txn.ErrInvalidRecord},
		{"negative attempt", with(func(r *txn.Record) { r.Attempt = -1 }), txn.ErrInvalidRecord},
		{"attempt 0", with(func(r *txn.Record) { r.Attempt = 0 }), nil},
		{"output not JSON", with(func(r *txn.Record) { r.Output = json.RawMessage("{") }), txn.ErrInvalidRecord},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := openStore(t)
			existing := newRecord("existing", "original", "DENIED")
			if err := s.Put(ctx, existing); err != nil {
				t.Fatal(err)
			}
			err := s.Put(ctx, tt.rec)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("Put() error = %v, want %v", err, tt.want)
			}
			got, err := s.List(ctx, txn.Filter{})
			if err != nil {
				t.Fatal(err)
			}
			want := []*txn.Record{existing}
			if tt.want == nil {
				want = append(want, tt.rec)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("records after Put = %v, want %v", ids(got), ids(want))
			}
		})
	}
}

func TestStore_List(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	// Ids deliberately not inserted in key order: List follows id order
	// (the runtime's ids are time-ordered, so that is creation order there).
	recs := []*txn.Record{
		newRecord("zeta", "echo", "FAILED"),
		newRecord("alpha", "fs.read", "DENIED"),
		newRecord("mid", "echo", "DENIED"),
		newRecord("beta", "fs.read", "FAILED"),
	}
	recs[3].CallID = recs[0].CallID
	for _, r := range recs {
		if err := s.Put(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Begin(ctx, newRecord("exec", "echo", "EXECUTING")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		filter txn.Filter
		want   []string
	}{
		{"all", txn.Filter{}, []string{"alpha", "beta", "exec", "mid", "zeta"}},
		{"state", txn.Filter{State: "DENIED"}, []string{"alpha", "mid"}},
		{"tool", txn.Filter{ToolID: "echo"}, []string{"exec", "mid", "zeta"}},
		{"call", txn.Filter{CallID: "call-zeta"}, []string{"beta", "zeta"}},
		{"state and tool", txn.Filter{State: "FAILED", ToolID: "fs.read"}, []string{"beta"}},
		{"limit", txn.Filter{Limit: 2}, []string{"alpha", "beta"}},
		{"limit after filter", txn.Filter{ToolID: "echo", Limit: 2}, []string{"exec", "mid"}},
		{"negative limit", txn.Filter{Limit: -1}, []string{"alpha", "beta", "exec", "mid", "zeta"}},
		{"no match", txn.Filter{State: "COMPLETED"}, []string{}},
		{"newest", txn.Filter{Newest: true}, []string{"zeta", "mid", "exec", "beta", "alpha"}},
		{"newest limit", txn.Filter{Newest: true, Limit: 2}, []string{"zeta", "mid"}},
		{"newest past a cursor", txn.Filter{Newest: true, Cursor: "mid", Limit: 2}, []string{"exec", "beta"}},
		{"past a cursor", txn.Filter{Cursor: "beta"}, []string{"exec", "mid", "zeta"}},
		{"past a cursor that is no id", txn.Filter{Cursor: "c"}, []string{"exec", "mid", "zeta"}},
		{"newest past a cursor that is no id", txn.Filter{Newest: true, Cursor: "c"}, []string{"beta", "alpha"}},
		{"newest filtered past a cursor", txn.Filter{Newest: true, ToolID: "echo", Cursor: "zeta"}, []string{"mid", "exec"}},
		{"newest past a claim", txn.Filter{Newest: true, Cursor: "exec"}, []string{"beta", "alpha"}},
		{"past the end", txn.Filter{Cursor: "zz"}, []string{}},
		{"newest past the start", txn.Filter{Newest: true, Cursor: "a"}, []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.List(ctx, tt.filter)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(ids(got), tt.want) {
				t.Errorf("List(%+v) = %v, want %v", tt.filter, ids(got), tt.want)
			}
		})
	}
}

func TestStore_StateValue(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	long := strings.Repeat("k", txn.MaxKeyLen+1)
	tests := []struct {
		name, namespace, key string
	}{
		{"empty namespace", "", "k"},
		{"empty key", "ns", ""},
		{"long namespace", long, "k"},
		{"long key", "ns", long},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, err := s.StateValue(ctx, tt.namespace, tt.key); !errors.Is(err, txn.ErrInvalidKey) {
				t.Errorf("StateValue(%q, %q) error = %v, want ErrInvalidKey", tt.namespace, tt.key, err)
			}
		})
	}
	if v, ok, err := s.StateValue(ctx, "missing", "k"); v != nil || ok || err != nil {
		t.Errorf("StateValue of a missing namespace = %q, %t, %v; want nil, false, nil", v, ok, err)
	}
	if m, err := s.StateValues(ctx, "missing"); len(m) != 0 || err != nil {
		t.Errorf("StateValues of a missing namespace = %v, %v; want empty, nil", m, err)
	}
}

func TestStore_Close(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	if err := s.Put(ctx, newRecord("e1", "echo", "FAILED")); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := s.Close(); err != nil {
			t.Fatalf("Close() = %v", err)
		}
	}
	calls := map[string]func() error{
		"Put":         func() error { return s.Put(ctx, newRecord("e2", "echo", "FAILED")) },
		"Get":         func() error { _, err := s.Get(ctx, "e1"); return err },
		"List":        func() error { _, err := s.List(ctx, txn.Filter{}); return err },
		"StateValue":  func() error { _, _, err := s.StateValue(ctx, "ns", "k"); return err },
		"StateValues": func() error { _, err := s.StateValues(ctx, "ns"); return err },
		"Begin":       func() error { _, err := s.Begin(ctx, newRecord("e3", "echo", "EXECUTING")); return err },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, txn.ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", name, err)
		}
	}
}

func TestStore_ContextDone(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s := openStore(t)
	if err := s.Put(ctx, newRecord("e1", "echo", "FAILED")); !errors.Is(err, context.Canceled) {
		t.Errorf("Put with canceled context = %v, want context.Canceled", err)
	}
	if _, err := s.Begin(ctx, newRecord("e2", "echo", "EXECUTING")); !errors.Is(err, context.Canceled) {
		t.Errorf("Begin with canceled context = %v, want context.Canceled", err)
	}
	if _, err := s.List(ctx, txn.Filter{}); !errors.Is(err, context.Canceled) {
		t.Errorf("List with canceled context = %v, want context.Canceled", err)
	}
	got, err := s.List(context.Background(), txn.Filter{})
	if err != nil || len(got) != 0 {
		t.Errorf("List after canceled writes = %v, %v; want no records", ids(got), err)
	}
}
