package txn_test

import (
	"context"
	"encoding/binary"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/toolgate/toolgate/txn"
	"github.com/toolgate/toolgate/txn/boltstore"
	"github.com/toolgate/toolgate/txn/driver"
	"github.com/toolgate/toolgate/txn/storetest"
)

// plain is a backend with the contract's required methods only (a user's
// own, say): the Store then does without what the optional interfaces
// give (its own audit search, a description, a sync count, a lease).
type plain struct{ driver.Backend }

// openPlain opens a bbolt file behind plain.
func openPlain(t *testing.T) (*txn.Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "p.db")
	be, err := boltstore.Open(path, &boltstore.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	s := txn.NewStore(plain{be}, path)
	t.Cleanup(func() { _ = s.Close() })
	return s, path
}

// A backend without its own search (driver.AuditSearcher) is searched by
// the Store's scan of every group, with the same answers at the edges of
// the window (storetest.CheckAuditSearch), GetWithAudit's included.
func TestStore_AuditSearchWithoutSearcher(t *testing.T) {
	s, _ := openPlain(t)
	if _, ok := txn.BackendOf(s).(driver.AuditSearcher); ok {
		t.Fatal("the plain backend has a search of its own")
	}
	storetest.CheckAuditSearch(t, s)
}

// The Store's scan, like a backend's search, decodes only the groups it
// returns: a damaged group in the window is ErrCorrupt for a search and for
// GetWithAudit, one outside the window is never read.
func TestStore_AuditSearchDamagedGroup(t *testing.T) {
	for _, withSearcher := range []bool{true, false} {
		path := filepath.Join(t.TempDir(), "d.db")
		s := openStoreAt(t, path)
		ctx := context.Background()
		if _, err := s.Begin(ctx, newRecord("a", "t", "EXECUTING"), txn.AuditEvent{Data: []byte(`{"timestamp":1000,"id":"a"}`)}); err != nil {
			t.Fatal(err)
		}
		s.Close()
		// A group after the head's: audit verify reports it; a search of
		// the window it claims finds it.
		db, err := bolt.Open(path, 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = db.Update(func(tx *bolt.Tx) error {
			return tx.Bucket([]byte("audit")).Put(binary.BigEndian.AppendUint64(nil, 2), []byte(`[{"seq":2,"event":{"timestamp":2000,"id":"b"}`))
		})
		db.Close()
		if err != nil {
			t.Fatal(err)
		}
		be, err := boltstore.Open(path, &boltstore.Options{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		var back driver.Backend = be
		if !withSearcher {
			back = plain{be}
		}
		s = txn.NewStore(back, path)
		none := func(txn.AuditEntry) bool { return false }
		if err := s.AuditSearch(ctx, `"id":"b"`, 1500, 2500, none); !errors.Is(err, txn.ErrCorrupt) {
			t.Errorf("searcher %v: a search of the damaged group = %v; want ErrCorrupt", withSearcher, err)
		}
		var got []string
		if err := s.AuditSearch(ctx, `"id":"a"`, 900, 1100, func(e txn.AuditEntry) bool {
			got = append(got, string(e.Event))
			return false
		}); err != nil || len(got) != 1 {
			t.Errorf("searcher %v: a search away from the damaged group = %q, %v", withSearcher, got, err)
		}
		win := func(*txn.Record) (string, int64, int64) { return `"id":"b"`, 1500, 2500 }
		if rec, err := s.GetWithAudit(ctx, "a", win, none); !errors.Is(err, txn.ErrCorrupt) || rec != nil {
			t.Errorf("searcher %v: GetWithAudit meeting the damaged group = %v, %v; want ErrCorrupt", withSearcher, rec, err)
		}
		if rec, err := s.GetWithAudit(ctx, "zz", win, none); !errors.Is(err, txn.ErrNotFound) || rec != nil {
			t.Errorf("searcher %v: GetWithAudit of a missing record = %v, %v; want ErrNotFound", withSearcher, rec, err)
		}
		s.Close()
	}
}

// What the Store says of a backend without the optional interfaces, and
// of bbolt's: its description, its sync count, other nodes' leases.
func TestStore_OptionalInterfaces(t *testing.T) {
	ctx := context.Background()
	p, _ := openPlain(t)
	if got, err := p.Backend(ctx); err != nil || got != "a store of an unnamed backend" {
		t.Errorf("Backend of a plain backend = %q, %v", got, err)
	}
	if n, ok := p.Syncs(); n != 0 || ok {
		t.Errorf("Syncs of a plain backend = %d, %v; want 0, false", n, ok)
	}
	if live, err := p.NodeLive(ctx, "other-node"); live || err != nil {
		t.Errorf("NodeLive on a backend without leases = %v, %v", live, err)
	}
	if p.NodeRun() != "" {
		t.Errorf("NodeRun on a backend without leases = %q", p.NodeRun())
	}
	p.Close()
	if _, err := p.Backend(ctx); !errors.Is(err, txn.ErrClosed) {
		t.Errorf("Backend after Close = %v; want ErrClosed", err)
	}

	b := openStoreAt(t, filepath.Join(t.TempDir(), "b.db"))
	if got, err := b.Backend(ctx); err != nil || got != "bbolt file, format 3" {
		t.Errorf("Backend of bbolt = %q, %v", got, err)
	}
	if _, ok := b.Syncs(); !ok {
		t.Error("bbolt counts no syncs")
	}
	for _, run := range []string{"", "a-node", b.NodeRun()} {
		if live, err := b.NodeLive(ctx, run); live || err != nil {
			t.Errorf("NodeLive(%q) on bbolt = %v, %v; want false", run, live, err)
		}
	}
}

// Options.Validate refuses a lease shorter than the least (or negative),
// and takes a zero one (the default) or a long enough one.
func TestOptions_ValidateLease(t *testing.T) {
	for _, tc := range []struct {
		lease time.Duration
		ok    bool
	}{{0, true}, {time.Second, true}, {time.Millisecond, false}, {-time.Second, false}} {
		err := (&txn.Options{Lease: tc.lease}).Validate()
		if (err == nil) != tc.ok {
			t.Errorf("Validate with Lease %v = %v; want ok %v", tc.lease, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "lease") {
			t.Errorf("Validate with Lease %v = %v; want it to name the lease", tc.lease, err)
		}
	}
}

// StatePage checks its namespace and the store before it reads, and a
// page of n <= 0 entries is empty.
func TestStore_StatePageEdges(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	for _, k := range []string{"a", "b", "c"} {
		if err := s.PutState(ctx, "ns", k, []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []int{0, -1} {
		if page, err := s.StatePage(ctx, "ns", "", n); err != nil || len(page) != 0 {
			t.Errorf("StatePage of %d entries = %v, %v; want none", n, page, err)
		}
	}
	if page, err := s.StatePage(ctx, "ns", "", 1); err != nil || len(page) != 1 || page[0].Key != "a" {
		t.Errorf("StatePage of 1 = %v, %v", page, err)
	}
	if _, err := s.StatePage(ctx, "", "", 1); !errors.Is(err, txn.ErrInvalidKey) {
		t.Errorf("StatePage of an empty namespace = %v; want ErrInvalidKey", err)
	}
	if _, err := s.StatePage(ctx, strings.Repeat("n", txn.MaxKeyLen+1), "", 1); !errors.Is(err, txn.ErrInvalidKey) {
		t.Errorf("StatePage of a namespace too long = %v; want ErrInvalidKey", err)
	}
	if _, err := s.StatePage(ctx, strings.Repeat("n", txn.MaxKeyLen), "", 1); err != nil {
		t.Errorf("StatePage of a namespace of MaxKeyLen = %v", err)
	}
	s.Close()
	if _, err := s.StatePage(ctx, "ns", "", 1); !errors.Is(err, txn.ErrClosed) {
		t.Errorf("StatePage after Close = %v; want ErrClosed", err)
	}
	if err := s.WalkRecords(ctx, "", func(string, *txn.Record, error) bool { return true }); !errors.Is(err, txn.ErrClosed) {
		t.Errorf("WalkRecords after Close = %v; want ErrClosed", err)
	}
}

// sick is a backend that reports itself poisoned (Err) but would still
// serve reads: the Store checks Err itself before every call.
type sick struct {
	driver.Backend
	err error
}

func (s sick) Err() error { return s.err }

// Once its backend says it is poisoned, the Store refuses reads and
// writes with that error, without reaching the backend.
func TestStore_RefusesWhenBackendPoisoned(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	be, err := boltstore.Open(path, &boltstore.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	healthy := txn.NewStore(be, path)
	defer healthy.Close()
	ctx := context.Background()
	if err := healthy.Put(ctx, newRecord("a", "t", "FAILED")); err != nil {
		t.Fatal(err)
	}
	poison := errors.New("poisoned by a test")
	s := txn.NewStore(sick{be, poison}, path)
	if _, err := s.Get(ctx, "a"); !errors.Is(err, poison) {
		t.Errorf("Get = %v; want the poison", err)
	}
	if _, err := s.List(ctx, txn.Filter{}); !errors.Is(err, poison) {
		t.Errorf("List = %v; want the poison", err)
	}
	if err := s.Put(ctx, newRecord("b", "t", "FAILED")); !errors.Is(err, poison) {
		t.Errorf("Put = %v; want the poison", err)
	}
	if _, err := healthy.Get(ctx, "b"); !errors.Is(err, txn.ErrNotFound) {
		t.Errorf("the refused Put wrote: %v", err)
	}
	if !errors.Is(s.Err(), poison) {
		t.Errorf("Err = %v", s.Err())
	}
}

// WalkRecords passes the records (final ones and claims) after the id
// after, in id order, until fn returns false; a record whose bytes do not
// decode is passed as an error wrapping ErrCorrupt, under its key, and the
// walk goes on. List fails on it.
func TestStore_WalkRecords(t *testing.T) {
	path := filepath.Join(t.TempDir(), "w.db")
	s := openStoreAt(t, path)
	ctx := context.Background()
	for _, id := range []string{"a", "c", "e"} {
		if err := s.Put(ctx, newRecord(id, "t", "FAILED")); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"b", "d"} {
		if _, err := s.Begin(ctx, newRecord(id, "t", "EXECUTING")); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error { return tx.Bucket([]byte("executions")).Put([]byte("c"), []byte("garbage")) })
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	s = openStoreAt(t, path)
	// List, unlike WalkRecords, fails on a record that does not decode.
	for _, newest := range []bool{false, true} {
		if recs, err := s.List(ctx, txn.Filter{Newest: newest}); !errors.Is(err, txn.ErrCorrupt) || recs != nil {
			t.Errorf("List (newest first %v) over a damaged record = %d records, %v; want ErrCorrupt", newest, len(recs), err)
		}
	}
	if recs, err := s.List(ctx, txn.Filter{Limit: 2}); err != nil || len(recs) != 2 {
		t.Errorf("List of the two records before the damaged one = %d records, %v", len(recs), err)
	}
	walk := func(after string, stopAt string) string {
		t.Helper()
		var got []string
		if err := s.WalkRecords(ctx, after, func(key string, rec *txn.Record, err error) bool {
			switch {
			case err != nil && errors.Is(err, txn.ErrCorrupt) && rec == nil:
				got = append(got, key+"!")
			case err == nil && rec.ExecutionID == key:
				got = append(got, key+":"+rec.State)
			default:
				t.Errorf("%s: %+v, %v", key, rec, err)
			}
			return key != stopAt
		}); err != nil {
			t.Fatal(err)
		}
		return strings.Join(got, ",")
	}
	for _, tc := range []struct{ after, stop, want string }{
		{"", "", "a:FAILED,b:EXECUTING,c!,d:EXECUTING,e:FAILED"},
		{"b", "", "c!,d:EXECUTING,e:FAILED"},
		{"bb", "", "c!,d:EXECUTING,e:FAILED"},
		{"", "c", "a:FAILED,b:EXECUTING,c!"},
		{"e", "", ""},
	} {
		if got := walk(tc.after, tc.stop); got != tc.want {
			t.Errorf("WalkRecords after %q, stopping at %q = %s; want %s", tc.after, tc.stop, got, tc.want)
		}
	}
}

// On a shared Postgres database, NodeLive says whether another node's run
// holds its lease: never for no run, nor for this store's own run or node.
func TestStore_NodeLivePostgres(t *testing.T) {
	url := freshPostgres(t)
	ctx := context.Background()
	a, err := txn.Open(url, &txn.Options{NoSync: true, Node: "a"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := txn.Open(url, &txn.Options{NoSync: true, Node: "b"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, tc := range []struct {
		run  string
		live bool
	}{{"", false}, {a.NodeRun(), false}, {"a", false}, {b.NodeRun(), true}, {"b", true}} {
		if live, err := a.NodeLive(ctx, tc.run); err != nil || live != tc.live {
			t.Errorf("NodeLive(%q) = %v, %v; want %v", tc.run, live, err, tc.live)
		}
	}
	a.Close()
	if _, err := a.NodeLive(ctx, b.NodeRun()); !errors.Is(err, txn.ErrClosed) {
		t.Errorf("NodeLive after Close = %v; want ErrClosed", err)
	}
}

// asks is a plain backend with leases (its own run is "me/1"; every other
// run's lease holds) that counts the pages and the leases it is asked for.
type asks struct {
	plain
	pages, lives int
}

func (a *asks) StatePage(ctx context.Context, namespace, after string, n int) ([]driver.Entry, error) {
	a.pages++
	return a.plain.StatePage(ctx, namespace, after, n)
}
func (*asks) Node() string                  { return "me" }
func (*asks) NodeRun() string               { return "me/1" }
func (*asks) LeaseErr() error               { return nil }
func (*asks) OnSweep(func(context.Context)) {}
func (a *asks) NodeLive(context.Context, string) (bool, error) {
	a.lives++
	return true, nil
}

// The Store asks its backend only what it must: a page of no entries (n of
// 0 or less) is empty without a read, and no run, this store's own run
// and its own node are not live without asking whose lease holds.
func TestStore_AsksTheBackendOnlyWhatItMust(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.db")
	be, err := boltstore.Open(path, &boltstore.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	a := &asks{plain: plain{be}}
	s := txn.NewStore(a, path)
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	if err := s.PutState(ctx, "ns", "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, -1} {
		if page, err := s.StatePage(ctx, "ns", "", n); err != nil || len(page) != 0 || a.pages != 0 {
			t.Errorf("a page of %d: %v, %v after %d reads; want none, no read", n, page, err, a.pages)
		}
	}
	if page, err := s.StatePage(ctx, "ns", "", 1); err != nil || len(page) != 1 || a.pages != 1 {
		t.Errorf("a page of 1: %v, %v after %d reads; want one entry, one read", page, err, a.pages)
	}
	for _, run := range []string{"", "me/1", "me"} {
		if live, err := s.NodeLive(ctx, run); live || err != nil || a.lives != 0 {
			t.Errorf("NodeLive(%q) = %v, %v after %d asks; want false, without asking", run, live, err, a.lives)
		}
	}
	if live, err := s.NodeLive(ctx, "other/2"); !live || err != nil || a.lives != 1 {
		t.Errorf("NodeLive of another run = %v, %v after %d asks; want true, from the backend", live, err, a.lives)
	}
}
