package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/txn"
	"github.com/toolgate/toolgate/txn/pgstore"
)

// Many nodes on one Postgres database: two (or more) Stores on the same
// database, as two toolgate processes would be. These tests are about the
// Postgres backend alone (bbolt allows one writer per file), so they run
// only with TOOLGATE_TEST_POSTGRES set:
//
//	bash scripts/pg-test.sh run go test -race -run TestPostgresNodes ./txn/pgstore

func openNode(t *testing.T, dbURL, node string, lease time.Duration) *txn.Store {
	t.Helper()
	s, err := txn.Open(dbURL, &txn.Options{NoSync: true, Node: node, Lease: lease})
	if err != nil {
		t.Fatalf("Open node %q: %v", node, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// interrupted is the finish function a runtime passes to Recover.
func interrupted(r *txn.Record) ([]txn.AuditEvent, error) {
	r.State = "ROLLED_BACK"
	r.Transitions = append(r.Transitions, txn.Transition{From: "EXECUTING", To: "ROLLED_BACK", Event: "interrupted", At: t0})
	return []txn.AuditEvent{ev("interrupted " + r.ExecutionID)}, nil
}

// waitFor polls cond until it holds, failing after a generous bound (no
// timing is asserted: the bound only ends a test that would hang).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 30s for %s", what)
		}
	}
}

func TestPostgresNodesTwoWritersReadersAlongside(t *testing.T) {
	dbURL := freshPostgres(t)
	ctx := context.Background()
	a := openNode(t, dbURL, "a", 0)
	b := openNode(t, dbURL, "b", 0)
	if a.Node() != "a" || b.Node() != "b" {
		t.Fatalf("Node() = %q, %q", a.Node(), b.Node())
	}
	if err := a.Put(ctx, newRecord("r1", "tool", "DENIED"), ev("a")); err != nil {
		t.Fatal(err)
	}
	if err := b.Put(ctx, newRecord("r2", "tool", "DENIED"), ev("b")); err != nil {
		t.Fatal(err)
	}
	if err := b.Put(ctx, newRecord("r1", "tool", "DENIED"), ev("b")); !errors.Is(err, txn.ErrExists) {
		t.Fatalf("b Put of a's id = %v, want ErrExists", err)
	}
	for _, s := range []*txn.Store{a, b} {
		if rec, err := s.Get(ctx, "r2"); err != nil || rec.State != "DENIED" {
			t.Fatalf("Get r2 = %v, %v", rec, err)
		}
		if live, err := s.NodeLive(ctx, map[*txn.Store]string{a: "b", b: "a"}[s]); err != nil || !live {
			t.Fatalf("NodeLive(the other) = %v, %v", live, err)
		}
		if live, _ := s.NodeLive(ctx, s.Node()); live {
			t.Fatal("NodeLive(itself) = true: a node must settle its own")
		}
	}
	r, err := txn.Open(dbURL, &txn.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Node() != "" {
		t.Fatalf("a reader is a node: %q", r.Node())
	}
	verifyChain(t, r, 2)
	if err := r.PutState(ctx, "ns", "k", nil); !errors.Is(err, txn.ErrReadOnly) {
		t.Fatalf("reader PutState = %v, want ErrReadOnly", err)
	}
	// A second live run under a node name in use is refused.
	_, err = txn.Open(dbURL, &txn.Options{Node: "a", Timeout: 100 * time.Millisecond})
	if !errors.Is(err, txn.ErrLocked) || !strings.Contains(err.Error(), "node a is running") {
		t.Fatalf("a second node a = %v, want ErrLocked", err)
	}
}

// Two nodes race to claim the same execution ids, and to mark the same
// "intents" executed in the claim's guard (as runtime.claimGuard does):
// every id is claimed once, every intent marked once, across nodes.
func TestPostgresNodesRaceClaimsAtMostOnce(t *testing.T) {
	dbURL := freshPostgres(t)
	ctx := context.Background()
	nodes := []*txn.Store{openNode(t, dbURL, "a", 0), openNode(t, dbURL, "b", 0)}
	const ids, per = 40, 4 // per: goroutines per node and id
	var claimed, marked [ids]atomic.Int32
	var wg sync.WaitGroup
	for n, s := range nodes {
		for g := range per {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range ids {
					id := fmt.Sprintf("x%02d", i)
					if tx, err := s.Begin(ctx, newRecord(id, "tool", "EXECUTING")); err == nil {
						claimed[i].Add(1)
						_ = tx.Rollback(ctx, newRecord(id, "tool", "ROLLED_BACK"))
					} else if !errors.Is(err, txn.ErrExists) {
						t.Errorf("Begin %s: %v", id, err)
					}
					intent := "intent" + strconv.Itoa(i)
					guard := func(v *txn.StateView) error {
						if _, ok := v.Get("executed", intent); ok {
							return errAlready
						}
						return v.Put("executed", intent, []byte(s.Node()))
					}
					tx, err := s.BeginWith(ctx, newRecord(fmt.Sprintf("i%02d-%d-%d", i, n, g), "tool", "EXECUTING"), guard, ev("claim "+intent))
					if err == nil {
						marked[i].Add(1)
						_ = tx.Commit(ctx, newRecord(fmt.Sprintf("i%02d-%d-%d", i, n, g), "tool", "COMMITTED"))
					} else if !errors.Is(err, errAlready) {
						t.Errorf("BeginWith %s: %v", intent, err)
					}
				}
			}()
		}
	}
	wg.Wait()
	for i := range ids {
		if c, m := claimed[i].Load(), marked[i].Load(); c != 1 || m != 1 {
			t.Errorf("id %d claimed %d times, intent marked %d times; want 1 and 1", i, c, m)
		}
	}
	verifyChain(t, nodes[0], ids) // the claim of each intent's winner
}

var errAlready = errors.New("already executed")

// Two nodes race read-modify-write on one counter: UpdateState (the idempotency
// key's path) and Tx with its read-set check; no increment is lost, and the audit
// chain has one entry per write, gap-free, whichever node wrote it.
func TestPostgresNodesRaceCountersAndChain(t *testing.T) {
	dbURL := freshPostgres(t)
	ctx := context.Background()
	nodes := []*txn.Store{openNode(t, dbURL, "a", 0), openNode(t, dbURL, "b", 0)}
	const per, rounds = 4, 25
	var wg sync.WaitGroup
	var txWins atomic.Int64
	for n, s := range nodes {
		for g := range per {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range rounds {
					err := s.UpdateState(ctx, func(v *txn.StateView) error {
						old, _ := v.Get("ns", "cas")
						k, _ := strconv.Atoi(string(old))
						return v.Put("ns", "cas", []byte(strconv.Itoa(k+1)))
					}, ev("cas"))
					if err != nil {
						t.Errorf("UpdateState: %v", err)
					}
					id := fmt.Sprintf("t-%d-%d-%d", n, g, i)
					tx, err := s.Begin(ctx, newRecord(id, "tool", "EXECUTING"))
					if err != nil {
						t.Errorf("Begin: %v", err)
						continue
					}
					old, _, _ := tx.Get("ns", "occ")
					k, _ := strconv.Atoi(string(old))
					_ = tx.Put("ns", "occ", []byte(strconv.Itoa(k+1)))
					switch err := tx.Commit(ctx, newRecord(id, "tool", "COMMITTED"), ev("occ")); {
					case err == nil:
						txWins.Add(1)
					case errors.Is(err, txn.ErrConflict):
						if err := tx.Rollback(ctx, newRecord(id, "tool", "ROLLED_BACK")); err != nil {
							t.Errorf("Rollback: %v", err)
						}
					default:
						t.Errorf("Commit: %v", err)
					}
				}
			}()
		}
	}
	wg.Wait()
	total := 2 * per * rounds
	if v, _, _ := nodes[1].StateValue(ctx, "ns", "cas"); string(v) != strconv.Itoa(total) {
		t.Fatalf("UpdateState counter = %s, want %d: an increment was lost", v, total)
	}
	if v, _, _ := nodes[0].StateValue(ctx, "ns", "occ"); string(v) != strconv.FormatInt(txWins.Load(), 10) {
		t.Fatalf("Tx counter = %s, but %d commits succeeded: a conflict went undetected", v, txWins.Load())
	}
	verifyChain(t, nodes[0], uint64(total)+uint64(txWins.Load()))
}

// A node's claims are never finished while its lease holds; once it dies
// (SIGKILL: no renewal, its row left), another node finishes them after
// the lease expires, and a node restarted under the same name finishes
// its own at once.
func TestPostgresNodesLeaseRecovery(t *testing.T) {
	dbURL := freshPostgres(t)
	ctx := context.Background()
	const lease = 500 * time.Millisecond
	a := openNode(t, dbURL, "a", lease)
	b := openNode(t, dbURL, "b", lease)
	if _, err := b.Recover(ctx, interrupted); err != nil {
		t.Fatal(err)
	}
	txA, err := a.Begin(ctx, newRecord("a1", "tool", "EXECUTING"))
	if err != nil {
		t.Fatal(err)
	}
	// a is alive: b's recovery and sweeps (it keeps running them) leave
	// a's claim, for several leases.
	for range 4 {
		if done, err := b.Recover(ctx, interrupted); err != nil || len(done) != 0 {
			t.Fatalf("b Recover while a lives = %v, %v", done, err)
		}
		if done, err := pgstore.Sweep(b.Driver().(*pgstore.Store)); err != nil || len(done) != 0 {
			t.Fatalf("b sweep while a lives = %v, %v", done, err)
		}
		time.Sleep(lease / 2)
	}
	if err := txA.Commit(ctx, newRecord("a1", "tool", "COMMITTED")); err != nil {
		t.Fatalf("a's commit after b's sweeps: %v", err)
	}
	// a dies with a claim; b's background sweep finishes it once a's
	// lease has expired.
	if _, err := a.Begin(ctx, newRecord("a2", "tool", "EXECUTING")); err != nil {
		t.Fatal(err)
	}
	pgstore.Kill(a.Driver().(*pgstore.Store))
	waitFor(t, "b to finish dead a's claim", func() bool {
		r, err := b.Get(ctx, "a2")
		return err == nil && r.State == "ROLLED_BACK"
	})
	if live, _ := b.NodeLive(ctx, "a"); live {
		t.Fatal("dead a is still live")
	}
	// b dies with a claim and is restarted under its name: its claim is
	// finished by its own Recover, without waiting for the lease.
	if _, err := b.Begin(ctx, newRecord("b1", "tool", "EXECUTING")); err != nil {
		t.Fatal(err)
	}
	pgstore.Kill(b.Driver().(*pgstore.Store))
	b2 := openNode(t, dbURL, "b", time.Hour) // a long lease: only the name lets it in at once
	done, err := b2.Recover(ctx, interrupted)
	if err != nil || len(done) != 1 || done[0].ExecutionID != "b1" {
		t.Fatalf("restarted b's Recover = %v, %v", done, err)
	}
	if c, _ := pgstore.ClaimsOf(b2); len(c) != 0 {
		t.Fatalf("claims left: %v", c)
	}
	verifyChain(t, b2, 2)
}

// A node that cannot renew its lease stops claiming and says so, and
// claims again once a renewal succeeds.
func TestPostgresNodesLeaseLost(t *testing.T) {
	dbURL := freshPostgres(t)
	ctx := context.Background()
	const lease = 300 * time.Millisecond
	a := openNode(t, dbURL, "a", lease)
	if _, err := a.Begin(ctx, newRecord("ok", "tool", "EXECUTING")); err != nil {
		t.Fatal(err)
	}
	// Another run takes a's row over (as a twin under the same name would):
	// a's renewals fail, and the database refuses its claims at once.
	pgExec(t, dbURL, `UPDATE toolgate_nodes SET instance = 'x' || instance WHERE node = 'a'`)
	_, lost := a.Begin(ctx, newRecord("lost", "tool", "EXECUTING"))
	if !errors.Is(lost, txn.ErrLeaseLost) || !strings.Contains(lost.Error(), "node a starts no execution") {
		t.Fatalf("Begin without a lease = %v, want ErrLeaseLost saying so", lost)
	}
	// Other writes still go through: they need no lease.
	if err := a.PutState(ctx, "ns", "k", nil); err != nil {
		t.Fatalf("PutState without a lease: %v", err)
	}
	// Once its renewals have failed for a lease, it refuses before asking.
	waitFor(t, "a's renewal to fail", func() bool {
		_, err := a.Begin(ctx, newRecord("lost2-"+strconv.FormatInt(time.Now().UnixNano(), 10), "tool", "EXECUTING"))
		return err != nil && strings.Contains(err.Error(), "renewal failed")
	})
	// Nor, once its lease has lapsed, an execution that stores no claim.
	waitFor(t, "a to refuse an unclaimed execution", func() bool {
		_, err := a.BeginUnclaimed(ctx, newRecord("ro", "tool", "EXECUTING"))
		return errors.Is(err, txn.ErrLeaseLost) && strings.Contains(err.Error(), "node a starts no execution")
	})
	pgExec(t, dbURL, `UPDATE toolgate_nodes SET instance = substr(instance, 2) WHERE node = 'a'`)
	waitFor(t, "a to claim again", func() bool {
		_, err := a.Begin(ctx, newRecord("again-"+strconv.FormatInt(time.Now().UnixNano(), 10), "tool", "EXECUTING"))
		return err == nil
	})
}
