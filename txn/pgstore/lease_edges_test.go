package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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
	log := stdLog(t)

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

	// b swept without a word on the log: only a sweep that fails says so.
	if strings.Contains(log.String(), "finishing the executions") {
		t.Errorf("the log after sweeps that succeeded:\n%s", log.String())
	}

	r, err := txn.Open(dbURL, &txn.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	r.OnSweep(func(context.Context) { t.Error("a reader's sweep hook ran") })
	if r.Node() != "" || r.NodeRun() != "" {
		t.Errorf("a reader's Node, NodeRun = %q, %q; want none", r.Node(), r.NodeRun())
	}
	if err := r.Driver().(*pgstore.Store).LeaseErr(); !errors.Is(err, txn.ErrReadOnly) {
		t.Errorf("a reader's LeaseErr = %v, want ErrReadOnly", err)
	}
}

// NodeLive tells whether another run's lease holds: a bare node name or a
// node's run ("name/run"). This store's own run and name, and "", are not
// another's: false without asking.
func TestPostgresNodesNodeLive(t *testing.T) {
	dbURL := freshPostgres(t)
	ctx := context.Background()
	a := openNode(t, dbURL, "a", 0)
	b := openNode(t, dbURL, "b", 0)
	bRun := b.NodeRun()
	pa := a.Driver().(*pgstore.Store)
	for _, tc := range []struct {
		run  string
		live bool
	}{
		{"", false}, {"a", false}, {a.NodeRun(), false},
		{"b", true}, {bRun, true}, {"b/" + strings.Repeat("0", 16), false}, {"c", false},
	} {
		if live, err := a.NodeLive(ctx, tc.run); err != nil || live != tc.live {
			t.Errorf("a.NodeLive(%q) = %v, %v; want %v", tc.run, live, err, tc.live)
		}
		// The backend's own, under txn's.
		if live, err := pa.NodeLive(ctx, tc.run); err != nil || live != tc.live {
			t.Errorf("the backend's NodeLive(%q) = %v, %v; want %v", tc.run, live, err, tc.live)
		}
	}
	// A clean Close ends the lease at once.
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	for _, run := range []string{"b", bRun} {
		if live, err := a.NodeLive(ctx, run); err != nil || live {
			t.Errorf("a.NodeLive(%q) after b closed = %v, %v; want false", run, live, err)
		}
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.NodeLive(ctx, "b"); !errors.Is(err, txn.ErrClosed) {
		t.Errorf("NodeLive after Close = %v, want ErrClosed", err)
	}
	if _, err := pa.NodeLive(ctx, "b"); !errors.Is(err, txn.ErrClosed) {
		t.Errorf("the backend's NodeLive after Close = %v, want ErrClosed", err)
	}
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

// A node whose lease row is gone (swept, or deleted by an operator) before
// its next renewal: its writes that need no lease go on; its claims are
// refused with ErrLeaseLost, as the database says its lease does not hold.
func TestPostgresNodesRowGone(t *testing.T) {
	dbURL := freshPostgres(t)
	ctx := context.Background()
	a := openNode(t, dbURL, "a", time.Hour) // no renewal during the test
	pgExec(t, dbURL, `DELETE FROM toolgate_nodes WHERE node = 'a'`)
	if err := a.UpdateState(ctx, func(v *txn.StateView) error { return v.Put("ns", "k", []byte("v")) }, ev("e")); err != nil {
		t.Fatalf("a write needing no lease, the node's row gone = %v", err)
	}
	if err := a.Put(ctx, newRecord("final", "tool", "DENIED")); err != nil {
		t.Fatalf("a final record, the node's row gone = %v", err)
	}
	if _, err := a.Begin(ctx, newRecord("x", "tool", "EXECUTING")); !errors.Is(err, txn.ErrLeaseLost) ||
		!strings.HasSuffix(err.Error(), "node a starts no execution until it is renewed (it was not renewed in time)") {
		t.Fatalf("Begin, the node's row gone = %v, want ErrLeaseLost", err)
	}
	verifyChain(t, a, 1)
}

// A node's sweep of its own orphaned claims (those no Tx of this run
// holds) never takes a claim whose Tx is live: after its Begin, and after
// a Commit that failed (a conflict: the Tx stays active), until the Tx
// ends.
func TestPostgresNodesOwnLiveClaimNotSwept(t *testing.T) {
	dbURL := freshPostgres(t)
	ctx := context.Background()
	a := openNode(t, dbURL, "a", time.Hour)
	if _, err := a.Recover(ctx, interrupted); err != nil {
		t.Fatal(err)
	}
	pa := a.Driver().(*pgstore.Store)
	sweep := func(when string) {
		t.Helper()
		done, err := pgstore.Sweep(pa)
		var ids []string
		for _, c := range done {
			ids = append(ids, c.ID)
		}
		if err != nil || len(done) != 0 {
			t.Fatalf("the sweep %s finished %q, %v; want none", when, ids, err)
		}
	}
	x, err := a.Begin(ctx, newRecord("x", "tool", "EXECUTING"))
	if err != nil {
		t.Fatal(err)
	}
	sweep("after Begin")
	x.Get("ns", "k")
	if err := x.Put("ns", "k", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := a.PutState(ctx, "ns", "k", []byte("other")); err != nil {
		t.Fatal(err)
	}
	if err := x.Commit(ctx, newRecord("x", "tool", "COMMITTED")); !errors.Is(err, txn.ErrConflict) {
		t.Fatalf("Commit after its read changed = %v, want ErrConflict", err)
	}
	sweep("after a failed Commit")
	if err := x.Rollback(ctx, newRecord("x", "tool", "ROLLED_BACK")); err != nil {
		t.Fatalf("Rollback after the sweep = %v", err)
	}
	// A claim of this node that no Tx holds is an orphan: swept.
	if _, err := a.Begin(ctx, newRecord("y", "tool", "EXECUTING")); err != nil {
		t.Fatal(err)
	}
	data, err := txn.EncodeRecord(newRecord("orphan", "tool", "EXECUTING"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, `INSERT INTO toolgate_executions (id, executing, data, node) VALUES ('orphan', true, $1, 'a')`, data); err != nil {
		t.Fatal(err)
	}
	done, err := pgstore.Sweep(pa)
	if err != nil || len(done) != 1 || done[0].ID != "orphan" {
		t.Fatalf("the sweep of an orphan = %v, %v; want it alone", done, err)
	}
}

// Open under a node name whose lease another run holds: a run on another
// host, or one whose holder it cannot read, is waited for (Options.
// Timeout) and then refused, ErrLocked naming the holder; a run on this
// host whose process is gone is taken over at once.
func TestPostgresNodesTakeOver(t *testing.T) {
	dbURL := freshPostgres(t)
	openNode(t, dbURL, "setup", 0) // the schema
	host, _ := os.Hostname()
	// A pid that is gone: a child that has exited and been reaped.
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := cmd.Process.Pid
	for _, tc := range []struct {
		holder string
		taken  bool
	}{
		{"host other-" + host + " pid 1 run abc", false},
		{"garbage", false},
		{"host " + host + " pid 1 run abc", false}, // init: alive
		{fmt.Sprintf("host %s pid %d run abc", host, dead), true},
		// This process, a run of no open store: an earlier run in a
		// restarted container (the same pid again).
		{fmt.Sprintf("host %s pid %d run abc", host, os.Getpid()), true},
	} {
		pgExec(t, dbURL, `DELETE FROM toolgate_nodes WHERE node = 'n'`)
		pgExec(t, dbURL, `INSERT INTO toolgate_nodes (node, instance, holder, started, expires)
			VALUES ('n', 'abc', '`+tc.holder+`', clock_timestamp(), clock_timestamp() + interval '1 hour')`)
		start := time.Now()
		p, err := pgstore.Open(dbURL, &pgstore.Options{NoSync: true, Node: "n", Timeout: 300 * time.Millisecond})
		if tc.taken {
			if err != nil {
				t.Errorf("Open of a node held by %q = %v; want it taken over", tc.holder, err)
				continue
			}
			p.Close()
			continue
		}
		if err == nil {
			p.Close()
			t.Errorf("Open of a node held by %q succeeded; want ErrLocked", tc.holder)
			continue
		}
		if !errors.Is(err, txn.ErrLocked) || !strings.Contains(err.Error(), "node n is running ("+tc.holder+", its lease renewed until ") {
			t.Errorf("Open of a node held by %q = %v; want ErrLocked naming the holder", tc.holder, err)
		}
		if waited := time.Since(start); waited < 300*time.Millisecond {
			t.Errorf("Open of a node held by %q gave up after %v; want it to wait its timeout", tc.holder, waited)
		}
	}
	// A store of this process holds it: a twin, refused.
	openNode(t, dbURL, "twin", 0)
	if p, err := pgstore.Open(dbURL, &pgstore.Options{NoSync: true, Node: "twin", Timeout: 300 * time.Millisecond}); !errors.Is(err, txn.ErrLocked) {
		if err == nil {
			p.Close()
		}
		t.Errorf("Open of a node an open store of this process holds = %v, want ErrLocked", err)
	}
	// Without a Timeout, Open waits DefaultTimeout.
	start := time.Now()
	if p, err := pgstore.Open(dbURL, &pgstore.Options{NoSync: true, Node: "twin"}); !errors.Is(err, txn.ErrLocked) {
		if err == nil {
			p.Close()
		}
		t.Errorf("Open of a node held, no Timeout = %v, want ErrLocked", err)
	}
	if waited := time.Since(start); waited < pgstore.DefaultTimeout {
		t.Errorf("Open of a node held, no Timeout, gave up after %v; want it to wait DefaultTimeout (%v)", waited, pgstore.DefaultTimeout)
	}
}
