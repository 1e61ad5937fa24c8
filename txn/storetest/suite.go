package storetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"sync"
	"testing"

	"github.com/toolgate/toolgate/txn"
)

func testAtomicCommit(t *testing.T, b *Backend) {
	path := b.fresh(t)
	{
		ctx := context.Background()
		s := b.open(t, path)
		tx, err := s.Begin(ctx, Record("ex-1", "tool", "EXECUTING"), Event("begin"))
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Put("ns", "a", []byte("1")); err != nil {
			t.Fatal(err)
		}
		if err := tx.Put("ns", "b", nil); err != nil {
			t.Fatal(err)
		}
		// A failure at any step of the commit writes nothing of it.
		for _, step := range []string{txn.StepCheckReads, txn.StepApplyWrite, txn.StepRecord, txn.StepAudit} {
			b.setFailpoint(func(got string) error {
				if got == step {
					return errors.New("injected at " + step)
				}
				return nil
			})
			err := tx.Commit(ctx, Record("ex-1", "tool", "COMMITTED"), Event("commit"))
			b.setFailpoint(nil)
			if !errors.Is(err, txn.ErrCommit) {
				t.Fatalf("%s: Commit = %v, want ErrCommit", step, err)
			}
			if st, _ := dumpState(s); len(st["ns"]) != 0 {
				t.Fatalf("%s: a failed commit left state %v", step, st)
			}
			if r, err := s.Get(ctx, "ex-1"); err != nil || r.State != "EXECUTING" {
				t.Fatalf("%s: after a failed commit the record is %v, %v", step, r, err)
			}
			VerifyChain(t, s, 1)
		}
		final := Record("ex-1", "tool", "COMMITTED")
		if err := tx.Commit(ctx, final, Event("commit"), Event("done")); err != nil {
			t.Fatal(err)
		}
		st, err := dumpState(s)
		if err != nil {
			t.Fatal(err)
		}
		if want := map[string]map[string]string{"ns": {"a": "1", "b": ""}}; !reflect.DeepEqual(st, want) {
			t.Fatalf("state = %v, want %v", st, want)
		}
		if v, ok, err := s.StateValue(ctx, "ns", "b"); err != nil || !ok || v == nil || len(v) != 0 {
			t.Fatalf("StateValue(b) = %q, %v, %v; want an empty value", v, ok, err)
		}
		r, err := s.Get(ctx, "ex-1")
		if err != nil || r.State != "COMMITTED" || r.WriteSet == nil || r.WriteSet.Puts != 2 || !r.WriteSet.Committed {
			t.Fatalf("record = %+v, %v", r, err)
		}
		if c, _ := claims(s); len(c) != 0 {
			t.Fatalf("claims left: %v", c)
		}
		VerifyChain(t, s, 3)
		if err := tx.Put("ns", "c", nil); !errors.Is(err, txn.ErrTxDone) {
			t.Fatalf("Put after Commit = %v, want ErrTxDone", err)
		}
		// The claim is gone: the id is not reusable, nothing ends twice.
		if _, err := s.Begin(ctx, Record("ex-1", "tool", "EXECUTING")); !errors.Is(err, txn.ErrExists) {
			t.Fatalf("Begin of a used id = %v, want ErrExists", err)
		}
		if err := s.Put(ctx, Record("ex-1", "tool", "DENIED")); !errors.Is(err, txn.ErrExists) {
			t.Fatalf("Put of a used id = %v, want ErrExists", err)
		}
		VerifyChain(t, s, 3)
	}
}

func testRollbackByteExact(t *testing.T, b *Backend) {
	path := b.fresh(t)
	{
		ctx := context.Background()
		s := b.open(t, path)
		if err := s.UpdateState(ctx, func(v *txn.StateView) error {
			for i := range 5 {
				if err := v.Put("ns", fmt.Sprintf("k%d", i), []byte{byte(i), 0, 0xff}); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		before, err := dumpState(s)
		if err != nil {
			t.Fatal(err)
		}
		tx, err := s.Begin(ctx, Record("ex-1", "tool", "EXECUTING"))
		if err != nil {
			t.Fatal(err)
		}
		_ = tx.Put("ns", "k0", []byte("changed"))
		_ = tx.Delete("ns", "k1")
		_ = tx.Put("other", "new", []byte("x"))
		if v, ok, _ := tx.Get("ns", "k0"); !ok || string(v) != "changed" {
			t.Fatalf("the Tx does not see its own write: %q", v)
		}
		final := Record("ex-1", "tool", "ROLLED_BACK")
		if err := tx.Rollback(ctx, final, Event("rollback")); err != nil {
			t.Fatal(err)
		}
		after, err := dumpState(s)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(before, after) {
			t.Fatalf("rollback changed state:\nbefore %q\nafter  %q", before, after)
		}
		r, err := s.Get(ctx, "ex-1")
		if err != nil || r.State != "ROLLED_BACK" || r.WriteSet == nil || r.WriteSet.Committed || r.WriteSet.Deletes != 1 {
			t.Fatalf("record = %+v, %v", r, err)
		}
		if err := tx.Rollback(ctx, final); !errors.Is(err, txn.ErrTxDone) {
			t.Fatalf("second Rollback = %v, want ErrTxDone", err)
		}
		VerifyChain(t, s, 1)
	}
}

func testConflict(t *testing.T, b *Backend) {
	path := b.fresh(t)
	{
		ctx := context.Background()
		s := b.open(t, path)
		if err := s.PutState(ctx, "ns", "n", []byte("0")); err != nil {
			t.Fatal(err)
		}
		begin := func(id string) *txn.Tx {
			tx, err := s.Begin(ctx, Record(id, "tool", "EXECUTING"))
			if err != nil {
				t.Fatal(err)
			}
			return tx
		}
		// Two read-modify-writes of one key: the second fails.
		a, b := begin("a"), begin("b")
		for _, tx := range []*txn.Tx{a, b} {
			if _, _, err := tx.Get("ns", "n"); err != nil {
				t.Fatal(err)
			}
			_ = tx.Put("ns", "n", []byte(tx.ID()))
		}
		if err := a.Commit(ctx, Record("a", "tool", "COMMITTED")); err != nil {
			t.Fatal(err)
		}
		err := b.Commit(ctx, Record("b", "tool", "COMMITTED"))
		if !errors.Is(err, txn.ErrCommit) || !errors.Is(err, txn.ErrConflict) {
			t.Fatalf("second commit = %v, want ErrCommit and ErrConflict", err)
		}
		if v, _, _ := s.StateValue(ctx, "ns", "n"); string(v) != "a" {
			t.Fatalf("n = %q, want the first commit's", v)
		}
		if err := b.Rollback(ctx, Record("b", "tool", "ROLLED_BACK")); err != nil {
			t.Fatalf("Rollback after a conflict: %v", err)
		}
		// A key read as absent that appears, and a scanned prefix that
		// gains a key, are conflicts too.
		c, d := begin("c"), begin("d")
		if _, ok, _ := c.Get("ns", "fresh"); ok {
			t.Fatal("fresh exists")
		}
		_ = c.Put("ns", "x", nil)
		if _, err := d.Scan("ns", "p/", 0); err != nil {
			t.Fatal(err)
		}
		_ = d.Put("ns", "y", nil)
		if err := s.PutState(ctx, "ns", "fresh", []byte("1")); err != nil {
			t.Fatal(err)
		}
		if err := s.PutState(ctx, "ns", "p/1", []byte("1")); err != nil {
			t.Fatal(err)
		}
		if err := c.Commit(ctx, Record("c", "tool", "COMMITTED")); !errors.Is(err, txn.ErrConflict) {
			t.Fatalf("commit after a read-absent key appeared = %v, want ErrConflict", err)
		}
		if err := d.Commit(ctx, Record("d", "tool", "COMMITTED")); !errors.Is(err, txn.ErrConflict) {
			t.Fatalf("commit after a scanned prefix changed = %v, want ErrConflict", err)
		}
		// Concurrent increments: exactly the committed ones count.
		var wg sync.WaitGroup
		var mu sync.Mutex
		committed := 0
		for i := range 16 {
			wg.Go(func() {
				id := fmt.Sprintf("inc-%02d", i)
				tx, err := s.Begin(ctx, Record(id, "tool", "EXECUTING"))
				if err != nil {
					t.Error(err)
					return
				}
				v, _, _ := tx.Get("ns", "count")
				n, _ := strconv.Atoi(string(v))
				_ = tx.Put("ns", "count", []byte(strconv.Itoa(n+1)))
				if err := tx.Commit(ctx, Record(id, "tool", "COMMITTED")); err == nil {
					mu.Lock()
					committed++
					mu.Unlock()
				} else if !errors.Is(err, txn.ErrConflict) {
					t.Error(err)
				} else {
					_ = tx.Rollback(ctx, Record(id, "tool", "ROLLED_BACK"))
				}
			})
		}
		wg.Wait()
		v, _, _ := s.StateValue(ctx, "ns", "count")
		if n, _ := strconv.Atoi(string(v)); n != committed || n == 0 {
			t.Fatalf("count = %d after %d committed increments", n, committed)
		}
	}
}

func testUpdateStateCAS(t *testing.T, b *Backend) {
	path := b.fresh(t)
	{
		ctx := context.Background()
		s := b.open(t, path)
		const n = 40
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				err := s.UpdateState(ctx, func(v *txn.StateView) error {
					old, _ := v.Get("intents", "counter")
					c, _ := strconv.Atoi(string(old))
					return v.Put("intents", "counter", []byte(strconv.Itoa(c+1)))
				}, Event(fmt.Sprintf("inc %d", i)))
				if err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if v, _, _ := s.StateValue(ctx, "intents", "counter"); string(v) != strconv.Itoa(n) {
			t.Fatalf("counter = %q after %d compare-and-sets", v, n)
		}
		// A refused update changes nothing and appends no event.
		refused := errors.New("already executed")
		err := s.UpdateState(ctx, func(v *txn.StateView) error {
			_ = v.Put("intents", "counter", []byte("bad"))
			return refused
		}, Event("refused"))
		if !errors.Is(err, refused) {
			t.Fatalf("UpdateState = %v, want the function's error", err)
		}
		if v, _, _ := s.StateValue(ctx, "intents", "counter"); string(v) != strconv.Itoa(n) {
			t.Fatalf("a refused update wrote %q", v)
		}
		// Views see their own writes, in key order, with limits.
		err = s.UpdateState(ctx, func(v *txn.StateView) error {
			_ = v.Put("intents", "b", []byte("2"))
			_ = v.Delete("intents", "counter")
			es := v.Scan("intents", "", 0)
			if len(es) != 1 || es[0].Key != "b" {
				return fmt.Errorf("view scan = %v", es)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		// A guard that refuses claims nothing.
		_, err = s.BeginWith(ctx, Record("g", "tool", "EXECUTING"), func(v *txn.StateView) error {
			if _, ok := v.Get("intents", "b"); ok {
				return refused
			}
			return nil
		}, Event("claim"))
		if !errors.Is(err, refused) {
			t.Fatalf("BeginWith = %v, want the guard's error", err)
		}
		if _, err := s.Get(ctx, "g"); !errors.Is(err, txn.ErrNotFound) {
			t.Fatalf("a refused claim stored a record: %v", err)
		}
		// A guard that accepts marks in the claim's update.
		tx, err := s.BeginWith(ctx, Record("g", "tool", "EXECUTING"), func(v *txn.StateView) error {
			return v.Put("intents", "b", []byte("executed"))
		}, Event("claim"))
		if err != nil {
			t.Fatal(err)
		}
		if v, _, _ := s.StateValue(ctx, "intents", "b"); string(v) != "executed" {
			t.Fatalf("the guard's write is %q", v)
		}
		if err := tx.Commit(ctx, Record("g", "tool", "COMMITTED")); err != nil {
			t.Fatal(err)
		}
		VerifyChain(t, s, n+1)
	}
}

func testAuditChain(t *testing.T, b *Backend) {
	path := b.fresh(t)
	{
		ctx := context.Background()
		s := b.open(t, path)
		var wg sync.WaitGroup
		var want uint64
		for i := range 60 {
			want += uint64(i%3 + 1)
			wg.Go(func() {
				var evs []txn.AuditEvent
				for j := range i%3 + 1 {
					evs = append(evs, Event(fmt.Sprintf("w%d/%d é \u2028", i, j)))
				}
				id := fmt.Sprintf("ex-%03d", i)
				if i%2 == 0 {
					if err := s.Put(ctx, Record(id, "tool", "DENIED"), evs...); err != nil {
						t.Error(err)
					}
					return
				}
				tx, err := s.Begin(ctx, Record(id, "tool", "EXECUTING"), evs[:1]...)
				if err != nil {
					t.Error(err)
					return
				}
				_ = tx.Put("ns", id, []byte("v"))
				if err := tx.Commit(ctx, Record(id, "tool", "COMMITTED"), evs[1:]...); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		VerifyChain(t, s, want)
		// Reads: records in id order, paged state, a search.
		recs, err := s.List(ctx, txn.Filter{})
		if err != nil || len(recs) != 60 {
			t.Fatalf("List: %d records, %v", len(recs), err)
		}
		for i, r := range recs {
			if r.ExecutionID != fmt.Sprintf("ex-%03d", i) {
				t.Fatalf("List out of order at %d: %s", i, r.ExecutionID)
			}
		}
		if recs, _ := s.List(ctx, txn.Filter{State: "DENIED", Limit: 5}); len(recs) != 5 {
			t.Fatalf("List with a filter and limit: %d", len(recs))
		}
		var walked []string
		if err := s.WalkRecords(ctx, "ex-057", func(k string, r *txn.Record, err error) bool {
			walked = append(walked, k)
			return err == nil
		}); err != nil || !reflect.DeepEqual(walked, []string{"ex-058", "ex-059"}) {
			t.Fatalf("WalkRecords after ex-057 = %v, %v", walked, err)
		}
		page, err := s.StatePage(ctx, "ns", "ex-055", 2)
		if err != nil || len(page) != 2 || page[0].Key != "ex-057" || page[1].Key != "ex-059" {
			t.Fatalf("StatePage = %v, %v", page, err)
		}
		if es, err := s.StateScan(ctx, "ns", "ex-05"); err != nil || len(es) != 5 {
			t.Fatalf("StateScan = %v, %v", es, err)
		}
		var found []uint64
		if err := s.AuditSearch(ctx, "w7/1", -1<<62, 1<<62, func(e txn.AuditEntry) bool {
			found = append(found, e.Seq)
			return false
		}); err != nil || len(found) == 0 {
			t.Fatalf("AuditSearch found %v, %v", found, err)
		}
		if tail, err := s.AuditLog(ctx, want-1, 0); err != nil || len(tail) != 2 || tail[0].Seq != want-1 {
			t.Fatalf("AuditLog from %d = %v, %v", want-1, tail, err)
		}
	}
}

func testRecover(t *testing.T, b *Backend) {
	path := b.fresh(t)
	{
		ctx := context.Background()
		s, err := b.openErr(t, path)
		if err != nil {
			t.Fatal(err)
		}
		tx, err := s.Begin(ctx, Record("crashed", "tool", "EXECUTING"), Event("begin"))
		if err != nil {
			t.Fatal(err)
		}
		_ = tx.Put("ns", "k", []byte("never"))
		if err := s.Put(ctx, Record("done", "tool", "DENIED")); err != nil {
			t.Fatal(err)
		}
		// The process dies: the Tx never ends.
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s = b.open(t, path)
		if c, _ := claims(s); !reflect.DeepEqual(c, []string{"crashed"}) {
			t.Fatalf("claims after the crash = %v", c)
		}
		done, err := s.Recover(ctx, func(r *txn.Record) ([]txn.AuditEvent, error) {
			r.State = "ROLLED_BACK"
			r.Transitions = append(r.Transitions, txn.Transition{From: "EXECUTING", To: "ROLLED_BACK", Event: "interrupted", At: t0})
			return []txn.AuditEvent{Event("interrupted " + r.ExecutionID)}, nil
		})
		if err != nil || len(done) != 1 || done[0].ExecutionID != "crashed" {
			t.Fatalf("Recover = %v, %v", done, err)
		}
		if r, err := s.Get(ctx, "crashed"); err != nil || r.State != "ROLLED_BACK" {
			t.Fatalf("recovered record = %+v, %v", r, err)
		}
		if c, _ := claims(s); len(c) != 0 {
			t.Fatalf("claims after Recover = %v", c)
		}
		if st, _ := dumpState(s); len(st["ns"]) != 0 {
			t.Fatalf("an uncommitted write survived the crash: %v", st)
		}
		if done, err := s.Recover(ctx, func(*txn.Record) ([]txn.AuditEvent, error) { return nil, nil }); err != nil || len(done) != 0 {
			t.Fatalf("second Recover = %v, %v", done, err)
		}
		// A finish that fails recovers nothing.
		tx2, _ := s.Begin(ctx, Record("crashed2", "tool", "EXECUTING"))
		_ = tx2
		if _, err := s.Recover(ctx, func(*txn.Record) ([]txn.AuditEvent, error) { return nil, errors.New("no") }); err == nil {
			t.Fatal("Recover with a failing finish succeeded")
		}
		if c, _ := claims(s); !reflect.DeepEqual(c, []string{"crashed2"}) {
			t.Fatalf("claims after a failed Recover = %v", c)
		}
		VerifyChain(t, s, 2)
	}
}

func testClosed(t *testing.T, b *Backend) {
	path := b.fresh(t)
	{
		ctx := context.Background()
		s, err := b.openErr(t, path)
		if err != nil {
			t.Fatal(err)
		}
		tx, err := s.Begin(ctx, Record("x", "tool", "EXECUTING"))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("second Close = %v", err)
		}
		if _, err := s.Get(ctx, "x"); !errors.Is(err, txn.ErrClosed) {
			t.Fatalf("Get after Close = %v", err)
		}
		if err := s.PutState(ctx, "ns", "k", nil); !errors.Is(err, txn.ErrClosed) {
			t.Fatalf("PutState after Close = %v", err)
		}
		if err := tx.Commit(ctx, Record("x", "tool", "COMMITTED")); !errors.Is(err, txn.ErrClosed) {
			t.Fatalf("Commit after Close = %v", err)
		}
	}
}
