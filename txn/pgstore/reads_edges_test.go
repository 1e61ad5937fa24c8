package pgstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/toolgate/toolgate/txn"
	"github.com/toolgate/toolgate/txn/driver"
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

// The backend's calls, under txn's own checks: a cancelled context fails
// each at once with its error; after Close each fails with ErrClosed; a
// reader refuses the writes with ErrReadOnly. StatePage of no entries
// (n <= 0) reads nothing.
func TestPostgresCallsRefused(t *testing.T) {
	dbURL := freshPostgres(t)
	ctx := context.Background()
	p, err := pgstore.Open(dbURL, nil) // nil options: the defaults
	if err != nil {
		t.Fatal(err)
	}
	if err := txn.NewStore(p, dbURL).PutState(ctx, "ns", "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, -1} {
		if es, err := p.StatePage(ctx, "ns", "", n); err != nil || len(es) != 0 {
			t.Errorf("StatePage of %d entries = %v, %v; want none", n, es, err)
		}
	}
	write := func(ctx context.Context) error {
		return p.UpdateState(ctx, func(r driver.StateReader) (driver.Writes, error) { return nil, nil }, nil)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	calls := reads(cctx, p)
	calls["UpdateState"] = write(cctx)
	for name, err := range calls {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a cancelled context = %v, want context.Canceled", name, err)
		}
	}
	claims, err := p.Claims(ctx)
	if err != nil || len(claims) != 0 {
		t.Errorf("Claims = %v, %v", claims, err)
	}
	p.Close()
	calls = reads(ctx, p)
	calls["UpdateState"] = write(ctx)
	for name, err := range calls {
		if !errors.Is(err, txn.ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", name, err)
		}
	}
	if _, err := p.Claims(ctx); err == nil {
		t.Error("Claims after Close succeeded")
	}
	if _, err := p.DumpState(ctx); err == nil {
		t.Error("DumpState after Close succeeded")
	}

	r, err := pgstore.Open(dbURL, &pgstore.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for name, err := range map[string]error{
		"Begin":       r.Begin(ctx, "x", []byte("data"), nil, nil),
		"Put":         r.Put(ctx, "x", nil, nil, []byte("data"), nil),
		"UpdateState": r.UpdateState(ctx, func(driver.StateReader) (driver.Writes, error) { return nil, nil }, nil),
		"SetClaim":    r.SetClaim(ctx, "x", func(b []byte) ([]byte, error) { return b, nil }),
	} {
		if !errors.Is(err, txn.ErrReadOnly) {
			t.Errorf("a reader's %s = %v, want ErrReadOnly", name, err)
		}
	}
	if _, err := r.Recover(ctx, func([]driver.Claim) ([]driver.Claim, []driver.Event, error) { return nil, nil, nil }); !errors.Is(err, txn.ErrReadOnly) {
		t.Errorf("a reader's Recover = %v, want ErrReadOnly", err)
	}
	if v, ok, err := r.StateValue(ctx, "ns", "k"); err != nil || !ok || string(v) != "v" {
		t.Errorf("a reader's StateValue = %q, %v, %v", v, ok, err)
	}
}

// A URL: its password is never shown; one that does not parse fails Open
// saying so, in the user's terms.
func TestPostgresURLs(t *testing.T) {
	if got := pgstore.Redact("postgres://u:s3cret@db.example/x"); strings.Contains(got, "s3cret") || !strings.HasPrefix(got, "postgres://u:") {
		t.Errorf("Redact = %q", got)
	}
	if got := pgstore.Redact("postgres://u:s3cret@%zz/x"); got != "postgres://(unparsable URL)" {
		t.Errorf("Redact of an unparsable URL = %q", got)
	}
	for _, u := range []string{"postgres://u:s3cret@%zz/x", "postgres://u:s3cret@host/x?sslmode=nonsense"} {
		_, err := pgstore.Open(u, nil)
		if err == nil || strings.Contains(err.Error(), "s3cret") || !strings.HasPrefix(err.Error(), "txn: database URL postgres://") {
			t.Errorf("Open(%q) = %v; want an error about the URL, the password hidden", u, err)
		}
	}
}
