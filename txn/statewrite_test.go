package txn_test

import (
	"context"
	"errors"
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
