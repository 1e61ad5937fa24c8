package storetest

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"github.com/toolgate/toolgate/txn"
)

// testManyWrites: one update's writes, puts and deletes in many
// namespaces, are all applied, whichever order the backend applies them
// in; by a Tx's commit as by UpdateState.
func testManyWrites(t *testing.T, b *Backend) {
	s := b.open(t, b.fresh(t))
	ctx := context.Background()
	want := map[string]map[string]string{}
	if err := s.UpdateState(ctx, func(v *txn.StateView) error {
		for n := range 10 {
			ns := fmt.Sprintf("ns%d", n)
			want[ns] = map[string]string{}
			for k := range 4 {
				if err := v.Put(ns, fmt.Sprintf("k%d", k), []byte("old")); err != nil {
					return err
				}
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Each namespace: one key deleted, one kept, two changed, one added.
	change := func(put func(ns, k, v string) error, del func(ns, k string) error) error {
		for n := range 10 {
			ns := fmt.Sprintf("ns%d", n)
			if err := del(ns, "k0"); err != nil {
				return err
			}
			for _, k := range []string{"k2", "k3", "k4"} {
				if err := put(ns, k, "new"); err != nil {
					return err
				}
			}
		}
		return nil
	}
	for n := range 10 {
		ns := fmt.Sprintf("ns%d", n)
		want[ns] = map[string]string{"k1": "old", "k2": "new", "k3": "new", "k4": "new"}
	}
	if err := s.UpdateState(ctx, func(v *txn.StateView) error {
		return change(func(ns, k, val string) error { return v.Put(ns, k, []byte(val)) }, v.Delete)
	}); err != nil {
		t.Fatal(err)
	}
	if st, err := dumpState(s); err != nil || !reflect.DeepEqual(st, want) {
		t.Fatalf("state after UpdateState's writes = %v, %v; want %v", st, err, want)
	}
	// The same by a Tx, on the old values again.
	if err := s.UpdateState(ctx, func(v *txn.StateView) error {
		for n := range 10 {
			ns := fmt.Sprintf("ns%d", n)
			for k := range 4 {
				if err := v.Put(ns, fmt.Sprintf("k%d", k), []byte("old")); err != nil {
					return err
				}
			}
			if err := v.Delete(ns, "k4"); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	tx, err := s.Begin(ctx, Record("ex-1", "tool", "EXECUTING"))
	if err != nil {
		t.Fatal(err)
	}
	if err := change(func(ns, k, val string) error { return tx.Put(ns, k, []byte(val)) }, tx.Delete); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx, Record("ex-1", "tool", "COMMITTED")); err != nil {
		t.Fatal(err)
	}
	if st, err := dumpState(s); err != nil || !reflect.DeepEqual(st, want) {
		t.Fatalf("state after a Tx's writes = %v, %v; want %v", st, err, want)
	}
}
