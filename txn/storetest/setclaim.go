package storetest

import (
	"context"
	"errors"
	"testing"

	"github.com/toolgate/toolgate/txn"
)

// testSetClaimFails: SetClaim leaves the claim as it was when set fails,
// and says why; SetClaim of an id without a claim is ErrNotFound.
func testSetClaimFails(t *testing.T, b *Backend) {
	s := b.open(t, b.fresh(t))
	be := s.Driver()
	ctx := context.Background()
	if _, err := s.Begin(ctx, Record("c", "t", "EXECUTING")); err != nil {
		t.Fatal(err)
	}
	before, err := be.Get(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	if err := be.SetClaim(ctx, "c", func([]byte) ([]byte, error) { return []byte("garbage"), boom }); !errors.Is(err, boom) {
		t.Fatalf("SetClaim whose set fails = %v", err)
	}
	if after, err := be.Get(ctx, "c"); err != nil || string(after) != string(before) {
		t.Fatalf("the claim after a failed SetClaim: %q, %v; want it unchanged", after, err)
	}
	if err := be.SetClaim(ctx, "nope", func(b []byte) ([]byte, error) { return b, nil }); !errors.Is(err, txn.ErrNotFound) {
		t.Errorf("SetClaim of no claim = %v; want ErrNotFound", err)
	}
}
