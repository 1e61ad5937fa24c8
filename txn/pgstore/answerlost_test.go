package pgstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/toolgate/toolgate/txn"
)

// A commit whose answer is lost: Postgres committed the group, but the
// connection broke before its answer reached the store. The store asks
// Postgres, on another connection, whether the group's transaction
// happened (the group number it wrote in its node's row), and reports the
// writes done; when Postgres does not answer within pgResolveWindow it
// says the outcome is unknown. The connection is broken by a proxy on a
// Unix socket between the store and the test's server, which drops the
// answer to a batch holding a COMMIT.

// commitProxy forwards connections to a Postgres server; armed, it drops
// the answer to the next COMMIT it forwards (closing both sides), and with
// refuse set it closes new connections at once.
type commitProxy struct {
	ln      net.Listener
	target  string // "unix" address or host:port
	network string
	armed   atomic.Bool
	refuse  atomic.Bool
	dropped atomic.Int32
	wg      sync.WaitGroup
}

// newCommitProxy starts a proxy to the server of dbURL and returns it and
// the URL that reaches the same database through it.
func newCommitProxy(t *testing.T, dbURL string) (*commitProxy, string) {
	t.Helper()
	cfg, err := pgconn.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	p := &commitProxy{network: "tcp", target: net.JoinHostPort(cfg.Host, fmt.Sprint(cfg.Port))}
	if strings.HasPrefix(cfg.Host, "/") {
		p.network, p.target = "unix", filepath.Join(cfg.Host, fmt.Sprintf(".s.PGSQL.%d", cfg.Port))
	}
	dir := t.TempDir()
	p.ln, err = net.Listen("unix", filepath.Join(dir, ".s.PGSQL.5432"))
	if err != nil {
		t.Skipf("a Unix socket for the proxy: %v", err)
	}
	go p.serve()
	t.Cleanup(func() { p.ln.Close(); p.wg.Wait() })
	u := url.URL{Scheme: "postgres", User: url.User(cfg.User), Path: "/" + cfg.Database,
		RawQuery: url.Values{"host": {dir}, "port": {"5432"}, "sslmode": {"disable"},
			// Each statement's text in each round trip (no statement
			// cache): the proxy sees the COMMIT.
			"default_query_exec_mode": {"exec"}}.Encode()}
	if cfg.Password != "" {
		u.User = url.UserPassword(cfg.User, cfg.Password)
	}
	return p, u.String()
}

func (p *commitProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.refuse.Load() {
			c.Close()
			continue
		}
		s, err := net.Dial(p.network, p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.wg.Add(1)
		go p.pipe(c, s)
	}
}

// pipe forwards between the client c and the server s until either ends.
func (p *commitProxy) pipe(c, s net.Conn) {
	defer p.wg.Done()
	var commitSent atomic.Bool
	done := make(chan struct{}, 2)
	go func() { // client -> server
		buf := make([]byte, 64<<10)
		for {
			n, err := c.Read(buf)
			if n > 0 {
				if p.armed.Load() && bytes.Contains(buf[:n], []byte("COMMIT")) {
					commitSent.Store(true)
				}
				if _, werr := s.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		done <- struct{}{}
	}()
	go func() { // server -> client
		buf := make([]byte, 64<<10)
		for {
			n, err := s.Read(buf)
			if n > 0 && commitSent.Load() && p.armed.CompareAndSwap(true, false) {
				p.dropped.Add(1)
				break // the answer to the COMMIT: lost
			}
			if n > 0 {
				if _, werr := c.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		done <- struct{}{}
	}()
	<-done
	c.Close()
	s.Close()
	<-done
}

func TestPostgresGroupCommitAnswerLost(t *testing.T) {
	proxy, viaProxy := newCommitProxy(t, freshPostgres(t))
	ctx := context.Background()
	s, err := txn.Open(viaProxy, &txn.Options{NoSync: true})
	if err != nil {
		t.Skipf("Open through the proxy (a server that needs TLS?): %v", err)
	}
	defer s.Close()
	if err := s.PutState(ctx, "ns", "k", []byte("1")); err != nil {
		t.Fatal(err)
	}

	// The answer lost, Postgres reachable: the write is reported done.
	proxy.armed.Store(true)
	if err := s.UpdateState(ctx, func(v *txn.StateView) error { return v.Put("ns", "k", []byte("2")) }, ev("answer lost")); err != nil {
		t.Fatalf("a write whose commit's answer was lost = %v, want it done (it was committed)", err)
	}
	if proxy.dropped.Load() != 1 {
		t.Fatalf("the proxy dropped %d answers, want 1: the test tested nothing", proxy.dropped.Load())
	}
	if v, _, err := s.StateValue(ctx, "ns", "k"); err != nil || string(v) != "2" {
		t.Fatalf("after the write: %q, %v; want \"2\"", v, err)
	}
	verifyChain(t, s, 1)

	// The answer lost and Postgres unreachable after: the outcome is
	// unknown, and the write says so (it did happen).
	proxy.armed.Store(true)
	var lost atomic.Bool
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		done <- s.UpdateState(ctx, func(v *txn.StateView) error {
			if lost.CompareAndSwap(false, true) {
				proxy.refuse.Store(true) // from the next connection on
			}
			return v.Put("ns", "k", []byte("3"))
		}, ev("unknown"))
	}()
	err = <-done
	waited := time.Since(start)
	proxy.refuse.Store(false)
	if !errors.Is(err, txn.ErrUnavailable) || !strings.Contains(err.Error(), "did not answer within 10s to say whether it happened: the outcome of the commit is unknown") {
		t.Fatalf("a write whose commit's answer was lost, Postgres unreachable after = %v; want ErrUnavailable saying the outcome is unknown", err)
	}
	if waited < 9*time.Second {
		t.Errorf("the write gave up asking after %v; want it to ask for its window (10s)", waited)
	}
	if v, _, err := s.StateValue(ctx, "ns", "k"); err != nil || string(v) != "3" {
		t.Fatalf("after the write of unknown outcome: %q, %v; want \"3\" (it was committed)", v, err)
	}
	verifyChain(t, s, 2)
}
