package pgstore_test

import (
	"bytes"
	"errors"
	"log"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/txn"
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
