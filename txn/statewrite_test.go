package txn_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/toolgate/toolgate/txn"
)

func TestStore_DeleteState(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	seed(t, s, "sys", map[string]string{"a": "a", "b": "b", "c": "c"})
	if err := s.DeleteState(ctx, "sys", "a", "c", "missing"); err != nil {
		t.Fatal(err)
	}
	if got := state(t, s, "sys"); len(got) != 1 || got["b"] != "b" {
		t.Fatalf("after DeleteState: %v", got)
	}
	if err := s.DeleteState(ctx, "nobucket", "x"); err != nil {
		t.Errorf("a namespace never written: %v", err)
	}
	if err := s.DeleteState(ctx, "sys", ""); !errors.Is(err, txn.ErrInvalidKey) {
		t.Errorf("empty key: %v", err)
	}
}

func TestStore_PutState(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	v := []byte("one")
	if err := s.PutState(ctx, "sys", "k", v); err != nil {
		t.Fatal(err)
	}
	v[0] = 'X' // the store keeps its own copy
	if err := s.PutState(ctx, "sys", "k2", []byte("two")); err != nil {
		t.Fatal(err)
	}
	if got := state(t, s, "sys"); len(got) != 2 || got["k"] != "one" || got["k2"] != "two" {
		t.Fatalf("after PutState: %v", got)
	}
	if err := s.PutState(ctx, "", "k", nil); !errors.Is(err, txn.ErrInvalidKey) {
		t.Errorf("empty namespace: %v", err)
	}
}

// UpdateState is a compare-and-set: concurrent increments through it never
// lose one, even when group commit puts them in one bbolt update.
func TestStore_UpdateState_CompareAndSet(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	const n = 64
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			err := s.UpdateState(ctx, func(v *txn.StateView) error {
				cur, _ := v.Get("sys", "counter")
				i, _ := strconv.Atoi(string(cur))
				return v.Put("sys", "counter", []byte(strconv.Itoa(i+1)))
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if got := state(t, s, "sys")["counter"]; got != strconv.Itoa(n) {
		t.Fatalf("counter = %s after %d increments", got, n)
	}
}

// An error from the function changes nothing, and fails that call alone.
func TestStore_UpdateState_ErrorChangesNothing(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	seed(t, s, "sys", map[string]string{"a": "1"})
	boom := errors.New("boom")
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			err := s.UpdateState(ctx, func(v *txn.StateView) error {
				if err := v.Put("sys", "k"+strconv.Itoa(i), []byte("x")); err != nil {
					return err
				}
				if i%2 == 1 {
					v.Delete("sys", "a")
					return boom
				}
				return nil
			})
			if (i%2 == 1) != errors.Is(err, boom) {
				t.Errorf("call %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	got := state(t, s, "sys")
	if got["a"] != "1" || len(got) != 11 {
		t.Fatalf("state %v; want a=1 and the 10 keys of the calls that succeeded", got)
	}
	for k := range got {
		if n, _ := strconv.Atoi(strings.TrimPrefix(k, "k")); k != "a" && n%2 == 1 {
			t.Errorf("%s was written by a failed call", k)
		}
	}
}

func TestStateView_SeesItsOwnWrites(t *testing.T) {
	s := openStore(t)
	seed(t, s, "sys", map[string]string{"a": "1", "b": "2", "c": "3"})
	err := s.UpdateState(context.Background(), func(v *txn.StateView) error {
		v.Delete("sys", "b")
		v.Put("sys", "a", []byte("one"))
		v.Put("sys", "bb", []byte("new"))
		if got, ok := v.Get("sys", "b"); ok {
			t.Errorf("deleted b reads %q", got)
		}
		if got, _ := v.Get("sys", "a"); string(got) != "one" {
			t.Errorf("a reads %q", got)
		}
		var keys []string
		for _, e := range v.Scan("sys", "", 0) {
			keys = append(keys, e.Key+"="+string(e.Value))
		}
		if strings.Join(keys, ",") != "a=one,bb=new,c=3" {
			t.Errorf("scan = %v", keys)
		}
		if es := v.Scan("sys", "b", 1); len(es) != 1 || es[0].Key != "bb" {
			t.Errorf("scan b, limit 1 = %v", es)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := state(t, s, "sys"); got["a"] != "one" || got["bb"] != "new" || got["c"] != "3" || len(got) != 3 {
		t.Fatalf("after the update: %v", got)
	}
}

func TestStore_StateScan(t *testing.T) {
	s := openStore(t)
	seed(t, s, "sys", map[string]string{"a/1": "x", "a/2": "y", "ab": "z", "b/1": "w"})
	es, err := s.StateScan(context.Background(), "sys", "a/")
	if err != nil || len(es) != 2 || es[0].Key != "a/1" || es[1].Key != "a/2" || string(es[1].Value) != "y" {
		t.Fatalf("StateScan(a/) = %v, %v", es, err)
	}
	if es, err := s.StateScan(context.Background(), "none", ""); err != nil || len(es) != 0 {
		t.Fatalf("an absent namespace: %v, %v", es, err)
	}
}

// A limited scan with the view's own writes still returns the first keys:
// committed, put by the view, and not deleted by it.
func TestStateView_LimitedScanWithOwnWrites(t *testing.T) {
	s := openStore(t)
	seed(t, s, "sys", map[string]string{"b": "1", "c": "2", "d": "3", "e": "4"})
	err := s.UpdateState(context.Background(), func(v *txn.StateView) error {
		v.Delete("sys", "b")
		v.Delete("sys", "c")
		v.Put("sys", "a", []byte("0"))
		var keys []string
		for _, e := range v.Scan("sys", "", 2) {
			keys = append(keys, e.Key)
		}
		if strings.Join(keys, ",") != "a,d" {
			t.Errorf("Scan(limit 2) = %v; want a,d", keys)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
