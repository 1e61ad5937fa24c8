package pgstore_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/txn"
	"github.com/toolgate/toolgate/txn/pgstore"
)

// Leases at their edges: a claim finished behind its node's back, the
// sweep hook, a lease Open refuses. About the Postgres backend alone:
//
//	bash scripts/pg-test.sh run go test -run 'TestPostgresNodes|TestPostgresOpenLease' ./txn/pgstore

// A Tx whose claim is not there any more (another node finished it, or an
// operator) ends with ErrNotFound. While the node's lease holds, that is
// all it says; once the lease has lapsed, it says that another node may
// have finished the claim as interrupted.
func TestPostgresNodesClaimGone(t *testing.T) {
	dbURL := freshPostgres(t)
	ctx := context.Background()
	a := openNode(t, dbURL, "a", 300*time.Millisecond)
	x, err := a.Begin(ctx, newRecord("x", "tool", "EXECUTING"))
	if err != nil {
		t.Fatal(err)
	}
	y, err := a.Begin(ctx, newRecord("y", "tool", "EXECUTING"))
	if err != nil {
		t.Fatal(err)
	}
	pgExec(t, dbURL, `UPDATE toolgate_executions SET executing = false WHERE id = 'x'::bytea`)
	err = x.Commit(ctx, newRecord("x", "tool", "COMMITTED"))
	if !errors.Is(err, txn.ErrNotFound) || !strings.Contains(err.Error(), `execution "x" is not executing`) || strings.Contains(err.Error(), "lease") {
		t.Fatalf("Commit of a claim gone, the lease holding = %v; want ErrNotFound, not a word of the lease", err)
	}
	// Another run takes a's row over: a's renewals fail, its lease lapses.
	pgExec(t, dbURL, `UPDATE toolgate_nodes SET instance = 'x' || instance WHERE node = 'a'`)
	waitFor(t, "a's lease to lapse", func() bool { return a.Driver().(*pgstore.Store).LeaseErr() != nil })
	pgExec(t, dbURL, `UPDATE toolgate_executions SET executing = false WHERE id = 'y'::bytea`)
	err = y.Rollback(ctx, newRecord("y", "tool", "ROLLED_BACK"))
	if !errors.Is(err, txn.ErrNotFound) || !strings.Contains(err.Error(), "(this node's lease lapsed: another node may have finished it as interrupted)") {
		t.Fatalf("Rollback of a claim gone, the lease lapsed = %v; want ErrNotFound saying the lease lapsed", err)
	}
	pgExec(t, dbURL, `UPDATE toolgate_nodes SET instance = substr(instance, 2) WHERE node = 'a'`)
}

// The hook OnSweep registers runs after a background sweep has finished
// what a dead node left, and after this node's own lease row was lost and
// it registered again under a new run (what the old run had in flight was
// finished by whoever swept it). A reader has no lease: OnSweep is a no-op.
func TestPostgresNodesOnSweep(t *testing.T) {
	dbURL := freshPostgres(t)
	ctx := context.Background()
	const lease = 300 * time.Millisecond

	// A background sweep.
	a := openNode(t, dbURL, "a", lease)
	b := openNode(t, dbURL, "b", lease)
	if _, err := b.Recover(ctx, interrupted); err != nil {
		t.Fatal(err)
	}
	var swept atomic.Int32
	var sawFinished atomic.Bool
	b.OnSweep(func(context.Context) {
		swept.Add(1)
		if r, err := b.Get(ctx, "a1"); err == nil && r.State == "ROLLED_BACK" {
			sawFinished.Store(true)
		}
	})
	if _, err := a.Begin(ctx, newRecord("a1", "tool", "EXECUTING")); err != nil {
		t.Fatal(err)
	}
	pgstore.Kill(a.Driver().(*pgstore.Store))
	waitFor(t, "b's hook after sweeping dead a's claim", sawFinished.Load)

	// A lost row: c, which recovers nothing (so sweeps nothing), registers
	// again and runs the hook.
	c := openNode(t, dbURL, "c", lease)
	var regained atomic.Int32
	c.OnSweep(func(context.Context) { regained.Add(1) })
	run := c.NodeRun()
	pgExec(t, dbURL, `DELETE FROM toolgate_nodes WHERE node = 'c'`)
	waitFor(t, "c to register again and run its hook", func() bool { return regained.Load() > 0 })
	if c.NodeRun() == run || !strings.HasPrefix(c.NodeRun(), "c/") {
		t.Fatalf("c's run after registering again = %q (was %q); want a new run of c", c.NodeRun(), run)
	}

	r, err := txn.Open(dbURL, &txn.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	r.OnSweep(func(context.Context) { t.Error("a reader's sweep hook ran") })
}

// A lease Open cannot use (negative, shorter than MinLease) fails Open,
// saying why, for pgstore.Open as for txn.Open, rather than starting a
// renewal that cannot tick.
func TestPostgresOpenLeaseRefused(t *testing.T) {
	dbURL := freshPostgres(t)
	for _, tc := range []struct {
		lease time.Duration
		want  string
	}{
		{-time.Second, "lease -1s is negative"},
		{-time.Nanosecond, "lease -1ns is negative"},
		{time.Nanosecond, "lease 1ns is too short: at least 100ms"},
		{pgstore.MinLease - 1, "lease 99.999999ms is too short: at least 100ms"},
	} {
		p, err := pgstore.Open(dbURL, &pgstore.Options{NoSync: true, Node: "n", Lease: tc.lease})
		if err == nil {
			p.Close()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("pgstore.Open with lease %v = %v; want an error saying %q", tc.lease, err, tc.want)
		}
		if _, err := txn.Open(dbURL, &txn.Options{NoSync: true, Node: "n", Lease: tc.lease}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("txn.Open with lease %v = %v; want an error saying %q", tc.lease, err, tc.want)
		}
	}
	p, err := pgstore.Open(dbURL, &pgstore.Options{NoSync: true, Node: "n", Lease: pgstore.MinLease})
	if err != nil {
		t.Fatalf("pgstore.Open with lease MinLease = %v", err)
	}
	p.Close()
}
