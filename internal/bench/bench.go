// Package bench measures what toolgate's lifecycle costs over the storage it
// cannot avoid. It is the engine of `toolgate bench`.
//
// Run measures, in one process and against fresh temporary files:
//
//   - the disk's fsync latency: 4 KiB overwritten and fsynced, repeatedly;
//   - the floor: bare bbolt updates writing the records the runtime writes
//     per invocation (the EXECUTING claim, then the terminal record), one
//     bbolt update per commit the runtime does, each run by its caller
//     (no batching), with the bolt options package txn uses: the claim
//     (record and audit events), then the final record, the claim removed
//     and the last audit event. The sizes of the records and audit groups
//     and the form of the keys are taken from one invocation run through
//     the runtime first, so the floor writes what the runtime writes;
//   - the runtime: a no-op tool with a small typed schema run through the
//     whole Runtime.Execute path (validation, authorization, slot, claim,
//     tool, output validation, commit). It declares state.write, so its
//     calls are claimed before they run, as every call that must not
//     repeat after a crash is;
//   - the read-only runtime: the same through a tool that declares only
//     state.read, whose calls store no claim: one durable write per call.
//
// The floor and the runtimes each run twice, with one caller and with
// Options.Callers concurrent callers, for Options.Duration each. Latencies
// are per operation: the two bbolt updates for the floor, one Execute call
// for the runtime.
package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/lifecycle"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
	"github.com/toolgate/toolgate/txn"
)

// Options configure Run.
type Options struct {
	// Callers is the number of concurrent callers of the second run of each
	// phase; it must be at least 1.
	Callers int

	// Duration is how long each of the four measured phases runs; it must
	// be positive.
	Duration time.Duration

	// Sync makes every bbolt commit fsync, as a production runtime does.
	// False sets NoSync for both the floor and the runtime.
	Sync bool

	// Dir is where the temporary directory holding the databases is made;
	// "" means os.TempDir(). The directory is removed when Run returns.
	Dir string

	// ProfileDir, if not "", receives a CPU profile of each measured phase,
	// for go tool pprof: floor-w1.pprof, floor-wN.pprof, runtime-w1.pprof,
	// runtime-wN.pprof, read-only-w1.pprof and read-only-wN.pprof. It is created if need
	// be. The profiler is the process's: Run fails if one is running.
	ProfileDir string

	// DB, if a postgres:// URL, measures against that Postgres server
	// instead of bbolt files: each phase in a scratch schema of its own,
	// dropped at the end (see pg.go); the floor is then bare pgx
	// transactions. "" measures bbolt.
	DB string

	// Progress, if not nil, receives a one-line description of what is
	// being measured, a few times a second. It is called from the goroutine
	// that called Run, never concurrently.
	Progress func(string)
}

// Report is the result of Run. Latencies are in microseconds.
type Report struct {
	Callers   int     `json:"callers"`
	Sync      bool    `json:"sync"`
	DurationS float64 `json:"duration_s"` // per measured phase
	Dir       string  `json:"dir"`        // where the temporary files were

	// Backend is "bbolt" or "postgres"; ServerVersion is Postgres's
	// server_version.
	Backend       string `json:"backend"`
	ServerVersion string `json:"server_version,omitempty"`

	FsyncP50us float64 `json:"fsync_p50_us"`
	FsyncP99us float64 `json:"fsync_p99_us"`
	FsyncCount int     `json:"fsync_count"`

	// The sizes of the records written per operation: the EXECUTING claim
	// and the terminal record, as the runtime stores them for the no-op tool.
	ClaimBytes int `json:"claim_record_bytes"`
	FinalBytes int `json:"final_record_bytes"`
	// The audit log values written with the claim and with the commit (the
	// events of their transitions), which the floor writes too.
	ClaimAuditBytes  int `json:"claim_audit_bytes"`
	CommitAuditBytes int `json:"commit_audit_bytes"`

	// The form of the record keys the floor reproduces: "uuid4" (random) or
	// "uuid7" (time-ordered).
	RecordKeys string `json:"record_keys"`

	Floor   Pair `json:"floor"`
	Runtime Pair `json:"runtime"`
	// ReadOnly is the runtime calling a read-only tool (no claim).
	ReadOnly Pair   `json:"read_only"`
	Ratios   Ratios `json:"ratios"`

	// Profiles are the CPU profiles written (Options.ProfileDir), by phase.
	Profiles []string `json:"profiles,omitempty"`
}

// Pair holds one kind of measurement with one caller and with many.
type Pair struct {
	W1 Phase `json:"w1"`
	WN Phase `json:"wN"`
}

// Phase is one measured phase.
type Phase struct {
	Callers  int     `json:"callers"`
	Ops      int     `json:"ops"`
	ElapsedS float64 `json:"elapsed_s"`
	OpsPerS  float64 `json:"ops_per_s"`
	P50us    float64 `json:"p50_us"`
	P99us    float64 `json:"p99_us"`
	// SyncsPerOp is how many times the phase made its writes durable per
	// operation: counted by the store (its fsyncs), for the runtime; for
	// the floor, bbolt's two per update (its pages, then its meta page).
	// Zero with sync off, and on Postgres (the server syncs).
	SyncsPerOp float64 `json:"syncs_per_op"`
}

// Ratios compare throughputs (operations per second).
type Ratios struct {
	RuntimeW1OverFloorW1 float64 `json:"runtime_w1_over_floor_w1"`
	RuntimeWNOverFloorW1 float64 `json:"runtime_wN_over_floor_w1"`
	RuntimeWNOverFloorWN float64 `json:"runtime_wN_over_floor_wN"`
}

// ErrInterrupted is returned (wrapped, with the context's cause) when the
// context of Run ends before the bench does.
var ErrInterrupted = errors.New("bench interrupted")

// Validate reports options Run cannot use.
func (o *Options) Validate() error {
	var errs []error
	if o.Callers < 1 {
		errs = append(errs, fmt.Errorf("callers must be at least 1, not %d", o.Callers))
	}
	if o.Duration <= 0 {
		errs = append(errs, fmt.Errorf("duration must be positive, not %v", o.Duration))
	}
	return errors.Join(errs...)
}

// Run runs the bench. It stops early, returning an error wrapping
// ErrInterrupted, when ctx ends; any failed operation also ends it with an
// error. It removes every file it made before returning.
func Run(ctx context.Context, opts Options) (*Report, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.ProfileDir != "" {
		if err := os.MkdirAll(opts.ProfileDir, 0o755); err != nil {
			return nil, fmt.Errorf("bench: profile directory: %w", err)
		}
	}
	dir, err := os.MkdirTemp(opts.Dir, "toolgate-bench-")
	if err != nil {
		return nil, fmt.Errorf("bench: temporary directory: %w", err)
	}
	defer os.RemoveAll(dir)
	b := &bencher{opts: opts, dir: dir, ctx: ctx}
	rep := &Report{Callers: opts.Callers, Sync: opts.Sync, DurationS: opts.Duration.Seconds(), Dir: dir, Backend: "bbolt"}
	floor := b.floor
	if opts.DB != "" {
		if !txn.IsPostgresURL(opts.DB) {
			return nil, fmt.Errorf("bench: --db %s: the bench measures bbolt in temporary files, or a postgres:// URL", opts.DB)
		}
		pg, err := newPGBench(ctx, opts.DB)
		if err != nil {
			return nil, b.fail(err)
		}
		defer pg.cleanup()
		b.pg, floor = pg, b.pgFloor
		rep.Backend, rep.ServerVersion = "postgres", pg.version
	} else {
		b.progress("bench: measuring fsync latency")
		fsyncs, err := measureFsync(ctx, filepath.Join(dir, "fsync.tmp"))
		if err != nil {
			return nil, b.fail(err)
		}
		rep.FsyncCount = len(fsyncs)
		rep.FsyncP50us, rep.FsyncP99us = micros(percentile(fsyncs, 50)), micros(percentile(fsyncs, 99))
	}

	b.progress("bench: measuring the runtime's record size")
	claim, final, lay, err := b.records()
	if err != nil {
		return nil, b.fail(err)
	}
	rep.ClaimBytes, rep.FinalBytes = len(claim), len(final)
	rep.ClaimAuditBytes, rep.CommitAuditBytes = len(lay.claimAudit), len(lay.commitAudit)
	rep.RecordKeys = "uuid4"
	if lay.ordered {
		rep.RecordKeys = "uuid7"
	}

	phases := []struct {
		name, key string
		callers   int
		into      *Phase
		run       func(name string, callers int) (Phase, error)
	}{
		{"floor", "w1", 1, &rep.Floor.W1, func(n string, c int) (Phase, error) { return floor(n, c, lay, claim, final) }},
		{"floor", "wN", opts.Callers, &rep.Floor.WN, func(n string, c int) (Phase, error) { return floor(n, c, lay, claim, final) }},
		{"runtime", "w1", 1, &rep.Runtime.W1, b.runtime(noopID)},
		{"runtime", "wN", opts.Callers, &rep.Runtime.WN, b.runtime(noopID)},
		{"read-only", "w1", 1, &rep.ReadOnly.W1, b.runtime(lookID)},
		{"read-only", "wN", opts.Callers, &rep.ReadOnly.WN, b.runtime(lookID)},
	}
	for i, p := range phases {
		b.phase = fmt.Sprintf("bench %d/%d: %s, %d caller%s", i+1, len(phases), p.name, p.callers, plural(p.callers))
		b.profile = ""
		if opts.ProfileDir != "" {
			b.profile = filepath.Join(opts.ProfileDir, p.name+"-"+p.key+".pprof")
		}
		ph, err := p.run(fmt.Sprintf("%s-%d", p.name, i), p.callers)
		if err != nil {
			return nil, b.fail(err)
		}
		*p.into = ph
		if b.profile != "" {
			rep.Profiles = append(rep.Profiles, b.profile)
		}
	}
	rep.Ratios = Ratios{
		RuntimeW1OverFloorW1: ratio(rep.Runtime.W1.OpsPerS, rep.Floor.W1.OpsPerS),
		RuntimeWNOverFloorW1: ratio(rep.Runtime.WN.OpsPerS, rep.Floor.W1.OpsPerS),
		RuntimeWNOverFloorWN: ratio(rep.Runtime.WN.OpsPerS, rep.Floor.WN.OpsPerS),
	}
	return rep, nil
}

type bencher struct {
	opts     Options
	dir      string
	ctx      context.Context
	pg       *pgBench // nil: bbolt
	probeURL string   // the probe's database, on Postgres
	phase    string   // the progress prefix of the phase running
	profile  string   // where the phase running writes its CPU profile; "" for none
}

func (b *bencher) progress(msg string) {
	if b.opts.Progress != nil {
		b.opts.Progress(msg)
	}
}

// fail turns an error into ErrInterrupted when the context has ended, since
// the error is then most likely the interruption itself.
func (b *bencher) fail(err error) error {
	if b.ctx.Err() != nil {
		return fmt.Errorf("%w: %v", ErrInterrupted, context.Cause(b.ctx))
	}
	return err
}

// measureFsync overwrites the first 4 KiB of a file and fsyncs it, 200 times
// or for one second, whichever ends first, and returns the fsync latencies.
func measureFsync(ctx context.Context, path string) ([]time.Duration, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("bench: fsync probe: %w", err)
	}
	defer os.Remove(path)
	defer f.Close()
	buf := make([]byte, 4096)
	// Allocate the block first, so the measured syncs flush data, not the
	// growth of the file.
	if _, err := f.WriteAt(buf, 0); err != nil {
		return nil, fmt.Errorf("bench: fsync probe: %w", err)
	}
	if err := f.Sync(); err != nil {
		return nil, fmt.Errorf("bench: fsync probe: %w", err)
	}
	var lat []time.Duration
	start := time.Now()
	for i := 0; i < 200 && time.Since(start) < time.Second; i++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		buf[0] = byte(i)
		if _, err := f.WriteAt(buf, 0); err != nil {
			return nil, fmt.Errorf("bench: fsync probe: %w", err)
		}
		t := time.Now()
		if err := f.Sync(); err != nil {
			return nil, fmt.Errorf("bench: fsync probe: %w", err)
		}
		lat = append(lat, time.Since(t))
	}
	return lat, nil
}

// The no-op tools the runtime phases run: noop declares state.write (so
// its calls are claimed), look state.read (so they are not).
const (
	lookID      = "bench.look"
	noopID      = "bench.noop"
	noopVersion = "1.0.0"
	noopInput   = `{"n":1}`
)

type noopIO struct {
	N int `json:"n"`
}

func noopSchema(what string) json.RawMessage {
	return json.RawMessage(`{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "properties": {"n": {"type": "integer", "description": "` + what + `"}},
  "required": ["n"],
  "additionalProperties": false
}`)
}

// benchGrants are what the bench's principal holds: what the two tools
// declare.
var benchGrants = map[string][]capability.Capability{"bench": {
	capability.MustParse("state.write:bench"), capability.MustParse("state.read:bench"),
}}

func noopRegistry() (*tools.Registry, error) {
	reg := tools.NewRegistry()
	for _, t := range []struct{ id, name, capability string }{
		{noopID, "Bench no-op", "state.write:bench"},
		{lookID, "Bench read-only no-op", "state.read:bench"},
	} {
		err := reg.Register(tools.NewTyped(tools.Declaration{
			ID:                   t.id,
			Version:              noopVersion,
			Name:                 t.name,
			Description:          "Returns its input; does nothing else. Used by toolgate bench.",
			InputSchema:          noopSchema("any integer; returned as is"),
			OutputSchema:         noopSchema("the input's n"),
			RequiredCapabilities: []capability.Capability{capability.MustParse(t.capability)},
			ResourceLimits:       tools.ResourceLimits{MaxExecutionTime: 5 * time.Second},
			Deterministic:        true,
			Idempotent:           true,
		}, func(_ context.Context, _ *tools.Env, in noopIO) (noopIO, error) { return in, nil }))
		if err != nil {
			return nil, fmt.Errorf("bench: registering %s: %w", t.id, err)
		}
	}
	return reg, nil
}

// openRuntime opens a runtime for the no-op tool on a fresh database.
func (b *bencher) openRuntime(name string, callers int) (*tgruntime.Runtime, *txn.Store, error) {
	reg, err := noopRegistry()
	if err != nil {
		return nil, nil, err
	}
	path := filepath.Join(b.dir, name+".db")
	if b.pg != nil {
		if path, err = b.pg.schema(b.ctx, name); err != nil {
			return nil, nil, err
		}
	}
	store, err := txn.Open(path, &txn.Options{NoSync: !b.opts.Sync})
	if err != nil {
		return nil, nil, fmt.Errorf("bench: %w", err)
	}
	rt, err := tgruntime.New(store, &tgruntime.Options{
		Registry:      reg,
		Grants:        benchGrants,
		MaxConcurrent: callers,
		SlotWait:      time.Minute, // a caller never fails for want of a slot
		Retry:         tgruntime.RetryPolicy{MaxRetries: -1},
		WorkDir:       b.dir,
	})
	if err != nil {
		store.Close()
		return nil, nil, fmt.Errorf("bench: %w", err)
	}
	return rt, store, nil
}

func invocation(tool string) tgruntime.Invocation {
	return tgruntime.Invocation{Tool: tool, Version: noopVersion, Input: json.RawMessage(noopInput), Principal: "bench"}
}

// layout is how the runtime stores an execution's record, as far as the
// floor needs to know.
type layout struct {
	ordered bool // execution ids are time-ordered (UUID version 7), not random
	// The audit log values the runtime wrote with the claim and with the
	// commit (one group per bbolt update, under its first sequence number;
	// the probe's claim and commit are separate updates), copied
	// from the probe's database; empty if the runtime keeps no audit bucket.
	claimAudit, commitAudit []byte
}

// records runs one invocation through a runtime and returns the stored
// records the floor writes, the EXECUTING claim and the terminal record, and
// the layout the runtime stored them in.
//
// The terminal record is the stored record, copied from the probe's
// database: the same bytes the runtime wrote. The claim is derived from it
// as the runtime built it before the tool ran (state EXECUTING, the
// transitions up to and including the one into EXECUTING, and no output,
// write-set or end time) and encoded as package txn stores it. Timestamps
// differ from one invocation to the next, so sizes may differ by a few bytes
// from a given invocation's.
func (b *bencher) records() (claim, final []byte, lay layout, err error) {
	rt, store, err := b.openRuntime("probe", 1)
	if err != nil {
		return nil, nil, lay, err
	}
	if b.pg != nil {
		b.probeURL = b.pg.lastURL
	}
	defer store.Close()
	defer rt.Close(context.Background())
	res, err := rt.Execute(b.ctx, invocation(noopID))
	if err != nil {
		return nil, nil, lay, fmt.Errorf("bench: running %s: %w", noopID, err)
	}
	rec, err := rt.Execution(b.ctx, res.ExecutionID)
	if err != nil {
		return nil, nil, lay, fmt.Errorf("bench: reading the record back: %w", err)
	}
	c := *rec
	c.State = string(lifecycle.Executing)
	if i := slices.IndexFunc(c.Transitions, func(t txn.Transition) bool { return t.To == string(lifecycle.Executing) }); i >= 0 {
		c.Transitions = c.Transitions[:i+1]
	}
	c.Output, c.OutputHash, c.WriteSet, c.EndedAt = nil, "", nil, time.Time{}
	if claim, err = txn.EncodeRecord(&c); err != nil {
		return nil, nil, lay, fmt.Errorf("bench: encoding the record: %w", err)
	}
	if err := rt.Close(context.Background()); err != nil {
		return nil, nil, lay, fmt.Errorf("bench: %w", err)
	}
	if err := store.Close(); err != nil {
		return nil, nil, lay, fmt.Errorf("bench: %w", err)
	}

	id := res.ExecutionID
	lay.ordered = len(id) == 36 && id[14] == '7'
	if b.pg != nil {
		final, l, err := b.pgRecords(b.probeURL, id)
		l.ordered = lay.ordered
		return claim, final, l, err
	}
	db, err := bolt.Open(filepath.Join(b.dir, "probe.db"), 0o600, &bolt.Options{Timeout: time.Second, ReadOnly: true})
	if err != nil {
		return nil, nil, lay, fmt.Errorf("bench: reading the probe database: %w", err)
	}
	defer db.Close()
	err = db.View(func(tx *bolt.Tx) error {
		if final = bytes.Clone(tx.Bucket(bucketExecutions).Get([]byte(id))); final == nil {
			return fmt.Errorf("bench: the probe's record is not in the %q bucket; the storage layout changed", bucketExecutions)
		}
		if log := tx.Bucket(bucketAudit); log != nil {
			// The probe ran one invocation: its claim wrote the first group,
			// its commit the second.
			c := log.Cursor()
			k, v := c.First()
			if k != nil && len(k) == 8 {
				lay.claimAudit = bytes.Clone(v)
				if k, v = c.Next(); k != nil && len(k) == 8 {
					lay.commitAudit = bytes.Clone(v)
				}
			}
		}
		return nil
	})
	return claim, final, lay, err
}

// runtime returns the phase that measures Execute of tool by callers
// goroutines.
func (b *bencher) runtime(tool string) func(name string, callers int) (Phase, error) {
	return func(name string, callers int) (Phase, error) { return b.runtimeOf(tool, name, callers) }
}

func (b *bencher) runtimeOf(tool, name string, callers int) (Phase, error) {
	rt, store, err := b.openRuntime(name, callers)
	if err != nil {
		return Phase{}, err
	}
	defer os.Remove(filepath.Join(b.dir, name+".db"))
	defer store.Close()
	defer rt.Close(context.Background())
	inv := invocation(tool)
	syncs, _ := store.Syncs()
	ph, err := b.measure(callers, func() error {
		res, err := rt.Execute(b.ctx, inv)
		if err != nil {
			return fmt.Errorf("bench: %s: %w", tool, err)
		}
		if res.State != lifecycle.Completed {
			return fmt.Errorf("bench: %s ended %s, not COMPLETED", tool, res.State)
		}
		return nil
	})
	if err != nil {
		return Phase{}, err
	}
	if n, ok := store.Syncs(); ok && ph.Ops > 0 {
		ph.SyncsPerOp = float64(n-syncs) / float64(ph.Ops)
	}
	if err := rt.Close(context.Background()); err != nil {
		return Phase{}, fmt.Errorf("bench: %w", err)
	}
	if err := store.Close(); err != nil {
		return Phase{}, fmt.Errorf("bench: %w", err)
	}
	return ph, nil
}

// The buckets the floor writes, named as package txn names them.
var (
	bucketExecutions = []byte("executions")
	bucketExecuting  = []byte("executing")
	bucketAudit      = []byte("audit")
	keyAuditHead     = []byte{0xff}
)

// floor measures bare bbolt doing the runtime's writes for one invocation:
// the claim update and the commit update, each its own db.Update run by the
// calling goroutine.
func (b *bencher) floor(name string, callers int, lay layout, claim, final []byte) (Phase, error) {
	path := filepath.Join(b.dir, name+".db")
	defer os.Remove(path)
	db, err := bolt.Open(path, 0o600, &bolt.Options{
		Timeout: time.Second,
		NoSync:  !b.opts.Sync,
		// As package txn opens its database.
		FreelistType:   bolt.FreelistMapType,
		NoFreelistSync: false,
		NoGrowSync:     !b.opts.Sync,
	})
	if err != nil {
		return Phase{}, fmt.Errorf("bench: floor database: %w", err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		buckets := [][]byte{bucketExecutions, bucketExecuting, bucketAudit}
		for _, name := range buckets {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return Phase{}, fmt.Errorf("bench: floor database: %w", err)
	}
	var ids idGen
	var auditSeq atomic.Uint64
	// appendAudit writes a group of audit entries and the chain head, as
	// txn does in the same update as the record.
	appendAudit := func(tx *bolt.Tx, group []byte) error {
		if len(group) == 0 {
			return nil
		}
		log := tx.Bucket(bucketAudit)
		log.FillPercent = 1.0
		seq := auditSeq.Add(1)
		if err := log.Put(binary.BigEndian.AppendUint64(nil, seq), group); err != nil {
			return err
		}
		return log.Put(keyAuditHead, make([]byte, 40))
	}
	ph, err := b.measure(callers, func() error {
		key := ids.next(lay.ordered)
		// The claim (txn.Store.Begin): the EXECUTING record in the executing
		// bucket and the audit events of the transitions so far.
		err := db.Update(func(tx *bolt.Tx) error {
			if err := tx.Bucket(bucketExecuting).Put(key, claim); err != nil {
				return err
			}
			return appendAudit(tx, lay.claimAudit)
		})
		if err != nil {
			return fmt.Errorf("bench: floor claim: %w", err)
		}
		// The commit (txn.Tx.Commit): the terminal record into the
		// executions bucket, the claim removed, the last audit event. The
		// no-op tool writes no state.
		err = db.Update(func(tx *bolt.Tx) error {
			execs := tx.Bucket(bucketExecutions)
			execs.FillPercent = 0.9 // as txn
			if err := execs.Put(key, final); err != nil {
				return err
			}
			if err := tx.Bucket(bucketExecuting).Delete(key); err != nil {
				return err
			}
			return appendAudit(tx, lay.commitAudit)
		})
		if err != nil {
			return fmt.Errorf("bench: floor commit: %w", err)
		}
		return nil
	})
	if err != nil {
		return Phase{}, err
	}
	if err := db.Close(); err != nil {
		return Phase{}, fmt.Errorf("bench: floor database: %w", err)
	}
	if b.opts.Sync {
		ph.SyncsPerOp = 4 // two updates, each syncing its pages, then its meta page
	}
	return ph, nil
}

// idGen makes execution ids of the form the runtime uses: random UUIDs
// (version 4), or time-ordered ones (version 7: a millisecond timestamp, a
// 12-bit counter, random bits). Its zero value is ready to use.
type idGen struct {
	mu  sync.Mutex
	ms  uint64
	seq uint64
}

func (g *idGen) next(ordered bool) []byte {
	var b [16]byte
	rand.Read(b[:]) // never returns an error
	if ordered {
		g.mu.Lock()
		ms := uint64(time.Now().UnixMilli())
		if ms > g.ms {
			g.ms, g.seq = ms, 0
		} else if g.seq++; g.seq > 0xfff {
			g.ms, g.seq = g.ms+1, 0
		}
		ms, seq := g.ms, g.seq
		g.mu.Unlock()
		b[0], b[1], b[2], b[3], b[4], b[5] = byte(ms>>40), byte(ms>>32), byte(ms>>24), byte(ms>>16), byte(ms>>8), byte(ms)
		b[6], b[7] = 0x70|byte(seq>>8), byte(seq)
	} else {
		b[6] = b[6]&0x0f | 0x40
	}
	b[8] = b[8]&0x3f | 0x80
	s := make([]byte, 36)
	hex.Encode(s[0:8], b[0:4])
	hex.Encode(s[9:13], b[4:6])
	hex.Encode(s[14:18], b[6:8])
	hex.Encode(s[19:23], b[8:10])
	hex.Encode(s[24:], b[10:])
	s[8], s[13], s[18], s[23] = '-', '-', '-', '-'
	return s
}

// measure runs op in a loop on callers goroutines for the phase's duration,
// timing each call. Calls in progress when the time is up finish and count;
// the elapsed time runs until the last one has. The first error stops every
// caller and is returned; so does the end of the context.
func (b *bencher) measure(callers int, op func() error) (Phase, error) {
	var (
		stop    atomic.Bool
		ops     atomic.Int64
		errOnce sync.Once
		opErr   error
		wg      sync.WaitGroup
	)
	lats := make([][]time.Duration, callers)
	stopProfile := func() error { return nil }
	if b.profile != "" {
		stop, err := startProfile(b.profile)
		if err != nil {
			return Phase{}, err
		}
		stopProfile = stop
		defer stop()
	}
	start := time.Now()
	timer := time.AfterFunc(b.opts.Duration, func() { stop.Store(true) })
	defer timer.Stop()
	for i := range callers {
		wg.Go(func() {
			var mine []time.Duration
			for !stop.Load() && b.ctx.Err() == nil {
				t := time.Now()
				if err := op(); err != nil {
					errOnce.Do(func() { opErr = err })
					stop.Store(true)
					break
				}
				mine = append(mine, time.Since(t))
				ops.Add(1)
			}
			lats[i] = mine
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	b.progress(b.phase)
wait:
	for {
		select {
		case <-done:
			break wait
		case <-tick.C:
			el := time.Since(start)
			b.progress(fmt.Sprintf("%s: %v of %v, %d ops", b.phase, min(el, b.opts.Duration).Round(100*time.Millisecond), b.opts.Duration, ops.Load()))
		}
	}
	elapsed := time.Since(start)
	if err := stopProfile(); err != nil {
		return Phase{}, err
	}
	if b.ctx.Err() != nil {
		return Phase{}, b.fail(b.ctx.Err())
	}
	if opErr != nil {
		return Phase{}, opErr
	}
	all := slices.Concat(lats...)
	slices.Sort(all)
	return Phase{
		Callers:  callers,
		Ops:      len(all),
		ElapsedS: elapsed.Seconds(),
		OpsPerS:  float64(len(all)) / elapsed.Seconds(),
		P50us:    micros(percentileSorted(all, 50)),
		P99us:    micros(percentileSorted(all, 99)),
	}, nil
}

// percentile returns the nearest-rank p-th percentile of d, sorting a copy.
func percentile(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return percentileSorted(s, p)
}

// percentileSorted returns the nearest-rank p-th percentile (0 < p <= 100)
// of sorted: the smallest value at least p% of the values are at or below.
// It returns 0 for an empty slice.
func percentileSorted(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// startProfile starts the CPU profiler, writing to path, and returns what
// stops it and closes the file; calling it again does nothing.
func startProfile(path string) (stop func() error, err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("bench: CPU profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("bench: CPU profile: %w", err)
	}
	var (
		once     sync.Once
		closeErr error
	)
	return func() error {
		once.Do(func() {
			pprof.StopCPUProfile()
			if err := f.Close(); err != nil {
				closeErr = fmt.Errorf("bench: CPU profile: %w", err)
			}
		})
		return closeErr
	}, nil
}
