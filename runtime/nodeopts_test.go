package runtime_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	tgruntime "github.com/toolgate/toolgate/runtime"
)

// Options.Node, Options.Lease and Options.Logger: what an embedder sets
// instead of $TOOLGATE_NODE and $TOOLGATE_LEASE, and where the lease's
// messages go. The Postgres parts run with TOOLGATE_TEST_POSTGRES:
//
//	bash scripts/pg-test.sh run go test -race -run 'Postgres' ./runtime

// badNodeOptions are Node and Lease values Open refuses, by field.
var badNodeOptions = []struct {
	name  string
	opts  tgruntime.Options
	field string
}{
	{"negative lease", tgruntime.Options{Lease: -time.Second}, "Lease"},
	{"lease too short", tgruntime.Options{Lease: 50 * time.Millisecond}, "Lease"},
	{"node with a newline", tgruntime.Options{Node: "a\nb"}, "Node"},
	{"node too long", tgruntime.Options{Node: strings.Repeat("n", 201)}, "Node"},
}

// checkOptionError fails unless err is an *OptionError naming field.
func checkOptionError(t *testing.T, err error, field string) {
	t.Helper()
	var oe *tgruntime.OptionError
	if !errors.As(err, &oe) || oe.Field != field || !strings.Contains(err.Error(), "Options."+field) {
		t.Fatalf("Open = %v, want an *OptionError naming Options.%s", err, field)
	}
}

func TestOpen_NodeLeaseRefused(t *testing.T) {
	for _, c := range badNodeOptions {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "tg.db")
			o := c.opts
			if err := o.Validate(); err == nil {
				t.Fatal("Validate accepted it")
			}
			rt, err := tgruntime.Open(path, &o)
			if err == nil {
				rt.Close(context.Background())
			}
			checkOptionError(t, err, c.field)
			if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("the refused Open left the database file: %v", err)
			}
		})
	}
	if err := (&tgruntime.Options{Node: "a", Lease: 100 * time.Millisecond}).Validate(); err != nil {
		t.Fatalf("the shortest lease: %v", err)
	}
}

// On Postgres a refused Open neither creates the tables nor takes a lease.
func TestPostgresNodesOptionsRefused(t *testing.T) {
	dbURL := sharedPostgres(t)
	ctx := context.Background()
	for _, c := range badNodeOptions {
		t.Run(c.name, func(t *testing.T) {
			o := c.opts
			o.NoSync = true
			rt, err := tgruntime.Open(dbURL, &o)
			if err == nil {
				rt.Close(ctx)
			}
			checkOptionError(t, err, c.field)
		})
	}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var table *string
	if err := conn.QueryRow(ctx, `SELECT to_regclass('toolgate_nodes')::text`).Scan(&table); err != nil || table != nil {
		t.Fatalf("after refused Opens, toolgate_nodes = %v, %v; want no table", table, err)
	}
}

// An explicit Node and Lease win over $TOOLGATE_NODE and $TOOLGATE_LEASE,
// which still apply when the fields are zero; the two named nodes see each
// other in toolgate_nodes.
func TestPostgresNodesOptionsNodeAndLease(t *testing.T) {
	dbURL := sharedPostgres(t)
	t.Setenv("TOOLGATE_NODE", "from-env")
	t.Setenv("TOOLGATE_LEASE", "2h")
	ctx := context.Background()
	open := func(node string, lease time.Duration) *tgruntime.Runtime {
		rt, err := tgruntime.Open(dbURL, &tgruntime.Options{Registry: registry(t), NoSync: true, Node: node, Lease: lease})
		if err != nil {
			t.Fatalf("Open node %q: %v", node, err)
		}
		t.Cleanup(func() { rt.Close(ctx) })
		return rt
	}
	a := open("a", time.Hour)
	b := open("b", 0)
	env := open("", 0)
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT node, expires - started FROM toolgate_nodes ORDER BY node`)
	if err != nil {
		t.Fatal(err)
	}
	leases := map[string]time.Duration{}
	for rows.Next() {
		var node string
		var d time.Duration
		if err := rows.Scan(&node, &d); err != nil {
			t.Fatal(err)
		}
		leases[node] = d
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	// The lease's row is written with expires = now + lease: within a
	// minute of it (no renewal comes before 20 minutes).
	near := func(d, want time.Duration) bool { return d >= want && d < want+time.Minute }
	if len(leases) != 3 || !near(leases["a"], time.Hour) || !near(leases["b"], 2*time.Hour) || !near(leases["from-env"], 2*time.Hour) {
		t.Fatalf("toolgate_nodes (node: expires - started) = %v; want a: 1h, b and from-env: 2h", leases)
	}
	for _, c := range []struct {
		rt   *tgruntime.Runtime
		node string
	}{{a, "a"}, {b, "b"}, {env, "from-env"}} {
		if got := tgruntime.StoreOf(c.rt).Node(); got != c.node {
			t.Fatalf("Node() = %q, want %q", got, c.node)
		}
	}
	for _, p := range [][2]*tgruntime.Runtime{{a, b}, {b, a}} {
		other := tgruntime.StoreOf(p[1]).Node()
		if live, err := tgruntime.StoreOf(p[0]).NodeLive(ctx, other); err != nil || !live {
			t.Fatalf("%s sees %s live = %v, %v", tgruntime.StoreOf(p[0]).Node(), other, live, err)
		}
	}
	// A second runtime under a's name is refused while a runs.
	_, err = tgruntime.Open(dbURL, &tgruntime.Options{Registry: registry(t), NoSync: true, Node: "a", OpenTimeout: 200 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "node a is running") {
		t.Fatalf("a second node a = %v, want it refused", err)
	}
}

// records is a slog.Handler keeping what it is given.
type records struct {
	mu  sync.Mutex
	all []slog.Record
}

func (h *records) Enabled(context.Context, slog.Level) bool { return true }
func (h *records) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *records) WithGroup(string) slog.Handler            { return h }
func (h *records) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.all = append(h.all, r.Clone())
	h.mu.Unlock()
	return nil
}

// find returns the first record whose message starts with prefix, and its
// attributes.
func (h *records) find(prefix string) (slog.Record, map[string]string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.all {
		if strings.HasPrefix(r.Message, prefix) {
			attrs := map[string]string{}
			r.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value.String(); return true })
			return r, attrs, true
		}
	}
	return slog.Record{}, nil, false
}

// waitRecord waits for a record whose message starts with prefix.
func (h *records) waitRecord(t *testing.T, prefix string) (slog.Record, map[string]string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if r, attrs, ok := h.find(prefix); ok {
			return r, attrs
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited 30s for a record %q", prefix)
		}
	}
}

// The lease's messages reach Options.Logger as records, the node an
// attribute: its lapse (another run took its row), its renewal, and its
// return under a new lease once its row was gone.
func TestPostgresNodesLoggerLeaseMessages(t *testing.T) {
	dbURL := sharedPostgres(t)
	ctx := context.Background()
	h := &records{}
	rt, err := tgruntime.Open(dbURL, &tgruntime.Options{Registry: registry(t), NoSync: true,
		Node: "a", Lease: 300 * time.Millisecond, Logger: slog.New(h)})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(ctx)
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	exec := func(sql string) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// Another run takes a's row over, for an hour: a's renewals fail, and
	// its lease lapses (the row, unexpired, is not swept meanwhile).
	exec(`UPDATE toolgate_nodes SET instance = 'x' || instance, expires = clock_timestamp() + interval '1 hour' WHERE node = 'a'`)
	r, attrs := h.waitRecord(t, "lease lapsed")
	if r.Level != slog.LevelWarn || attrs["node"] != "a" || !strings.Contains(attrs["reason"], "another run") {
		t.Fatalf("lapse record: level %v, attributes %v", r.Level, attrs)
	}
	if _, _, ok := h.find("lease renewed"); ok {
		t.Fatal("renewed before its row was given back")
	}
	exec(`UPDATE toolgate_nodes SET instance = substr(instance, 2) WHERE node = 'a'`)
	r, attrs = h.waitRecord(t, "lease renewed")
	if r.Level != slog.LevelInfo || attrs["node"] != "a" {
		t.Fatalf("renewal record: level %v, attributes %v", r.Level, attrs)
	}
	// Its row is gone (as after another node's sweep): it registers again.
	exec(`DELETE FROM toolgate_nodes WHERE node = 'a'`)
	r, attrs = h.waitRecord(t, "its lease had lapsed")
	if r.Level != slog.LevelWarn || attrs["node"] != "a" || !strings.Contains(r.Message, "runs on under a new lease") {
		t.Fatalf("new-lease record: %q, level %v, attributes %v", r.Message, r.Level, attrs)
	}
}
