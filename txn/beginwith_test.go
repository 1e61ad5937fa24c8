package txn_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/toolgate/toolgate/txn"
)

var errTaken = errors.New("already executed")

// markOnce is a guard that claims "sys/intent" for id, once.
func markOnce(id string) func(*txn.StateView) error {
	return func(v *txn.StateView) error {
		if _, ok := v.Get("sys", "intent"); ok {
			return errTaken
		}
		return v.Put("sys", "intent", []byte(id))
	}
}

// Of many concurrent claims guarded by the same mark, exactly one claims;
// the others claim nothing, and the mark names the winner.
func TestStore_BeginWith_OnlyOneClaims(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	const n = 50
	var won atomic.Int32
	var winner atomic.Value
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			id := fmt.Sprintf("exec-%02d", i)
			tx, err := s.BeginWith(ctx, newRecord(id, "echo", "EXECUTING"), markOnce(id))
			switch {
			case err == nil:
				won.Add(1)
				winner.Store(id)
				if err := tx.Rollback(ctx, newRecord(id, "echo", "ROLLED_BACK")); err != nil {
					t.Error(err)
				}
			case !errors.Is(err, errTaken):
				t.Errorf("%s: %v", id, err)
			}
		})
	}
	wg.Wait()
	if won.Load() != 1 {
		t.Fatalf("%d claims succeeded; want exactly 1", won.Load())
	}
	if got := state(t, s, "sys")["intent"]; got != winner.Load() {
		t.Errorf("mark = %q, winner %v", got, winner.Load())
	}
	recs, err := s.List(ctx, txn.Filter{})
	if err != nil || len(recs) != 1 {
		t.Fatalf("%d records (%v); the losers must have claimed nothing", len(recs), err)
	}
}

// The guard's writes and the claim are one update: a failure injected at
// any step of it leaves neither.
func TestStore_BeginWith_Atomic(t *testing.T) {
	for _, step := range []string{txn.StepClaim, txn.StepApplyWrite, txn.StepAudit, txn.StepCommit} {
		t.Run(step, func(t *testing.T) {
			s := openStore(t)
			ctx := context.Background()
			fail := errors.New("injected")
			txn.SetFailpoint(s, func(at string) error {
				if at == step {
					return fail
				}
				return nil
			})
			_, err := s.BeginWith(ctx, newRecord("e1", "echo", "EXECUTING"), markOnce("e1"), txn.AuditEvent{Data: []byte(`{"n":1}`)})
			if !errors.Is(err, fail) && !errors.Is(err, txn.ErrPoisoned) {
				t.Fatalf("err = %v; want the injected failure", err)
			}
			txn.SetFailpoint(s, nil)
			if s.Err() != nil { // a failed bbolt commit poisons the handle: look through a new one
				path := s.Path()
				s.Close()
				s = openStoreAt(t, path)
			}
			if log, err := s.AuditLog(ctx, 0, 0); err != nil || len(log) != 0 {
				t.Errorf("audit events survived: %v, %v", log, err)
			}
			if got := state(t, s, "sys"); len(got) != 0 {
				t.Errorf("the guard's write survived: %v", got)
			}
			if _, err := s.Get(ctx, "e1"); !errors.Is(err, txn.ErrNotFound) {
				t.Errorf("the claim survived: %v", err)
			}
		})
	}
}
