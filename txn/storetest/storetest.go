// Package storetest is the conformance suite of the store contract
// (package txn/driver): every backend runs it, with the same expectations,
// toolgate's own (txn/boltstore, txn/pgstore) and a user's. A backend's
// test calls Run with how to make a fresh database and open it:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, &storetest.Backend{
//			Fresh: func(t testing.TB) string { return filepath.Join(t.TempDir(), "x.db") },
//			Open: func(path string, failpoint func(string) error) (driver.Backend, error) {
//				return mystore.Open(path, &mystore.Options{Failpoint: failpoint})
//			},
//		})
//	}
//
// The suite reaches under the contract only through [Inspector], which the
// backend implements to show its claims and state as stored. When each test
// ends, the database it used is opened once more and checked as `toolgate
// audit verify` checks one: the audit chain links from its first entry to
// its head, and every record decodes under its own id.
package storetest

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/txn"
	"github.com/toolgate/toolgate/txn/driver"
)

// Backend is a backend under test.
type Backend struct {
	// Fresh returns the location of a new, empty database (a file path, a
	// URL), removed when t ends; it may skip t, saying how to run it.
	Fresh func(t testing.TB) string
	// Open opens the database at a location Fresh returned, for writing,
	// again after a Close (the suite reopens a database to see what a
	// crash left). The backend calls failpoint at each commit step (the
	// driver.Step constants) and fails the write with the error it
	// returns.
	Open func(location string, failpoint func(step string) error) (driver.Backend, error)

	hook atomic.Pointer[func(string) error]
}

// Inspector shows what the suite checks under the contract: the ids of
// the claims (records in EXECUTING, begun and not ended), in id order, and
// every namespace's committed state. The backend returned by Open must
// implement it.
type Inspector interface {
	Claims(ctx context.Context) ([]string, error)
	DumpState(ctx context.Context) (map[string]map[string]string, error)
}

// Run runs the suite against b, each test as a subtest on a fresh
// database.
func Run(t *testing.T, b *Backend) {
	for _, c := range []struct {
		name string
		fn   func(*testing.T, *Backend)
	}{
		{"AtomicCommit", testAtomicCommit},
		{"RollbackByteExact", testRollbackByteExact},
		{"Conflict", testConflict},
		{"UpdateStateCAS", testUpdateStateCAS},
		{"AuditChain", testAuditChain},
		{"Recover", testRecover},
		{"Closed", testClosed},
		{"Unclaimed", testUnclaimed},
		{"AuditSearch", testAuditSearch},
		{"WalkAndPages", testWalkAndPages},
		{"SetClaimFails", testSetClaimFails},
		{"AuditGroups", testAuditGroups},
		{"ManyWrites", testManyWrites},
		{"StateScanPrefixes", testStateScanPrefixes},
	} {
		t.Run(c.name, func(t *testing.T) { c.fn(t, b) })
	}
}

// fresh returns a fresh location, checked when t ends (see Verify).
func (b *Backend) fresh(t *testing.T) string {
	t.Helper()
	loc := b.Fresh(t)
	t.Cleanup(func() {
		if t.Failed() {
			return
		}
		s, err := b.openErr(t, loc)
		if err != nil {
			t.Errorf("reopening the database to verify it: %v", err)
			return
		}
		for _, p := range Verify(context.Background(), s) {
			t.Errorf("verify: %s", p)
		}
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return loc
}

// openErr opens the database at loc behind a txn.Store.
func (b *Backend) openErr(t *testing.T, loc string) (*txn.Store, error) {
	t.Helper()
	be, err := b.Open(loc, b.failpoint)
	if err != nil {
		return nil, err
	}
	if _, ok := be.(Inspector); !ok {
		be.Close()
		t.Fatalf("the backend (%T) does not implement storetest.Inspector, which the suite needs", be)
	}
	return txn.NewStore(be, loc), nil
}

// open is openErr that fails t, and closes the store when t ends, failing
// t on Close's error.
func (b *Backend) open(t *testing.T, loc string) *txn.Store {
	t.Helper()
	s, err := b.openErr(t, loc)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func (b *Backend) failpoint(step string) error {
	if h := b.hook.Load(); h != nil {
		return (*h)(step)
	}
	return nil
}

// setFailpoint installs hook (nil: none) in every store of b.
func (b *Backend) setFailpoint(hook func(step string) error) {
	if hook == nil {
		b.hook.Store(nil)
		return
	}
	b.hook.Store(&hook)
}

// Verify checks the store as `toolgate audit verify` checks a database:
// the audit chain, replayed from the stored bytes, links from its first
// entry to its head, and every record decodes under the id it is stored
// under. It returns what it found wrong.
func Verify(ctx context.Context, s *txn.Store) []string {
	var problems []string
	v := &audit.Verifier{}
	if err := s.AuditRaw(ctx, v.Add); err != nil {
		problems = append(problems, fmt.Sprintf("the audit chain: %v", err)) // a read error, or what the verifier found in a group
	} else if err := v.Finish(); err != nil {
		problems = append(problems, fmt.Sprintf("the audit chain: %v", err))
	}
	err := s.WalkRecords(ctx, "", func(key string, rec *txn.Record, err error) bool {
		switch {
		case err != nil:
			problems = append(problems, fmt.Sprintf("record %q: %v", key, err))
		case rec.ExecutionID != key:
			problems = append(problems, fmt.Sprintf("record %q holds execution %q", key, rec.ExecutionID))
		}
		return true
	})
	if err != nil {
		problems = append(problems, fmt.Sprintf("reading the records: %v", err))
	}
	return problems
}

func dumpState(s *txn.Store) (map[string]map[string]string, error) {
	return s.Driver().(Inspector).DumpState(context.Background())
}

func claims(s *txn.Store) ([]string, error) {
	return s.Driver().(Inspector).Claims(context.Background())
}

var t0 = time.Date(2025, 3, 4, 5, 6, 7, 890, time.UTC)

// Record returns a valid record of the tool in the given state, at a
// fixed time: what the suite stores, for a backend's own tests too.
func Record(id, toolID, state string) *txn.Record {
	return &txn.Record{
		ExecutionID: id,
		CallID:      "call-" + id,
		Attempt:     1,
		ToolID:      toolID,
		ToolVersion: "1.0.0",
		State:       state,
		Transitions: []txn.Transition{{From: "AUTHORIZED", To: state, Event: "run", At: t0}},
		StartedAt:   t0,
	}
}

// Event returns an audit event {"what": s}.
func Event(s string) txn.AuditEvent {
	return txn.AuditEvent{Data: []byte(`{"what":` + strconv.Quote(s) + `}`)}
}

// VerifyChain checks the log with audit.Verifier, as `toolgate audit
// verify` does, and that it holds want entries numbered 1..want.
func VerifyChain(t testing.TB, s *txn.Store, want uint64) {
	t.Helper()
	ctx := context.Background()
	v := &audit.Verifier{}
	if err := s.AuditRaw(ctx, v.Add); err != nil {
		t.Fatalf("AuditRaw: %v", err)
	}
	if err := v.Finish(); err != nil {
		t.Fatalf("audit.Verifier: %v", err)
	}
	if v.Len() != want {
		t.Fatalf("the verifier saw %d entries, want %d", v.Len(), want)
	}
	head, err := s.AuditHead(ctx)
	if err != nil || head != want {
		t.Fatalf("AuditHead = %d, %v; want %d", head, err, want)
	}
	log, err := s.AuditLog(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range log {
		if e.Seq != uint64(i+1) {
			t.Fatalf("entry %d has seq %d: the chain has a gap", i, e.Seq)
		}
	}
	if uint64(len(log)) != want {
		t.Fatalf("AuditLog has %d entries, want %d", len(log), want)
	}
}
