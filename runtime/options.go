package runtime

import (
	"errors"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/tools"
	"github.com/toolgate/toolgate/txn"
)

// Options configure a Runtime. A nil *Options means DefaultOptions(); zero
// fields mean their defaults. The fields that configure the store
// (OpenTimeout, NoSync, Node, Lease) are used by [Open], which opens it;
// [New] runs on a store opened with its own.
type Options struct {
	// Registry holds the tools this runtime executes. Open and New freeze
	// it. nil means a registry of the built-in tools.
	Registry *tools.Registry

	// Policy grants capabilities to principals; everything it does not
	// list is denied. A policy that failed to load (capability.LoadPolicy
	// returns one with its error) denies everything, with the reason in
	// each decision. nil means the policy built from Grants.
	Policy *capability.Policy

	// Grants is a shorthand for a Policy given as a Go value: principals
	// and the capabilities they hold. Set Policy or Grants, not both.
	Grants map[string][]capability.Capability

	// ApprovalKey, if set, signs every decision on an intent this runtime
	// records (Approve, ApproveVia, Reject): the signature, in the
	// decision's audit event, proves who made it to whoever holds the
	// policy's approval keys (capability.Policy.ApprovalKeys). When the
	// policy lists approval keys, an approval counts only if it is signed
	// by a key listed for its approver (or under "*"): this runtime refuses
	// to record one it cannot sign so, and runs no intent whose approval
	// is not.
	ApprovalKey *audit.SigningKey

	// Retry is the retry policy of RFC-0001 7.3.
	Retry RetryPolicy

	// MaxConcurrent is the number of attempts that may execute at once
	// (RFC-0001 rule 3); default 64.
	MaxConcurrent int

	// SlotWait is how long an attempt waits for a free execution slot before
	// it fails with a ResourceError; default 5s. Negative means do not wait.
	SlotWait time.Duration

	// MaxInputBytes caps the size of an invocation's input; default 4 MiB.
	MaxInputBytes int

	// MaxPendingIntents is how many intents one proposer may have pending
	// (neither approved nor rejected) at once; default 1000, negative
	// means no limit. Propose refuses one more (*IntentError, code
	// intent_limit), so that an agent cannot flood the approvers (and
	// the store) with proposals. Intents pending from before this version
	// are not counted.
	MaxPendingIntents int

	// WorkDir is the directory relative paths given to tools are resolved
	// against; "" means the process's working directory at Open.
	WorkDir string

	// IdempotencyTTL is how long an idempotency key holds its result;
	// default 24h.
	IdempotencyTTL time.Duration

	// OpenTimeout is how long Open waits for another process to release the
	// database; default 1s.
	OpenTimeout time.Duration

	// NoSync skips fsync on commit. Only for tests and benchmarks: a crash
	// can lose acknowledged executions.
	NoSync bool

	// Now is the clock; nil means time.Now.
	Now func() time.Time

	// TracerProvider receives a span per invocation, with a child per
	// attempt and per lifecycle phase (see "Telemetry" in the package
	// documentation). nil, like the no-op provider, means no spans: the
	// runtime then does none of the work of building them.
	TracerProvider trace.TracerProvider

	// MeterProvider receives the execution metrics (see "Telemetry" in the
	// package documentation). nil, like the no-op provider, means none.
	MeterProvider metric.MeterProvider

	// RecordArguments puts each invocation's input and output on its span
	// (gen_ai.tool.call.arguments, gen_ai.tool.call.result), and error
	// messages in span statuses. Off by default: they may be sensitive, and
	// traces often leave the host.
	RecordArguments bool

	// OnPropose, if set, is called with each intent once its proposal is
	// committed (by Propose, whichever front end called it: the HTTP API,
	// MCP), before Propose returns. It gets a copy it may keep. It
	// must not block: a notifier queues the intent and returns; a panic in
	// it is recovered and the proposal still succeeds. It never changes the
	// proposal's outcome.
	OnPropose func(*Intent)

	// Node names this runtime among the nodes sharing a Postgres database
	// (a postgres:// path; unused with a bbolt file): the executions it
	// starts are stored under this name, and a runtime opened again under
	// it finishes at once those its predecessor left running. At most 200
	// bytes, without control characters. "" means $TOOLGATE_NODE, else a
	// name of its own at each Open (the host's and a random suffix), whose
	// leftovers wait for its lease to expire. Two runtimes running under
	// one name are refused (txn.ErrLocked).
	Node string

	// Lease is how long this node's lease on a shared Postgres database
	// lasts without renewal; it is renewed every Lease/3. A node that
	// cannot renew it starts no execution until it can; another node
	// finishes what a dead node left once its lease has expired. At least
	// txn.MinLease (100ms); zero means $TOOLGATE_LEASE, else
	// txn.DefaultLease (15s). Unused with a bbolt file.
	Lease time.Duration

	// Logger receives what no call returns and an operator should see: on
	// a shared Postgres database, this node's lease lapsing (level Warn,
	// "lease lapsed; ...", with the attribute "reason") and renewed (Info,
	// "lease renewed; ..."), and failures of the background work that
	// finishes the executions of expired nodes (Error, with "error"). Each
	// record carries the node's name as the attribute "node". nil means
	// txn.DefaultLogger(): lines of the standard log package on stderr, as
	// toolgate has always written them.
	Logger *slog.Logger
}

// OptionError reports an Options field that cannot work. Validate and Open
// return it (joined with the others found, see errors.As) before anything
// is opened.
type OptionError struct {
	Field string // the field's name: "Node", "Lease"
	Err   error  // why
}

func (e *OptionError) Error() string {
	return "runtime: Options." + e.Field + ": " + strings.TrimPrefix(e.Err.Error(), "txn: ")
}
func (e *OptionError) Unwrap() error { return e.Err }

// RetryPolicy says when a failed attempt is tried again. Only idempotent
// tools are retried, and only after a transient ResourceError or a
// TimeoutError; each retry waits BaseDelay * 2^(retry-1), capped at
// MaxDelay, with full jitter.
type RetryPolicy struct {
	// MaxRetries is the number of retries after the first attempt, so at
	// most MaxRetries+1 attempts run. 0 means the default, 3; negative
	// means never retry.
	MaxRetries int
	BaseDelay  time.Duration // default 100ms
	MaxDelay   time.Duration // default 5s
}

// DefaultOptions returns a fresh Options with every default filled in.
func DefaultOptions() *Options {
	o := &Options{}
	o.fill()
	return o
}

func (o *Options) fill() {
	if o.Retry.MaxRetries == 0 {
		o.Retry.MaxRetries = 3
	}
	if o.Retry.BaseDelay == 0 {
		o.Retry.BaseDelay = 100 * time.Millisecond
	}
	if o.Retry.MaxDelay == 0 {
		o.Retry.MaxDelay = 5 * time.Second
	}
	if o.MaxConcurrent == 0 {
		o.MaxConcurrent = 64
	}
	if o.SlotWait == 0 {
		o.SlotWait = 5 * time.Second
	}
	if o.MaxInputBytes == 0 {
		o.MaxInputBytes = 4 << 20
	}
	if o.MaxPendingIntents == 0 {
		o.MaxPendingIntents = 1000
	}
	if o.OpenTimeout == 0 {
		o.OpenTimeout = time.Second
	}
	if o.IdempotencyTTL == 0 {
		o.IdempotencyTTL = 24 * time.Hour
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = txn.DefaultLogger()
	}
}

// Validate reports options that cannot work.
func (o *Options) Validate() error {
	var errs []error
	if o.MaxConcurrent < 0 {
		errs = append(errs, errors.New("runtime: MaxConcurrent must not be negative"))
	}
	if o.MaxInputBytes < 0 {
		errs = append(errs, errors.New("runtime: MaxInputBytes must not be negative"))
	}
	if o.Retry.BaseDelay < 0 || o.Retry.MaxDelay < 0 {
		errs = append(errs, errors.New("runtime: retry delays must not be negative"))
	}
	if o.Policy != nil && o.Grants != nil {
		errs = append(errs, errors.New("runtime: set Options.Policy or Options.Grants, not both"))
	}
	if o.IdempotencyTTL < 0 {
		errs = append(errs, errors.New("runtime: IdempotencyTTL must not be negative"))
	}
	if o.OpenTimeout < 0 {
		errs = append(errs, errors.New("runtime: OpenTimeout must not be negative"))
	}
	// The store's own checks, of the values it gets from these fields.
	if err := (&txn.Options{Node: o.Node}).Validate(); err != nil {
		errs = append(errs, &OptionError{Field: "Node", Err: err})
	}
	if err := (&txn.Options{Lease: o.Lease}).Validate(); err != nil {
		errs = append(errs, &OptionError{Field: "Lease", Err: err})
	}
	return errors.Join(errs...)
}
