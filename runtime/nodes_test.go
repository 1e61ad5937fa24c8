package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/internal/testdb"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
)

// Two runtimes on one Postgres database, as two nodes (processes, hosts)
// would be: an idempotency key and an approved intent run their tool once
// across both, however the calls race. About the Postgres backend alone (a
// bbolt file has one writer), so these run only with TOOLGATE_TEST_POSTGRES:
//
//	bash scripts/pg-test.sh run go test -race -run TestPostgresNodes ./runtime

func sharedPostgres(t *testing.T) string {
	t.Helper()
	return testdb.FreshPostgres(t)
}

// twoNodes opens two runtimes on dbURL whose tool test.count counts its
// runs in ran (and takes a little while, so that calls overlap).
func twoNodes(t *testing.T, dbURL string, ran *atomic.Int32, approval bool) []*tgruntime.Runtime {
	t.Helper()
	var nodes []*tgruntime.Runtime
	for range 2 {
		reg := tools.NewRegistry()
		d := decl("test.count")
		d.RequiresApproval = approval
		if err := reg.Register(tool(d, func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
			ran.Add(1)
			time.Sleep(20 * time.Millisecond)
			return in, nil
		})); err != nil {
			t.Fatal(err)
		}
		rt, err := tgruntime.Open(dbURL, &tgruntime.Options{Registry: reg, Grants: grantAll, NoSync: true, MaxConcurrent: 32})
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		t.Cleanup(func() { rt.Close(context.Background()) })
		nodes = append(nodes, rt)
	}
	return nodes
}

func TestPostgresNodesIdempotencyKeyRunsOnce(t *testing.T) {
	dbURL := sharedPostgres(t)
	var ran atomic.Int32
	nodes := twoNodes(t, dbURL, &ran, false)
	const keys, per = 10, 6
	var wg sync.WaitGroup
	for k := range keys {
		for _, rt := range nodes {
			for range per {
				wg.Add(1)
				go func() {
					defer wg.Done()
					inv := invoke("test.count", `{"msg":"m"}`)
					inv.IdempotencyKey = fmt.Sprintf("key-%d", k)
					res, err := rt.Execute(context.Background(), inv)
					if err != nil || res.State != "COMPLETED" {
						t.Errorf("key %d: %v, %v", k, res, err)
					}
				}()
			}
		}
	}
	wg.Wait()
	if n := ran.Load(); n != keys {
		t.Fatalf("the tool ran %d times for %d keys, each sent %d times through each of two nodes", n, keys, per)
	}
	verifyNodes(t, nodes[0])
}

func TestPostgresNodesApprovedIntentRunsOnce(t *testing.T) {
	dbURL := sharedPostgres(t)
	var ran atomic.Int32
	nodes := twoNodes(t, dbURL, &ran, true)
	ctx := context.Background()
	const intents, per = 8, 4
	var wg sync.WaitGroup
	var executed atomic.Int32
	for i := range intents {
		in, err := nodes[i%2].Propose(ctx, invoke("test.count", fmt.Sprintf(`{"msg":"i%d"}`, i)))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := nodes[(i+1)%2].Approve(ctx, in.ID, "approver"); err != nil {
			t.Fatal(err)
		}
		for _, rt := range nodes {
			for range per {
				wg.Add(1)
				go func() {
					defer wg.Done()
					res, err := rt.Execute(ctx, tgruntime.Invocation{IntentID: in.ID, IntentHash: in.Hash, Principal: "tester"})
					var ie *tgruntime.IntentError
					switch {
					case err == nil && res.State == "COMPLETED" && !res.Replayed:
						executed.Add(1)
					case errors.As(err, &ie):
					default:
						t.Errorf("intent %d: %v, %v", i, res, err)
					}
				}()
			}
		}
	}
	wg.Wait()
	if n, x := ran.Load(), executed.Load(); n != intents || x != intents {
		t.Fatalf("the tool ran %d times and %d executions answered as first for %d intents; want %d and %d", n, x, intents, intents, intents)
	}
	verifyNodes(t, nodes[1])
}

// verifyNodes checks the shared audit chain (numbered without gaps,
// linked) and the records, intents and keys against it, as toolgate audit
// verify does.
func verifyNodes(t *testing.T, rt *tgruntime.Runtime) {
	t.Helper()
	ctx := context.Background()
	log, err := rt.AuditLog(ctx, 0, 0)
	if err != nil || len(log) == 0 {
		t.Fatalf("AuditLog: %d entries, %v", len(log), err)
	}
	for i, e := range log {
		if e.Seq != uint64(i+1) || i > 0 && e.PrevHash != log[i-1].Hash {
			t.Fatalf("entry %d (seq %d): the chain has a gap or a broken link", i, e.Seq)
		}
	}
	if _, err := rt.VerifyRecords(ctx, func(d tgruntime.Discrepancy) error {
		t.Errorf("discrepancy: %+v", d)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// A node that opens while another is staging a file (a shared Postgres,
// the same host) leaves that node's staged file alone: its recovery
// finishes only what dead nodes left, and the write becomes visible at
// the other node's commit.
func TestPostgresNodesOpenLeavesAnotherNodesStagedFiles(t *testing.T) {
	dbURL := sharedPostgres(t)
	dir := t.TempDir()
	staged, release := make(chan struct{}), make(chan struct{})
	reg := tools.NewRegistry()
	if err := reg.Register(tool(decl("test.stage", func(d *tools.Declaration) {
		d.RequiredCapabilities = []capability.Capability{{Name: "filesystem.write", Scope: dir}}
	}), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
		if _, err := env.FS("filesystem.write").WriteStaged("out.txt", []byte("written"), 0o644); err != nil {
			return msg{}, err
		}
		close(staged)
		<-release
		return in, nil
	})); err != nil {
		t.Fatal(err)
	}
	opts := writeOpts(dir)
	opts.Registry, opts.NoSync = reg, true
	a, err := tgruntime.Open(dbURL, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(context.Background())
	done := make(chan error, 1)
	go func() {
		res, err := a.Execute(context.Background(), invoke("test.stage", `{"msg":"x"}`))
		if err == nil && res.State != "COMPLETED" {
			err = fmt.Errorf("ended %s", res.State)
		}
		done <- err
	}()
	<-staged
	b, err := tgruntime.Open(dbURL, &tgruntime.Options{Grants: grantAll, NoSync: true, WorkDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(context.Background())
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("node a's call, after node b opened: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "out.txt")); err != nil || string(got) != "written" {
		t.Fatalf("out.txt = %q, %v", got, err)
	}
}

// A node dies (its lease lapses) with a keyed call running: another node
// finishes the execution as interrupted and settles the key, so that the
// key answers the stored result, never runs the tool again, and does not
// stay "in flight" until its TTL.
func TestPostgresNodesDeadNodesKeySettled(t *testing.T) {
	dbURL := sharedPostgres(t)
	t.Setenv("TOOLGATE_LEASE", "300ms")
	ctx := context.Background()
	var ran atomic.Int32
	started, release := make(chan struct{}), make(chan struct{})
	open := func(node string) *tgruntime.Runtime {
		t.Setenv("TOOLGATE_NODE", node)
		reg := tools.NewRegistry()
		if err := reg.Register(tool(decl("test.slow", limit(time.Minute)), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
			if ran.Add(1) == 1 {
				close(started)
			}
			<-release
			return in, nil
		})); err != nil {
			t.Fatal(err)
		}
		rt, err := tgruntime.Open(dbURL, &tgruntime.Options{Registry: reg, Grants: grantAll, NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rt.Close(context.Background()) })
		return rt
	}
	a, b := open("a"), open("b")
	defer close(release)
	inv := invoke("test.slow", `{"msg":"x"}`)
	inv.IdempotencyKey = "the-key"
	go a.Execute(ctx, inv) //nolint:errcheck // its commit fails: the node is dead to the others
	<-started
	// Node a is cut off: its renewals fail from now on, and its lease has
	// expired.
	c, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, `UPDATE toolgate_nodes SET instance = 'gone', expires = clock_timestamp() - interval '1 second' WHERE node = 'a'`); err != nil {
		t.Fatal(err)
	}
	inv.IdempotencyNoWait = true
	var res *tgruntime.Result
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		res, err = b.Execute(ctx, inv)
		var ie *tgruntime.IdempotencyError
		if !errors.As(err, &ie) || ie.Code != "idempotency_in_flight" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the dead node's key is still in flight after 20s")
		}
	}
	if res == nil || !res.Replayed || res.State != "ROLLED_BACK" || res.Error == nil || res.Error.Code != "interrupted" {
		t.Fatalf("the key after node a died = %+v, %v; want its interrupted result, replayed", res, err)
	}
	if n := ran.Load(); n != 1 {
		t.Fatalf("the tool ran %d times", n)
	}
	verifyNodes(t, b)
}
