package pgstore_test

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/txn"
	"github.com/toolgate/toolgate/txn/pgstore"
)

// Describe names the server's version, the schema and how many nodes hold
// a live lease, "node" for one and "nodes" for more.
func TestDescribe_Nodes(t *testing.T) {
	url := freshPostgres(t)
	ctx := context.Background()
	a, err := pgstore.Open(url, &pgstore.Options{NoSync: true, Node: "a"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	got, err := a.Describe(ctx)
	if err != nil || !regexp.MustCompile(`^Postgres .+, schema \d+, 1 node with a live lease$`).MatchString(got) {
		t.Fatalf("Describe with one node = %q, %v", got, err)
	}
	b, err := pgstore.Open(url, &pgstore.Options{NoSync: true, Node: "b"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if got, err := a.Describe(ctx); err != nil || !strings.HasSuffix(got, ", 2 nodes with a live lease") {
		t.Fatalf("Describe with two nodes = %q, %v", got, err)
	}
	b.Close()
	a.Close()
	if _, err := a.Describe(ctx); !errors.Is(err, txn.ErrClosed) {
		t.Errorf("Describe after Close = %v; want ErrClosed", err)
	}
}

// SetClaim leaves the claim as it was when set fails, and says why; a
// claim that is not this node's is ErrNotFound.
func TestSetClaim_Fails(t *testing.T) {
	url := freshPostgres(t)
	be, err := pgstore.Open(url, &pgstore.Options{NoSync: true, Node: "a"})
	if err != nil {
		t.Fatal(err)
	}
	s := txn.NewStore(be, url)
	defer s.Close()
	ctx := context.Background()
	if _, err := s.Begin(ctx, newRecord("c", "t", "EXECUTING")); err != nil {
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

// $TOOLGATE_LEASE sets the lease when Options.Lease is zero: a positive
// duration of at least MinLease; anything else fails Open, naming it.
func TestOpen_LeaseFromEnvironment(t *testing.T) {
	url := freshPostgres(t)
	for _, tc := range []struct {
		env string
		ok  bool
	}{{"soon", false}, {"0s", false}, {"-1s", false}, {"10ms", false}, {"100ms", true}, {"20s", true}} {
		t.Setenv("TOOLGATE_LEASE", tc.env)
		s, err := pgstore.Open(url, &pgstore.Options{NoSync: true, Node: "env"})
		if err == nil {
			s.Close()
		}
		if (err == nil) != tc.ok || err != nil && !strings.Contains(err.Error(), "TOOLGATE_LEASE") {
			t.Errorf("TOOLGATE_LEASE=%q: Open = %v; want ok %v", tc.env, err, tc.ok)
		}
	}
}
