package pgstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/toolgate/toolgate/txn/driver"
)

// Leases: how many nodes share one Postgres database.
//
// Each writing Store is a node: a row in toolgate_nodes holding its lease,
// which expires Lease after its last renewal by the database's clock (so
// the hosts' clocks do not matter). A background goroutine renews it every
// Lease/3. Every claim (Begin) is stored in a transaction that checks, by
// the database's clock, that the node's lease holds, and carries the
// node's name; a node whose lease has lapsed (Postgres unreachable longer
// than that) claims nothing, and its Begin calls fail with ErrLeaseLost,
// until a renewal succeeds.
//
// A claim is finished ABORTED -> ROLLED_BACK "interrupted" (the runtime's
// finish function):
//
//   - by its own node when it restarts under the same name (Recover, at
//     Open): nothing of the new run can be live yet;
//   - by any node once its node's lease has expired, or its node closed:
//     the sweep deletes the expired rows and finishes their claims in one
//     transaction, so a renewal coming late finds its row gone (and its
//     claims finished) rather than reviving it. A node whose lease holds
//     is never swept;
//   - by its own node when no Tx of this run holds it any more (a commit
//     or rollback whose answer was lost with the connection).
//
// Every write transaction takes the audit head's row lock first, so claims
// and sweeps are serialized: a claim stored under a valid lease is swept
// only after that lease expired.

// DefaultLease is a node's lease when neither Options.Lease nor
// $TOOLGATE_LEASE sets it.
const DefaultLease = 15 * time.Second

// MinLease is the shortest lease Open accepts, from Options.Lease or
// $TOOLGATE_LEASE.
const MinLease = 100 * time.Millisecond

// maxNodeName is the longest node name, in bytes.
const maxNodeName = 200

type pgLease struct {
	node  string                 // the node's name: its claims carry it
	runID atomic.Pointer[string] // this run of it (the lease row's instance); a new one when the row was lost
	host  string
	lease time.Duration

	start time.Time    // monotonic base of until
	until atomic.Int64 // ns after start at which the lease lapses here (a margin before the database's expiry)

	log *slog.Logger // the lease's messages (Options.Logger)

	mu      sync.Mutex
	held    map[string]struct{} // claims of this run whose Tx may still end them
	finish  driver.Finish
	onGone  func(context.Context) // after a sweep (OnSweep)
	lostMsg string                // why the last renewal failed; "" while the lease holds
	lapsed  bool                  // "lease lapsed" was logged, and no renewal since

	stop chan struct{}
	done chan struct{}
}

func newLease(opts *Options) (*pgLease, error) {
	node := opts.Node
	if node == "" {
		node = os.Getenv("TOOLGATE_NODE")
	}
	host, _ := os.Hostname()
	if host == "" {
		host = "localhost"
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	instance := hex.EncodeToString(b[:])
	if node == "" {
		// A name of its own for each run: its claims are finished by
		// whichever node sweeps after its lease expires.
		node = host + "-" + instance[:8]
	}
	if err := CheckNode(node); err != nil { // Validate checked Options.Node: $TOOLGATE_NODE
		return nil, fmt.Errorf("txn: TOOLGATE_NODE: %s", strings.TrimPrefix(err.Error(), "txn: "))
	}
	lease := opts.Lease
	if lease != 0 {
		// txn.Options.Validate checked it; pgstore.Open is called directly
		// too, and a lease under zero would stop the renewal's ticker.
		if err := CheckLease(lease); err != nil {
			return nil, err
		}
	}
	if lease == 0 {
		if v := os.Getenv("TOOLGATE_LEASE"); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return nil, fmt.Errorf("txn: TOOLGATE_LEASE=%q: want a positive duration such as 15s", v)
			}
			if d < MinLease {
				return nil, fmt.Errorf("txn: TOOLGATE_LEASE=%q: at least %v", v, MinLease)
			}
			lease = d
		}
	}
	if lease == 0 {
		lease = DefaultLease
	}
	logger := opts.Logger
	if logger == nil {
		logger = DefaultLogger()
	}
	l := &pgLease{
		node: node, lease: lease, start: time.Now(), host: host, log: logger,
		held: map[string]struct{}{}, stop: make(chan struct{}), done: make(chan struct{}),
	}
	l.runID.Store(&instance)
	return l, nil
}

// CheckNode reports whether node is usable as a node's name.
func CheckNode(node string) error {
	if len(node) > maxNodeName || strings.ContainsFunc(node, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return fmt.Errorf("txn: node name %q: at most %d bytes, without control characters", node, maxNodeName)
	}
	return nil
}

// CheckLease reports whether lease is long enough.
func CheckLease(lease time.Duration) error {
	switch {
	case lease < 0:
		return fmt.Errorf("txn: lease %v is negative", lease)
	case lease < MinLease:
		return fmt.Errorf("txn: lease %v is too short: at least %v", lease, MinLease)
	}
	return nil
}

// DefaultLogger returns the logger Open uses when Options.Logger is nil:
// each record becomes one line of the standard log package (its output,
// stderr unless log.SetOutput changed it, and its flags), worded as
// toolgate has always written these messages: "toolgate: node NAME:
// MESSAGE", the attribute "reason" in parentheses before the message's
// "; ", and "error" after it. Other attributes and groups are left out.
func DefaultLogger() *slog.Logger { return slog.New(stdlogHandler{}) }

// stdlogHandler is the handler of DefaultLogger.
type stdlogHandler struct{ attrs []slog.Attr }

func (stdlogHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h stdlogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return stdlogHandler{append(h.attrs[:len(h.attrs):len(h.attrs)], attrs...)}
}

func (h stdlogHandler) WithGroup(string) slog.Handler { return h }

func (h stdlogHandler) Handle(_ context.Context, r slog.Record) error {
	var node, reason, errText string
	take := func(a slog.Attr) bool {
		switch a.Key {
		case "node":
			node = a.Value.String()
		case "reason":
			reason = a.Value.String()
		case "error":
			errText = a.Value.String()
		}
		return true
	}
	for _, a := range h.attrs {
		take(a)
	}
	r.Attrs(take)
	var b strings.Builder
	b.WriteString("toolgate: ")
	if node != "" {
		b.WriteString("node " + node + ": ")
	}
	head, tail, semi := strings.Cut(r.Message, "; ")
	b.WriteString(head)
	if reason != "" {
		b.WriteString(" (" + reason + ")")
	}
	if semi {
		b.WriteString("; " + tail)
	}
	if errText != "" {
		b.WriteString(": " + errText)
	}
	return log.Output(2, b.String())
}

// run returns this run's id, the lease row's instance.
func (l *pgLease) run() string { return *l.runID.Load() }

// holder names this process and run, for messages and for a restarted
// node to tell its dead predecessor from a live twin.
func (l *pgLease) holder() string {
	return fmt.Sprintf("host %s pid %d run %s", l.host, os.Getpid(), l.run())
}

// check fails with ErrLeaseLost once the lease has lapsed by this host's
// clock (a margin before the database's expiry).
func (l *pgLease) check() error {
	if time.Since(l.start).Nanoseconds() < l.until.Load() {
		return nil
	}
	return l.lostErr()
}

func (l *pgLease) lostErr() error {
	l.mu.Lock()
	why := l.lostMsg
	l.mu.Unlock()
	if why == "" {
		why = "it was not renewed in time"
	}
	return fmt.Errorf("%w: node %s starts no execution until it is renewed (%s)", ErrLeaseLost, l.node, why)
}

// claimGone is the error of a commit or rollback whose claim is not there:
// after the lease lapsed, another node may have finished it.
func (l *pgLease) claimGone(err error) error {
	if l.check() != nil {
		return fmt.Errorf("%w (this node's lease lapsed: another node may have finished it as interrupted)", err)
	}
	return err
}

func (l *pgLease) hold(id string) { l.mu.Lock(); l.held[id] = struct{}{}; l.mu.Unlock() }
func (l *pgLease) drop(id string) { l.mu.Lock(); delete(l.held, id); l.mu.Unlock() }

func (l *pgLease) live() [][]byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([][]byte, 0, len(l.held))
	for id := range l.held {
		out = append(out, []byte(id))
	}
	return out
}

func (l *pgLease) setFinish(f driver.Finish) {
	l.mu.Lock()
	l.finish = f
	l.mu.Unlock()
}

func (l *pgLease) interval() string {
	return strconv.FormatInt(l.lease.Microseconds(), 10) + " microseconds"
}

// acquire registers the node, waiting up to timeout for a lease another
// run of the same name holds. A run of it on this host whose process is
// gone (or is this one: a container's pid) is taken over at once.
func (p *Store) acquire(ctx context.Context, timeout time.Duration) error {
	l := p.lease
	deadline := time.Now().Add(timeout)
	for {
		var (
			instance, holder string
			live             bool
			expires          time.Time
		)
		err := p.pool.QueryRow(ctx, `SELECT instance, holder, expires > clock_timestamp(), expires FROM toolgate_nodes WHERE node = $1`,
			l.node).Scan(&instance, &holder, &live, &expires)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("txn: %s: read the lease of node %s: %v", p.path, l.node, pgMessage(err))
		}
		if errors.Is(err, pgx.ErrNoRows) || !live || l.predecessor(holder) {
			t0 := time.Since(l.start)
			tag, err := p.pool.Exec(ctx, `INSERT INTO toolgate_nodes (node, instance, holder, started, expires)
				VALUES ($1, $2, $3, clock_timestamp(), clock_timestamp() + $4::interval)
				ON CONFLICT (node) DO UPDATE SET instance = excluded.instance, holder = excluded.holder,
					started = excluded.started, expires = excluded.expires, grp = 0
				WHERE toolgate_nodes.instance = $5`, l.node, l.run(), l.holder(), l.interval(), instance)
			if err != nil {
				return fmt.Errorf("txn: %s: take the lease of node %s: %v", p.path, l.node, pgMessage(err))
			}
			if tag.RowsAffected() == 1 {
				liveInstances.Store(l.run(), true)
				l.renewed(t0)
				return nil
			}
			continue // changed meanwhile: look again
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: %s: node %s is running (%s, its lease renewed until %s): give each toolgate sharing a database its own node name ($TOOLGATE_NODE)",
				ErrLocked, p.path, l.node, holder, expires.UTC().Format(time.RFC3339))
		}
		time.Sleep(min(50*time.Millisecond, time.Until(deadline)+time.Millisecond))
	}
}

// predecessor reports whether holder is an earlier run of this node on
// this host that is gone: its process no longer exists, or it is this
// process (the same pid again, as in a restarted container).
func (l *pgLease) predecessor(holder string) bool {
	var host string
	var pid int
	if _, err := fmt.Sscanf(holder, "host %s pid %d", &host, &pid); err != nil {
		return false
	}
	me, _ := os.Hostname()
	if host != me {
		return false
	}
	if pid == os.Getpid() {
		// This process: an earlier run in a restarted container, unless a
		// Store of this process holds it now.
		_, mine := liveInstances.Load(instanceOf(holder))
		return !mine
	}
	err := syscall.Kill(pid, 0)
	return errors.Is(err, syscall.ESRCH)
}

// liveInstances holds the instances of this process's open Stores.
var liveInstances sync.Map

// instanceOf returns the run named in a holder.
func instanceOf(holder string) string {
	_, run, _ := strings.Cut(holder, " run ")
	return run
}

// renewed records a renewal sent at t0 (since start): the lease holds here
// until t0 + lease, less a margin for the clocks' drift. It reports whether
// the lease had been logged as lapsed.
func (l *pgLease) renewed(t0 time.Duration) (wasLapsed bool) {
	l.until.Store((t0 + l.lease - l.lease/10).Nanoseconds())
	l.mu.Lock()
	wasLapsed = l.lapsed
	l.lostMsg, l.lapsed = "", false
	l.mu.Unlock()
	return wasLapsed
}

// keepLease renews the lease every lease/3 and sweeps what dead nodes (and
// this one's lost commits) left, until the store closes.
func (p *Store) keepLease() {
	l := p.lease
	defer close(l.done)
	tick := time.NewTicker(l.lease / 3)
	defer tick.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-tick.C:
		}
		p.renew()
		l.mu.Lock()
		finish := l.finish
		l.mu.Unlock()
		if finish != nil && p.sweepDue() {
			ctx, cancel := context.WithTimeout(context.Background(), l.lease)
			_, err := p.sweep(ctx, finish, true)
			if err != nil && !errors.Is(err, ErrClosed) {
				l.log.LogAttrs(ctx, slog.LevelError, "finishing the executions of expired nodes",
					slog.String("node", l.node), slog.Any("error", err))
			}
			l.mu.Lock()
			gone := l.onGone
			l.mu.Unlock()
			if err == nil && gone != nil {
				gone(ctx)
			}
			cancel()
		}
	}
}

// renew extends the lease. If its row is gone (the lease lapsed and
// another node, or this one, swept its claims), it registers again as a
// new run: what the old run had in flight was finished by the sweep, and
// its idempotency keys, tagged with the old run, are settled (the sweep
// hook runs) rather than taken for this run's.
func (p *Store) renew() {
	l := p.lease
	ctx, cancel := context.WithTimeout(context.Background(), l.lease/3)
	defer cancel()
	t0 := time.Since(l.start)
	tag, err := p.pool.Exec(ctx, `UPDATE toolgate_nodes SET expires = clock_timestamp() + $3::interval
		WHERE node = $1 AND instance = $2`, l.node, l.run(), l.interval())
	if err == nil && tag.RowsAffected() == 1 {
		if l.renewed(t0) {
			l.log.LogAttrs(ctx, slog.LevelInfo, "lease renewed; it starts executions again", slog.String("node", l.node))
		}
		return
	}
	why := "another run under the same node name holds it"
	if err == nil {
		var b [8]byte
		_, _ = rand.Read(b[:])
		next := hex.EncodeToString(b[:])
		old := l.run()
		h := strings.Replace(l.holder(), " run "+old, " run "+next, 1)
		tag, err = p.pool.Exec(ctx, `INSERT INTO toolgate_nodes (node, instance, holder, started, expires)
			VALUES ($1, $2, $3, clock_timestamp(), clock_timestamp() + $4::interval)
			ON CONFLICT (node) DO NOTHING`, l.node, next, h, l.interval())
		if err == nil && tag.RowsAffected() == 1 {
			liveInstances.Store(next, true)
			liveInstances.Delete(old)
			l.runID.Store(&next)
			l.renewed(t0)
			l.log.LogAttrs(ctx, slog.LevelWarn, "its lease had lapsed and its executions were finished as interrupted; it runs on under a new lease",
				slog.String("node", l.node), slog.String("run", next))
			l.mu.Lock()
			gone := l.onGone
			l.mu.Unlock()
			if gone != nil {
				gone(ctx)
			}
			return
		}
	}
	if err != nil {
		why = pgMessage(err)
	}
	l.mu.Lock()
	l.lostMsg = "renewal failed: " + why
	l.mu.Unlock()
	// Said once a lapse, when it has lapsed here: an earlier renewal that
	// failed may be followed by one that succeeds in time.
	if l.check() != nil {
		l.mu.Lock()
		say := !l.lapsed
		l.lapsed = true
		l.mu.Unlock()
		if say {
			l.log.LogAttrs(ctx, slog.LevelWarn, "lease lapsed; it starts no execution until renewed",
				slog.String("node", l.node), slog.String("reason", why))
		}
	}
}

// sweepDue reports whether there are claims to sweep: of nodes whose lease
// expired or that are gone, or this node's own that no Tx holds.
func (p *Store) sweepDue() bool {
	ctx, cancel := context.WithTimeout(context.Background(), p.lease.lease/3)
	defer cancel()
	var due bool
	err := p.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM toolgate_executions e WHERE executing
		AND (node IS NULL OR (node = $1 AND NOT (id = ANY($2::bytea[])))
			OR NOT EXISTS (SELECT 1 FROM toolgate_nodes n WHERE n.node = e.node AND n.expires >= clock_timestamp())))
		OR EXISTS (SELECT 1 FROM toolgate_nodes WHERE expires < clock_timestamp())`,
		p.lease.node, p.lease.live()).Scan(&due)
	return err == nil && due
}

// release stops the lease and ends it: the node's row is deleted, so
// claims it left (none, after a clean shutdown) are swept at once.
func (p *Store) release() {
	l := p.lease
	close(l.stop)
	<-l.done
	liveInstances.Delete(l.run())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = p.pool.Exec(ctx, `DELETE FROM toolgate_nodes WHERE node = $1 AND instance = $2`, l.node, l.run())
}

// OnSweep registers fn, run (on the lease's goroutine) after each
// background sweep of what expired nodes left: their claims finished, their
// lease rows deleted. The runtime settles their idempotency keys there.
func (p *Store) OnSweep(fn func(context.Context)) {
	if p.lease != nil {
		p.lease.mu.Lock()
		p.lease.onGone = fn
		p.lease.mu.Unlock()
	}
}

// LeaseErr says why this node may start no execution now: it holds no
// lease (ErrReadOnly), or its lease lapsed (ErrLeaseLost, as Begin says).
func (p *Store) LeaseErr() error {
	if p.readOnly || p.lease == nil {
		return ErrReadOnly
	}
	return p.lease.check()
}

// Node returns the name of this node, under which its claims are stored,
// or "" (read-only).
func (p *Store) Node() string {
	if p.lease != nil {
		return p.lease.node
	}
	return ""
}

// NodeRun returns this node's name and run ("name/run"), or "" (read
// only): what the runtime tags an idempotency key in flight with.
func (p *Store) NodeRun() string {
	if p.lease != nil {
		return p.lease.node + "/" + p.lease.run()
	}
	return ""
}

// NodeLive reports whether run (a NodeRun of some store, or a bare node
// name) is another run than this store's whose lease on the shared
// database holds: what it has in flight is its own, not to be settled by
// this one.
func (p *Store) NodeLive(ctx context.Context, run string) (bool, error) {
	if run == "" || run == p.NodeRun() || run == p.Node() {
		return false, nil
	}
	if err := p.ready(ctx); err != nil {
		return false, err
	}
	node, inst, _ := strings.Cut(run, "/")
	var live bool
	err := p.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM toolgate_nodes WHERE node = $1
		AND ($2 = '' OR instance = $2) AND expires > clock_timestamp())`, node, inst).Scan(&live)
	if err != nil {
		return false, p.readErr(ctx, err)
	}
	return live, nil
}
