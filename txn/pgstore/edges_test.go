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
