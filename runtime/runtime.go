package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/internal/uuid"
	"github.com/toolgate/toolgate/lifecycle"
	"github.com/toolgate/toolgate/tools"
	"github.com/toolgate/toolgate/txn"
)

// Runtime executes tools under RFC-0001. It is safe for concurrent use.
//
// Its embedded [Reader] reads what its store holds: executions, intents,
// the audit log, and their verification.
type Runtime struct {
	*Reader

	opts   Options
	policy *capability.Policy
	// approvers holds the policy's approval keys, parsed: approver (or
	// "*") to the keys whose signatures make its approvals count. Empty:
	// approvals need no signature.
	approvers approverKeys
	reg       *tools.Registry
	store     *txn.Store
	ownsStore bool // made by Open: Close closes the store
	slots     chan struct{}
	// toolSlots holds the slots of each tool (id@version) that declares
	// maxConcurrent.
	toolSlots map[string]chan struct{}
	procs     *procMetrics // nil without a MeterProvider
	// reaped is what recovery found of the processes interrupted
	// executions left running (reapLeftovers).
	reapMu sync.Mutex
	reaped map[reapKey]reapOutcome

	skipStagedApply bool // tests: stop as a crash would, between the commit and the renames
	pool            *workers
	ids             uuid.Generator // execution ids, time-ordered
	tel             telemetry

	// stop is canceled when Close gives up waiting: every running attempt
	// is then aborted and rolled back.
	stop       context.Context
	abortAll   context.CancelFunc
	mu         sync.Mutex
	closing    bool
	inflight   sync.WaitGroup
	running    atomic.Int64 // the invocations inflight counts
	closedOnce sync.Once
	closeErr   error
}

// Open opens (creating if needed) the database at path, a bbolt file or a
// postgres:// URL, with the store options of opts (OpenTimeout, NoSync,
// Node, Lease, Logger), and returns a runtime on it as [New] does. The
// runtime owns that store: its Close closes it. Open returns an error,
// before anything is opened, when the options are invalid, and one when
// the file is locked by another process (after opts.OpenTimeout) or is not
// a toolgate database.
func Open(path string, opts *Options) (*Runtime, error) {
	c, err := configure(opts)
	if err != nil {
		return nil, err
	}
	o := &c.opts
	store, err := txn.Open(path, &txn.Options{Timeout: o.OpenTimeout, NoSync: o.NoSync, Node: o.Node, Lease: o.Lease, Logger: o.Logger})
	if err != nil {
		return nil, fmt.Errorf("runtime: %w", err)
	}
	r, err := c.start(store)
	if err != nil {
		store.Close()
		return nil, err
	}
	r.ownsStore = true
	return r, nil
}

// New returns a runtime for the tools of opts.Registry, which it freezes,
// on store, an open store (txn.Open, not read-only), as [Open] does once it
// has opened its own. It first finishes what an earlier runtime on the
// database left: executions interrupted by a crash, their staged file
// writes and idempotency keys.
//
// The caller keeps ownership of store, as with database/sql: the runtime's
// Close does not close it, and the caller closes it after that Close
// returns. One runtime at a time runs on a store: New refuses (an error
// wrapping txn.ErrLocked) a store whose runtime is not yet closed. The
// store options of opts (OpenTimeout, NoSync, Node, Lease) are not used:
// those of the store apply. A runtime made by New still reports to
// opts.Logger what it logs itself. On a shared Postgres database, a store
// left open after its runtime's Close goes on finishing, as that runtime
// would, the executions of nodes whose lease expires.
func New(store *txn.Store, opts *Options) (*Runtime, error) {
	if store == nil {
		return nil, errors.New("runtime: New needs an open store")
	}
	c, err := configure(opts)
	if err != nil {
		return nil, err
	}
	return c.start(store)
}

// config is what a runtime is built from, checked before any store is
// touched.
type config struct {
	opts      Options
	policy    *capability.Policy
	approvers approverKeys
}

// configure checks opts and fills in their defaults; it freezes the
// registry.
func configure(opts *Options) (*config, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if err := o.Validate(); err != nil {
		return nil, err
	}
	o.fill()
	if o.Registry == nil {
		o.Registry = tools.NewRegistry()
		for _, t := range tools.Builtins() {
			if err := o.Registry.Register(t); err != nil {
				return nil, fmt.Errorf("runtime: registering built-in tool: %w", err)
			}
		}
	}
	if o.WorkDir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return nil, fmt.Errorf("runtime: working directory: %w", err)
		}
		o.WorkDir = wd
	}
	o.Registry.Freeze()
	policy := o.Policy
	if policy == nil {
		p, err := capability.NewPolicy(o.Grants) // copies: the caller's map may change later; ours does not
		if err != nil {
			return nil, fmt.Errorf("runtime: Options.Grants: %w", err)
		}
		policy = p
	}
	o.Grants = nil
	if set := policy.Rules(); set != nil {
		// A Cedar policy for a tool this runtime does not have is a typo
		// that would never match: refused, as the CLI refuses it.
		if err := set.CheckActions(func(tool, version string) bool {
			_, err := o.Registry.Lookup(tool, version)
			return err == nil
		}); err != nil {
			return nil, fmt.Errorf("runtime: Options.Policy: %w", err)
		}
	}
	approvers, err := approvalKeys(policy)
	if err != nil {
		return nil, err
	}
	return &config{opts: o, policy: policy, approvers: approvers}, nil
}

// storesInUse holds the stores runtimes run on, each until its runtime's
// Close: a second runtime on one store would take the first one's running
// executions for interrupted ones.
var storesInUse sync.Map // *txn.Store -> struct{}

// start makes the runtime of c on store, which it does not close when it
// fails.
func (c *config) start(store *txn.Store) (*Runtime, error) {
	if _, busy := storesInUse.LoadOrStore(store, struct{}{}); busy {
		return nil, fmt.Errorf("runtime: %w: another runtime runs on this store; close it first", txn.ErrLocked)
	}
	r, err := newRuntime(store, c.opts, c.policy, c.approvers)
	if err != nil {
		store.OnSweep(nil)
		storesInUse.Delete(store)
		return nil, err
	}
	return r, nil
}

// newRuntime builds a runtime on store and recovers what an earlier one
// left. It does not close store when it fails.
func newRuntime(store *txn.Store, o Options, policy *capability.Policy, approvers approverKeys) (*Runtime, error) {
	stop, abort := context.WithCancel(context.Background())
	r := &Runtime{
		opts:      o,
		policy:    policy,
		approvers: approvers,
		reg:       o.Registry,
		Reader:    &Reader{store: store, approvers: approvers},
		store:     store,
		slots:     make(chan struct{}, o.MaxConcurrent),
		pool:      newWorkers(),
		stop:      stop,
		abortAll:  abort,
		tel:       newTelemetry(&o),
		procs:     newProcMetrics(o.MeterProvider),
	}
	r.toolSlots = make(map[string]chan struct{})
	for _, e := range o.Registry.Entries() {
		if d := e.Declaration(); d.ResourceLimits.MaxConcurrent > 0 {
			r.toolSlots[d.Key()] = make(chan struct{}, d.ResourceLimits.MaxConcurrent)
		}
	}
	// On a shared Postgres database the store keeps this function to finish,
	// later, the executions of nodes whose lease expires: the time is taken
	// at each call.
	keys, err := r.runningKeys(context.Background())
	if err != nil {
		abort()
		return nil, fmt.Errorf("runtime: reading the idempotency keys of interrupted invocations: %w", err)
	}
	var keysMu sync.Mutex
	finish := func(rec *txn.Record) ([]txn.AuditEvent, error) {
		// The events that finish an attempt carry its call's idempotency
		// key, as its others do. A claim of another node, swept later, may
		// hold a key taken since Open: look again (Postgres only: there the
		// read does not wait for the write this runs in).
		keysMu.Lock()
		defer keysMu.Unlock()
		k := idemCall{rec.CallID, rec.Principal, rec.ToolID}
		if _, ok := keys[k]; !ok && store.Node() != "" {
			if again, err := r.runningKeys(context.Background()); err == nil {
				keys = again
			}
		}
		return r.interrupted(r.opts.Now(), keys[k])(rec)
	}
	if _, err := store.Recover(context.Background(), finish); err != nil {
		abort()
		return nil, fmt.Errorf("runtime: recovering interrupted executions: %w", err)
	}
	if err := r.recoverStaged(context.Background()); err != nil {
		// A committed write that cannot be made visible: refuse rather than
		// run on with files that contradict the records.
		abort()
		return nil, fmt.Errorf("runtime: finishing the staged file writes of committed executions: %w", err)
	}
	if err := r.recoverKeys(context.Background()); err != nil {
		abort()
		return nil, fmt.Errorf("runtime: settling the idempotency keys of interrupted invocations: %w", err)
	}
	// On a shared Postgres: the keys of calls whose node died are settled
	// once another node has finished that node's executions.
	store.OnSweep(func(ctx context.Context) {
		if err := r.settleKeys(ctx, false); err != nil && store.Err() == nil {
			o.Logger.LogAttrs(ctx, slog.LevelError, "settling the idempotency keys of expired nodes",
				slog.String("node", store.Node()), slog.Any("error", err))
		}
	})
	if err := r.auditLegacyIntents(context.Background()); err != nil {
		abort()
		return nil, fmt.Errorf("runtime: bringing the intents of an earlier version under the audit log: %w", err)
	}
	if err := r.indexIntents(context.Background()); err != nil {
		abort()
		return nil, fmt.Errorf("runtime: indexing the intents of an earlier version: %w", err)
	}
	return r, nil
}

// interrupted finishes a record a crash left EXECUTING: ABORTED, then
// ROLLED_BACK, both with the reason "interrupted". The attempt is not run
// again.
func (r *Runtime) interrupted(at time.Time, key string) func(*txn.Record) ([]txn.AuditEvent, error) {
	return func(rec *txn.Record) ([]txn.AuditEvent, error) {
		// What the tool's processes left running is killed before the
		// record says the attempt stopped.
		left := r.reapLeftovers(rec)
		rec.Processes = nil
		reason := "interrupted: the process ended during execution; its writes never reached the database"
		message := "execution interrupted: the process ended while the tool ran; it was not run again"
		if left != "" {
			reason += "; " + left
			message += "; " + left
		}
		added := []lifecycle.Transition{
			{From: lifecycle.Executing, To: lifecycle.Aborted, Event: lifecycle.EventAbort, At: at, Reason: "interrupted"},
			{From: lifecycle.Aborted, To: lifecycle.RolledBack, Event: lifecycle.EventRollback, At: at, Reason: reason},
		}
		rec.Transitions = append(rec.Transitions, transitions(added)...)
		rec.State = string(lifecycle.RolledBack)
		rec.EndedAt = at
		info := &ErrorInfo{Type: "ExecutionError", Code: "interrupted", Message: message}
		rec.Error = &txn.ErrorInfo{Type: info.Type, Code: info.Code, Message: info.Message}
		rec.WriteSet = &txn.WriteSetSummary{}
		return auditEvents(&r.ids, rec, added, 0, rec.StartedAt, info, eventExtras{idemKey: key}, nil), nil
	}
}

// idemCall names a call as an idempotency record does.
type idemCall struct{ callID, principal, tool string }

// runningKeys returns the keys of the calls whose idempotency record is
// still running: an interrupted attempt's events carry its call's key.
func (r *Runtime) runningKeys(ctx context.Context) (map[idemCall]string, error) {
	all, err := r.store.StateValues(ctx, nsIdem)
	if err != nil {
		return nil, err
	}
	keys := map[idemCall]string{}
	for _, b := range all {
		var rec idemRecord
		if json.Unmarshal(b, &rec) == nil && rec.State == idemRunning {
			keys[idemCall{rec.CallID, rec.Principal, rec.Tool}] = rec.Key
		}
	}
	return keys, nil
}

// Err returns why the runtime refuses work, or nil: its store was poisoned
// by a failed commit. The error names the cause and what to fix before the
// database is reopened, which is the only way it works again.
func (r *Runtime) Err() error { return r.store.Err() }

// Registry returns the runtime's (frozen) registry.
func (r *Runtime) Registry() *tools.Registry { return r.reg }

// StateValue reads committed tool-visible state.
func (r *Runtime) StateValue(ctx context.Context, namespace, key string) ([]byte, bool, error) {
	return r.store.StateValue(ctx, namespace, key)
}

// Close stops accepting invocations, waits for running ones to end, and,
// for a runtime made by [Open], closes the database. If ctx ends first, the
// running attempts are aborted (ABORTED, then ROLLED_BACK, recorded) before
// it returns (and the database closes), and ctx's error is returned. A
// runtime made by [New] leaves its store open to its owner, who may close it
// or hand it to another runtime once Close has returned. Close is
// idempotent.
func (r *Runtime) Close(ctx context.Context) error {
	r.mu.Lock()
	r.closing = true
	r.mu.Unlock()
	r.closedOnce.Do(func() {
		done := make(chan struct{})
		go func() { r.inflight.Wait(); close(done) }()
		var waitErr error
		select {
		case <-done:
		case <-ctx.Done():
			waitErr = ctx.Err()
			r.abortAll()
			<-done // attempts return promptly once aborted: they do not wait for their tools
		}
		r.abortAll()
		r.pool.close()
		tools.WaitProcessDirs() // the fresh working directories of its processes, removed in the background
		if r.ownsStore {
			r.closeErr = errors.Join(waitErr, r.store.Close())
		} else {
			r.store.OnSweep(nil)
			r.closeErr = waitErr
		}
		storesInUse.Delete(r.store)
	})
	return r.closeErr
}

// enter registers an invocation, refusing it once Close has begun.
func (r *Runtime) enter() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closing {
		return ErrClosed
	}
	r.inflight.Add(1)
	r.running.Add(1)
	return nil
}

// leave ends what enter registered.
func (r *Runtime) leave() {
	r.running.Add(-1)
	r.inflight.Done()
}

// Running returns how many invocations are running: what Close waits for.
func (r *Runtime) Running() int { return int(r.running.Load()) }

// Policy returns the capability policy the runtime decides under.
func (r *Runtime) Policy() *capability.Policy { return r.policy }
