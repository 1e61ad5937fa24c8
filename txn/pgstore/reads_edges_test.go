package pgstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/toolgate/toolgate/txn"
	"github.com/toolgate/toolgate/txn/pgstore"
)

// reads calls each read of the backend once, returning their errors by
// name.
func reads(ctx context.Context, p *pgstore.Store) map[string]error {
	out := map[string]error{}
	_, out["Get"] = p.Get(ctx, "x")
	_, _, out["StateValue"] = p.StateValue(ctx, "ns", "k")
	_, out["StatePage"] = p.StatePage(ctx, "ns", "", 10)
	_, out["StateScan"] = p.StateScan(ctx, "ns", "")
	out["Walk"] = p.Walk(ctx, "", func(string, []byte) bool { return true })
	out["WalkBack"] = p.WalkBack(ctx, "", func(string, []byte) bool { return true })
	out["WalkBack from"] = p.WalkBack(ctx, "z", func(string, []byte) bool { return true })
	out["AuditRaw"] = p.AuditRaw(ctx, func(k, v []byte) error { return nil })
	_, out["AuditHead"] = p.AuditHead(ctx)
	out["AuditGroups"] = p.AuditGroups(ctx, 0, func(uint64, []byte) (bool, error) { return true, nil })
	out["AuditSearch"] = p.AuditSearch(ctx, []byte("x"), 0, 1<<40, func(uint64, []byte) (bool, error) { return true, nil })
	_, out["GetWithAudit"] = p.GetWithAudit(ctx, "x", func([]byte) ([]byte, int64, int64, error) { return []byte("x"), 0, 1 << 40, nil },
		func(uint64, []byte) (bool, error) { return true, nil })
	_, out["Describe"] = p.Describe(ctx)
	_, out["NodeLive"] = p.NodeLive(ctx, "other")
	return out
}

// A read Postgres fails says why, in Postgres's words (not that the store
// is closed, not a context's error); a read Postgres does not answer
// before its context ends returns the context's error. The store goes on
// after either.
func TestPostgresReadErrors(t *testing.T) {
	dbURL := freshPostgres(t)
	ctx := context.Background()
	p, err := pgstore.Open(dbURL, &pgstore.Options{NoSync: true, Node: "a", Lease: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	s := txn.NewStore(p, dbURL)
	if err := s.Put(ctx, newRecord("x", "tool", "DENIED"), ev("x")); err != nil {
		t.Fatal(err)
	}
	tables := []string{"toolgate_executions", "toolgate_state", "toolgate_audit", "toolgate_audit_head", "toolgate_nodes", "toolgate_meta"}
	for _, tb := range tables {
		pgExec(t, dbURL, `ALTER TABLE `+tb+` RENAME TO gone_`+tb)
	}
	for name, err := range reads(ctx, p) {
		if err == nil || errors.Is(err, txn.ErrClosed) || !strings.Contains(err.Error(), `relation "toolgate_`) || !strings.Contains(err.Error(), `" does not exist`) {
			t.Errorf("%s, its table gone = %v; want Postgres's error", name, err)
		}
	}
	for _, tb := range tables {
		pgExec(t, dbURL, `ALTER TABLE gone_`+tb+` RENAME TO `+tb)
	}

	// Tables locked: nothing answers before the context ends.
	c, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, `BEGIN; LOCK `+strings.Join(tables, ", ")+` IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	for name, read := range map[string]func(context.Context) error{
		"Get":        func(ctx context.Context) error { _, err := p.Get(ctx, "x"); return err },
		"StateValue": func(ctx context.Context) error { _, _, err := p.StateValue(ctx, "ns", "k"); return err },
		"AuditGroups": func(ctx context.Context) error {
			return p.AuditGroups(ctx, 0, func(uint64, []byte) (bool, error) { return true, nil })
		},
	} {
		tctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		err := read(tctx)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s, Postgres not answering = %v; want the context's error", name, err)
		}
	}
	if _, err := c.Exec(ctx, `ROLLBACK`); err != nil {
		t.Fatal(err)
	}
	for name, err := range reads(ctx, p) {
		if err != nil {
			t.Errorf("%s after = %v", name, err)
		}
	}
}
