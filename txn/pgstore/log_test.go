package pgstore_test

import (
	"bytes"
	"context"
	"errors"
	"log"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/txn"
	"github.com/toolgate/toolgate/txn/pgstore"
)

// lockedBuffer is the standard log's output during a test: the lease's
// goroutine writes while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *lockedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *lockedBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// stdLog sends the standard log's lines, without their time, to a buffer
// until the test ends.
func stdLog(t *testing.T) *lockedBuffer {
	w := &lockedBuffer{}
	out, flags := log.Writer(), log.Flags()
	log.SetOutput(w)
	log.SetFlags(0)
	t.Cleanup(func() { log.SetOutput(out); log.SetFlags(flags) })
	return w
}

// DefaultLogger words each record as toolgate always wrote these lines.
func TestDefaultLogger(t *testing.T) {
	w := stdLog(t)
	l := txn.DefaultLogger()
	l.Warn("lease lapsed; it starts no execution until renewed", "node", "a", "reason", "connection refused")
	l.Info("lease renewed; it starts executions again", "node", "a")
	l.With("node", "b").Error("finishing the executions of expired nodes", "error", errors.New("boom"), "other", 1)
	l.Error("settling the idempotency keys of expired nodes", "error", errors.New("boom"))
	want := "toolgate: node a: lease lapsed (connection refused); it starts no execution until renewed\n" +
		"toolgate: node a: lease renewed; it starts executions again\n" +
		"toolgate: node b: finishing the executions of expired nodes: boom\n" +
		"toolgate: settling the idempotency keys of expired nodes: boom\n"
	if got := w.String(); got != want {
		t.Fatalf("lines:\n%s\nwant:\n%s", got, want)
	}
}

// Without Options.Logger, a lease that lapses and is renewed says so on
// the standard log, in the words it always had.
func TestPostgresNodesLeaseMessagesDefault(t *testing.T) {
	dbURL := freshPostgres(t)
	w := stdLog(t)
	openNode(t, dbURL, "a", 300*time.Millisecond)
	// Another run holds a's row, for an hour (not swept meanwhile).
	pgExec(t, dbURL, `UPDATE toolgate_nodes SET instance = 'x' || instance, expires = clock_timestamp() + interval '1 hour' WHERE node = 'a'`)
	lapsed := "toolgate: node a: lease lapsed (another run under the same node name holds it); it starts no execution until renewed\n"
	waitFor(t, "the lapse on the standard log", func() bool { return strings.Contains(w.String(), lapsed) })
	pgExec(t, dbURL, `UPDATE toolgate_nodes SET instance = substr(instance, 2) WHERE node = 'a'`)
	renewed := "toolgate: node a: lease renewed; it starts executions again\n"
	waitFor(t, "the renewal on the standard log", func() bool { return strings.Contains(w.String(), renewed) })
	if got := w.String(); got != lapsed+renewed {
		t.Fatalf("the standard log:\n%s\nwant:\n%s", got, lapsed+renewed)
	}
}

// A Logger given in Options gets the records; the standard log, nothing.
func TestPostgresNodesLeaseMessagesLogger(t *testing.T) {
	dbURL := freshPostgres(t)
	w := stdLog(t)
	var mu sync.Mutex
	var text bytes.Buffer
	h := slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return text.Write(p)
	}), &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}})
	s, err := txn.Open(dbURL, &txn.Options{NoSync: true, Node: "a", Lease: 300 * time.Millisecond, Logger: slog.New(h)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	pgExec(t, dbURL, `UPDATE toolgate_nodes SET instance = 'x' || instance, expires = clock_timestamp() + interval '1 hour' WHERE node = 'a'`)
	want := `level=WARN msg="lease lapsed; it starts no execution until renewed" node=a reason="another run under the same node name holds it"` + "\n"
	waitFor(t, "the lapse record", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.Contains(text.String(), want)
	})
	if got := w.String(); got != "" {
		t.Fatalf("the standard log got %q", got)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// A renewal that fails once, followed by one that succeeds before the
// lease lapsed here, says nothing on the log: only a lapse is told (and
// the renewal after it).
func TestPostgresNodesLeaseMessagesNoLapse(t *testing.T) {
	dbURL := freshPostgres(t)
	w := stdLog(t)
	ctx := context.Background()
	a := openNode(t, dbURL, "a", 6*time.Second) // renewed every 2s, lapses 5.4s after the last renewal
	pa := a.Driver().(*pgstore.Store)
	var lapsed atomic.Bool
	stop := make(chan struct{})
	polled := make(chan struct{})
	go func() { // whether the lease ever lapsed here (a machine too slow for the test)
		defer close(polled)
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
				if pa.LeaseErr() != nil {
					lapsed.Store(true)
				}
			}
		}
	}()
	pgExec(t, dbURL, `UPDATE toolgate_nodes SET instance = 'x' || instance WHERE node = 'a'`)
	waitFor(t, "a renewal to fail", func() bool {
		_, err := a.Begin(ctx, newRecord("r-"+strconv.FormatInt(time.Now().UnixNano(), 10), "tool", "EXECUTING"))
		return err != nil && strings.Contains(err.Error(), "renewal failed")
	})
	pgExec(t, dbURL, `UPDATE toolgate_nodes SET instance = substr(instance, 2) WHERE node = 'a'`)
	waitFor(t, "a renewal to succeed", func() bool {
		_, err := a.Begin(ctx, newRecord("r-"+strconv.FormatInt(time.Now().UnixNano(), 10), "tool", "EXECUTING"))
		return err == nil
	})
	close(stop)
	<-polled
	if lapsed.Load() {
		t.Skip("the lease lapsed here between the renewals: this machine is too slow for the test")
	}
	if got := w.String(); got != "" {
		t.Fatalf("the log after one failed renewal, the lease holding:\n%s\nwant nothing", got)
	}
}
