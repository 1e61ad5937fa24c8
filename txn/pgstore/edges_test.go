package pgstore_test

import (
	"context"
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

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
		env  string
		ok   bool
		want string // what the error says
	}{
		{"soon", false, `TOOLGATE_LEASE="soon": want a positive duration such as 15s`},
		{"0s", false, `TOOLGATE_LEASE="0s": want a positive duration such as 15s`},
		{"-1s", false, `TOOLGATE_LEASE="-1s": want a positive duration such as 15s`},
		{"10ms", false, `TOOLGATE_LEASE="10ms": at least 100ms`},
		{"99999us", false, `TOOLGATE_LEASE="99999us": at least 100ms`},
		{"100ms", true, ""},
		{"20s", true, ""},
	} {
		t.Setenv("TOOLGATE_LEASE", tc.env)
		s, err := pgstore.Open(url, &pgstore.Options{NoSync: true, Node: "env"})
		if err == nil {
			s.Close()
		}
		if (err == nil) != tc.ok || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("TOOLGATE_LEASE=%q: Open = %v; want ok %v, or an error saying %q", tc.env, err, tc.ok, tc.want)
		}
	}
	// Options.Lease, when set, wins over it.
	t.Setenv("TOOLGATE_LEASE", "soon")
	s, err := pgstore.Open(url, &pgstore.Options{NoSync: true, Node: "env", Lease: time.Second})
	if err != nil {
		t.Fatalf("Open with Options.Lease and a bad TOOLGATE_LEASE = %v", err)
	}
	s.Close()
}

// A node's name: at most 200 bytes, no control characters (below a space,
// and DEL). Without one (Options.Node, $TOOLGATE_NODE), each run is a node
// of its own, named after the host and the run.
func TestCheckNode(t *testing.T) {
	for _, tc := range []struct {
		node string
		ok   bool
	}{
		{"", true}, {"a", true}, {"node 1/é", true}, {" ~", true}, {strings.Repeat("n", 200), true},
		{strings.Repeat("n", 201), false}, {"a\nb", false}, {"a\x1f", false}, {"\x00", false}, {"a\x7f", false},
	} {
		err := pgstore.CheckNode(tc.node)
		if (err == nil) != tc.ok || err != nil && !strings.Contains(err.Error(), "at most 200 bytes, without control characters") {
			t.Errorf("CheckNode(%q) = %v; want ok %v", tc.node, err, tc.ok)
		}
	}
}

func TestOpen_NodeName(t *testing.T) {
	url := freshPostgres(t)
	host, _ := os.Hostname()
	t.Setenv("TOOLGATE_NODE", "")
	s, err := pgstore.Open(url, &pgstore.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	run := s.NodeRun()
	s.Close()
	if !regexp.MustCompile(`^`+regexp.QuoteMeta(host)+`-[0-9a-f]{8}/[0-9a-f]{16}$`).MatchString(run) || !strings.HasPrefix(run[len(host)+10:], run[len(host)+1:len(host)+9]) {
		t.Errorf("NodeRun of a store without a node name = %q; want HOST-RUN8/RUN, its run's first 8 digits in its name", run)
	}
	t.Setenv("TOOLGATE_NODE", "from-env")
	s, err = pgstore.Open(url, &pgstore.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if s.Node() != "from-env" {
		t.Errorf("Node with $TOOLGATE_NODE set = %q", s.Node())
	}
	s.Close()
	s, err = pgstore.Open(url, &pgstore.Options{NoSync: true, Node: "opt"})
	if err != nil {
		t.Fatal(err)
	}
	if s.Node() != "opt" {
		t.Errorf("Node with Options.Node and $TOOLGATE_NODE set = %q, want Options.Node's", s.Node())
	}
	s.Close()
	t.Setenv("TOOLGATE_NODE", "bad\x01")
	if _, err := pgstore.Open(url, &pgstore.Options{NoSync: true}); err == nil || !strings.HasPrefix(err.Error(), `txn: TOOLGATE_NODE: node name "bad\x01"`) {
		t.Errorf("Open with a bad $TOOLGATE_NODE = %v, want an error naming it", err)
	}
}

// A lease under MinLease is refused as too short, 0 included (Options.Lease
// 0 means the default before it is checked); one under zero says so.
func TestCheckLease(t *testing.T) {
	for _, tc := range []struct {
		lease time.Duration
		want  string // "" for none
	}{
		{-time.Second, "is negative"}, {-1, "is negative"}, {0, "too short"},
		{pgstore.MinLease - 1, "too short"}, {pgstore.MinLease, ""}, {time.Hour, ""},
	} {
		err := pgstore.CheckLease(tc.lease)
		if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CheckLease(%v) = %v; want %q", tc.lease, err, tc.want)
		}
	}
}
