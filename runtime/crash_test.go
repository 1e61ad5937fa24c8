package runtime_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/internal/testdb"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
	"github.com/toolgate/toolgate/txn"
)

// Crash safety (SIGKILL). TestCrashSafety re-executes the test binary as a
// child (TestCrashChild) that runs concurrent invocations on a database with
// durable commits and reports on stdout, kills it with SIGKILL at random
// moments, many times over the same file, and checks after every tenth
// round and at the end that the file is consistent and that every commit is
// all or nothing.
//
// Child protocol, one line per write(2) (so a line is never torn, and every
// line written before the kill is still read by the parent from the pipe):
//
//	OPEN                           about to open the runtime (recovery runs in Open)
//	READY                          the runtime is open
//	START <id>                     about to Execute input {"msg":"<id>"}
//	ACK <executionId> <id> <state> Execute returned for <id>
//
// Every <id> is "<round>-<worker>-<n>", unique over the whole test, and each
// is executed once (the tool is not idempotent, so never retried): one input,
// at most one attempt, one record. The first crashLookers workers run the
// read-only tool crash.look instead, with ids ending in "-ro": such a call
// stores no claim, so a kill while it runs must leave no trace of it, and
// one that ended must be COMPLETED, never recovered as interrupted.

const (
	crashEnvDB     = "TOOLGATE_CRASH_CHILD" // the database path; set only in the child
	crashEnvRound  = "TOOLGATE_CRASH_ROUND"
	crashEnvSeed   = "TOOLGATE_CRASH_SEED" // optional: replay a run's kill timings
	crashToolID    = "crash.pair"
	crashLookID    = "crash.look" // read-only: reads a/<id>
	crashLookers   = 2            // workers calling crash.look
	crashPrincipal = "crasher"
	crashWorkers   = 8
	crashRounds    = 60               // every round ends in one SIGKILL
	crashEarlyKill = 6                // every 6th round kills while the child opens (and recovers)
	crashVerify    = 10               // verify (and run recovery in the parent) every 10 rounds
	crashLifetime  = 30 * time.Second // a child nobody kills stops by itself
	crashWaitChild = 30 * time.Second // how long the parent waits for a child's OPEN or first ACK
)

// crashCounts reports whether invocation id also increments the shared
// counter c/n (every 4th of a worker's invocations), a read-modify-write
// that makes concurrent attempts conflict.
func crashCounts(id string) bool {
	n, err := strconv.Atoi(id[strings.LastIndexByte(id, '-')+1:])
	return err == nil && n%4 == 0
}

func crashInput(id string) json.RawMessage {
	b, _ := json.Marshal(msg{Msg: id})
	return b
}

// crashInputHash is the InputHash the runtime records for id's input.
func crashInputHash(tb testing.TB, id string) string {
	h, err := audit.Hash(crashInput(id))
	if err != nil {
		tb.Fatalf("audit.Hash(%s): %v", crashInput(id), err)
	}
	return h
}

// crashOptions returns the options of the child's runtime (and of the
// parent's recovery runs): the tool crash.pair, which writes a/<id> and
// b/<id> (and, for crashCounts ids, increments c/n) in its transaction.
func crashOptions() (*tgruntime.Options, error) {
	d := decl(crashToolID, func(d *tools.Declaration) {
		d.RequiredCapabilities = []capability.Capability{
			capability.MustParse("state.write:a"), capability.MustParse("state.write:b"), capability.MustParse("state.write:c"),
		}
	})
	pair := tool(d, func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
		if err := env.State.Put("a", in.Msg, []byte(in.Msg)); err != nil {
			return msg{}, err
		}
		if crashCounts(in.Msg) {
			v, found, err := env.State.Get("c", "n")
			if err != nil {
				return msg{}, err
			}
			n := 0
			if found {
				if n, err = strconv.Atoi(string(v)); err != nil {
					return msg{}, fmt.Errorf("counter c/n holds %q: %w", v, err)
				}
			}
			if err := env.State.Put("c", "n", []byte(strconv.Itoa(n+1))); err != nil {
				return msg{}, err
			}
		}
		if err := env.State.Put("b", in.Msg, []byte(in.Msg)); err != nil {
			return msg{}, err
		}
		return in, nil
	})
	look := tool(decl(crashLookID, func(d *tools.Declaration) {
		d.RequiredCapabilities = []capability.Capability{capability.MustParse("state.read:a")}
	}), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
		if _, _, err := env.State.Get("a", in.Msg); err != nil {
			return msg{}, err
		}
		time.Sleep(time.Millisecond) // so that kills find some of these running
		return in, nil
	})
	reg := tools.NewRegistry()
	for _, tl := range []tools.Tool{pair, look} {
		if err := reg.Register(tl); err != nil {
			return nil, err
		}
	}
	return &tgruntime.Options{
		Registry: reg,
		Grants: map[string][]capability.Capability{crashPrincipal: {
			capability.MustParse("state.write:a"), capability.MustParse("state.write:b"), capability.MustParse("state.write:c"),
			capability.MustParse("state.read:a"),
		}},
		OpenTimeout: 10 * time.Second,
		NoSync:      false, // durable: COMPLETED only once fsynced
	}, nil
}

// TestCrashChild is the child half of TestCrashSafety: it does nothing
// unless TestCrashSafety started it with TOOLGATE_CRASH_CHILD set. It runs
// until it is killed (or crashLifetime passes, which the parent reports as a
// failure).
func TestCrashChild(t *testing.T) {
	path := os.Getenv(crashEnvDB)
	if path == "" {
		return // not a child: TestCrashSafety runs this test in a subprocess
	}
	fail := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "crash child: "+format+"\n", args...)
		os.Exit(2)
	}
	round := os.Getenv(crashEnvRound)
	var mu sync.Mutex
	w := bufio.NewWriter(os.Stdout)
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(w, format+"\n", args...)
		if err := w.Flush(); err != nil {
			fail("stdout: %v", err) // the parent is gone
		}
	}

	opts, err := crashOptions()
	if err != nil {
		fail("options: %v", err)
	}
	say("OPEN")
	rt, err := tgruntime.Open(path, opts)
	if err != nil {
		fail("Open: %v", err)
	}
	say("READY")
	deadline := time.Now().Add(crashLifetime)
	var wg sync.WaitGroup
	for g := range crashWorkers {
		wg.Go(func() {
			for n := 0; time.Now().Before(deadline); n++ {
				id, tool := fmt.Sprintf("%s-%d-%d", round, g, n), crashToolID
				if g < crashLookers {
					id, tool = id+"-ro", crashLookID
				}
				say("START %s", id)
				res, err := rt.Execute(context.Background(), tgruntime.Invocation{
					Tool: tool, Principal: crashPrincipal, Input: crashInput(id),
				})
				if res == nil {
					fail("Execute(%s): no result: %v", id, err)
				}
				say("ACK %s %s %s", res.ExecutionID, id, res.State)
			}
		})
	}
	wg.Wait()
	rt.Close(context.Background())
}

// crashAck is one ACK line: Execute had returned when it was written.
type crashAck struct {
	round             int
	execID, id, state string
}

// crashHarness is the parent's view across rounds.
type crashHarness struct {
	t    *testing.T
	path string
	rng  *rand.Rand

	live *exec.Cmd // the running child, killed by a cleanup if the test fails

	inputs map[string]string // InputHash -> id, for every START of every round
	acks   []crashAck

	kills, earlyKills, killsBeforeReady, inFlightAtKill int
	preRecoveryClaims                                   int // EXECUTING records found on disk by the parent's verifications
	lookStarted, lookRecorded                           int // crash.look calls started, and those with a record
}

func TestCrashSafety(t *testing.T) {
	if os.Getenv(crashEnvDB) != "" {
		return // inside a child: only TestCrashChild runs there
	}
	testdb.BboltOnly(t, whyKill)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(crashEnvSeed); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("%s=%q: %v", crashEnvSeed, s, err)
		}
	}
	t.Logf("kill timings from seed %d (replay with %s=%d)", seed, crashEnvSeed, seed)
	h := &crashHarness{
		t:      t,
		path:   testdb.Path(t, "crash.db"),
		rng:    rand.New(rand.NewPCG(seed, 0x746f6f6c67617465)),
		inputs: make(map[string]string),
	}
	t.Cleanup(func() {
		if c := h.live; c != nil {
			c.Process.Kill()
			c.Wait()
		}
	})
	for round := 1; round <= crashRounds; round++ {
		h.round(round, round%crashEarlyKill == 0)
		if round%crashVerify == 0 || round == crashRounds {
			h.verify(round)
		}
	}
	t.Logf("%d kills (%d aimed at open/recovery, %d of them before the child was ready), %d ACKs, %d invocations in flight at the kills",
		h.kills, h.earlyKills, h.killsBeforeReady, len(h.acks), h.inFlightAtKill)
}

// round starts a child, kills it with SIGKILL at a random moment (shortly
// after its first ACK, or, if early, right after it starts opening the
// database), and collects what it printed.
func (h *crashHarness) round(round int, early bool) {
	t := h.t
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1", "-test.timeout=2m")
	cmd.Env = append(os.Environ(), crashEnvDB+"="+h.path, crashEnvRound+"="+strconv.Itoa(round))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("round %d: starting the child: %v", round, err)
	}
	h.live = cmd

	var lines []string // owned by the reader until readDone is closed
	opened, acked, readDone := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(readDone)
		sawOpen, sawAck := false, false
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			lines = append(lines, line)
			switch {
			case line == "OPEN" && !sawOpen:
				sawOpen = true
				close(opened)
			case strings.HasPrefix(line, "ACK ") && !sawAck:
				sawAck = true
				close(acked)
			}
		}
	}()

	trigger, delay := acked, time.Duration(5+h.rng.IntN(56))*time.Millisecond // 5 to 60 ms after the first ACK
	if early {
		trigger, delay = opened, time.Duration(h.rng.IntN(3000))*time.Microsecond // 0 to 3 ms into Open
	}
	select {
	case <-trigger:
		time.Sleep(delay)
	case <-readDone: // the child closed stdout: it has died; reported below
	case <-time.After(crashWaitChild):
		t.Errorf("round %d: no %s from the child after %v", round, map[bool]string{true: "OPEN", false: "ACK"}[early], crashWaitChild)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Errorf("round %d: kill: %v", round, err)
	}
	<-readDone
	cmd.Wait()
	h.live = nil
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("round %d: the child ended on its own (%v), not by our SIGKILL\nstderr:\n%s\nlast stdout lines:\n%s",
			round, cmd.ProcessState, stderr.String(), strings.Join(lines[max(0, len(lines)-10):], "\n"))
	}
	if strings.Contains(stderr.String(), "DATA RACE") || strings.Contains(stderr.String(), "panic") {
		t.Fatalf("round %d: the child reported:\n%s", round, stderr.String())
	}
	h.kills++
	if early {
		h.earlyKills++
		if !slices.Contains(lines, "READY") {
			h.killsBeforeReady++
		}
	}

	pending := make(map[string]bool)
	for _, line := range lines {
		f := strings.Fields(line)
		switch {
		case len(f) == 2 && f[0] == "START":
			hash := crashInputHash(t, f[1])
			if prev, dup := h.inputs[hash]; dup {
				t.Fatalf("round %d: input of %s started twice (first as %s)", round, f[1], prev)
			}
			h.inputs[hash] = f[1]
			pending[f[1]] = true
		case len(f) == 4 && f[0] == "ACK":
			if !pending[f[2]] {
				t.Fatalf("round %d: ACK without START: %q", round, line)
			}
			delete(pending, f[2])
			h.acks = append(h.acks, crashAck{round: round, execID: f[1], id: f[2], state: f[3]})
		case len(f) > 0 && (f[0] == "START" || f[0] == "ACK"):
			t.Fatalf("round %d: malformed line from the child: %q", round, line)
		}
	}
	h.inFlightAtKill += len(pending)
}

// verify checks the database as the last kill left it, runs recovery (by
// opening a runtime, as an embedding application would), and checks the
// result. round is the last round run, for the reports.
//
// How records are tied to state: every record's InputHash must be the hash
// of exactly one START id (inputs are unique, and each started at most one
// attempt), so each record names the id whose keys a/<id> and b/<id> its
// write-set holds. Then, for every record: COMPLETED implies both keys hold
// <id>; any other state implies neither exists. And every key in a or b
// must belong to a COMPLETED record, so nothing was written by an attempt
// that has no COMPLETED record (no half-applied, orphaned or lost
// write-set). The counter c/n must equal the number of COMPLETED counting
// attempts: no lost and no doubled increment.
func (h *crashHarness) verify(round int) {
	t := h.t
	ctx := context.Background()

	// 1. bbolt's own consistency check, on the file exactly as the kill
	// left it.
	h.boltCheck(round, "after the kill, before recovery")

	ro, err := txn.Open(h.path, &txn.Options{ReadOnly: true, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatalf("round %d: txn.Open (read-only, before recovery): %v", round, err)
	}
	claims, err := ro.List(ctx, txn.Filter{State: "EXECUTING"})
	ro.Close()
	if err != nil {
		t.Fatalf("round %d: List before recovery: %v", round, err)
	}
	h.preRecoveryClaims += len(claims)
	for _, c := range claims {
		if c.ToolID == crashLookID {
			t.Errorf("round %d: the read-only call %s left a claim: %s is EXECUTING on disk", round, h.inputs[c.InputHash], c.ExecutionID)
		}
	}

	// 2. Recovery.
	opts, err := crashOptions()
	if err != nil {
		t.Fatal(err)
	}
	rt, err := tgruntime.Open(h.path, opts)
	if err != nil {
		t.Fatalf("round %d: runtime Open (recovery): %v", round, err)
	}
	if err := rt.Close(ctx); err != nil {
		t.Fatalf("round %d: runtime Close: %v", round, err)
	}
	h.boltCheck(round, "after recovery")

	store, err := txn.Open(h.path, &txn.Options{ReadOnly: true, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatalf("round %d: txn.Open after recovery: %v", round, err)
	}
	defer store.Close()
	recs, err := store.List(ctx, txn.Filter{})
	if err != nil {
		t.Fatalf("round %d: List: %v", round, err)
	}
	// Every record, recovered ones included, is proven by the audit log.
	nd := 0
	if _, err := tgruntime.NewReader(store).VerifyRecords(ctx, func(d tgruntime.Discrepancy) error {
		if nd++; nd <= 5 {
			t.Errorf("round %d: %s", round, d)
		}
		return nil
	}); err != nil {
		t.Fatalf("round %d: VerifyRecords: %v", round, err)
	}
	ns := make(map[string]map[string][]byte)
	for _, n := range []string{"a", "b", "c"} {
		if ns[n], err = store.StateValues(ctx, n); err != nil {
			t.Fatalf("round %d: StateValues(%s): %v", round, n, err)
		}
	}
	a, b := ns["a"], ns["b"]

	byExec := make(map[string]*txn.Record, len(recs))
	idOf := make(map[string]string, len(recs)) // execution id -> START id
	completed := make(map[string]bool)         // START ids with a COMPLETED record
	attemptOf := make(map[string]string)       // START id -> execution id
	var recovered, conflicts, counted int
	for _, rec := range recs {
		byExec[rec.ExecutionID] = rec
		id, ok := h.inputs[rec.InputHash]
		if !ok {
			t.Errorf("round %d: record %s (%s) has an input hash %s no child started", round, rec.ExecutionID, rec.State, rec.InputHash)
			continue
		}
		if prev, dup := attemptOf[id]; dup {
			t.Errorf("round %d: input %s has two records, %s and %s", round, id, prev, rec.ExecutionID)
		}
		attemptOf[id], idOf[rec.ExecutionID] = rec.ExecutionID, id
		if strings.HasSuffix(id, "-ro") {
			// Read-only: ended (COMPLETED, with every event) or no trace.
			var out msg
			switch err := json.Unmarshal(rec.Output, &out); {
			case rec.ToolID != crashLookID:
				t.Errorf("round %d: record %s of read-only input %s is of tool %s", round, rec.ExecutionID, id, rec.ToolID)
			case rec.State != "COMPLETED":
				t.Errorf("round %d: read-only call %s ended %s (error %+v): a crash must leave no trace of it", round, id, rec.State, rec.Error)
			case err != nil || out.Msg != id:
				t.Errorf("round %d: read-only call %s has output %s", round, id, rec.Output)
			}
			continue
		}
		va, inA := a[id]
		vb, inB := b[id]
		switch {
		case rec.State == "EXECUTING":
			t.Errorf("round %d: record %s (input %s) is still EXECUTING after recovery", round, rec.ExecutionID, id)
		case rec.State == "COMPLETED":
			completed[id] = true
			if !inA || !inB || string(va) != id || string(vb) != id {
				t.Errorf("round %d: COMPLETED record %s (input %s): a/%s=%q (present %v), b/%s=%q (present %v); want both %q",
					round, rec.ExecutionID, id, id, va, inA, id, vb, inB, id)
			}
			var out msg
			if err := json.Unmarshal(rec.Output, &out); err != nil || out.Msg != id {
				t.Errorf("round %d: COMPLETED record %s (input %s) has output %s", round, rec.ExecutionID, id, rec.Output)
			}
			if rec.WriteSet == nil || !rec.WriteSet.Committed {
				t.Errorf("round %d: COMPLETED record %s (input %s) has write-set %+v", round, rec.ExecutionID, id, rec.WriteSet)
			}
			if crashCounts(id) {
				counted++
			}
		default:
			if inA || inB {
				t.Errorf("round %d: %s record %s (input %s, error %+v) left state behind: a/%s present %v, b/%s present %v",
					round, rec.State, rec.ExecutionID, id, rec.Error, id, inA, id, inB)
			}
			switch {
			case rec.Error != nil && rec.Error.Code == "interrupted":
				recovered++
				p := statePath(rec)
				if rec.State != "ROLLED_BACK" || len(p) < 3 || !slices.Equal(p[len(p)-3:], []string{"EXECUTING", "ABORTED", "ROLLED_BACK"}) {
					t.Errorf("round %d: recovered record %s (input %s) is %s with path %v", round, rec.ExecutionID, id, rec.State, p)
				}
			case rec.State == "ROLLED_BACK" && rec.Error != nil && rec.Error.Type == "StateError" && strings.Contains(rec.Error.Message, tgruntime.Message(txn.ErrConflict)):
				conflicts++
			default:
				t.Errorf("round %d: record %s (input %s) ended %s with unexpected error %+v", round, rec.ExecutionID, id, rec.State, rec.Error)
			}
		}
	}

	// No state without a COMPLETED record behind it.
	for name, m := range map[string]map[string][]byte{"a": a, "b": b} {
		for k, v := range m {
			if !completed[k] {
				t.Errorf("round %d: %s/%s=%q exists but input %s has no COMPLETED record (record %q)", round, name, k, v, k, attemptOf[k])
			}
		}
	}
	n := 0
	if v, ok := ns["c"]["n"]; ok {
		if n, err = strconv.Atoi(string(v)); err != nil {
			t.Errorf("round %d: counter c/n holds %q", round, v)
		}
	}
	if n != counted {
		t.Errorf("round %d: counter c/n = %d, but %d COMPLETED attempts incremented it", round, n, counted)
	}

	// 3. Every acknowledged attempt is durable, in the state acknowledged.
	ackCompleted := 0
	for _, ack := range h.acks {
		rec := byExec[ack.execID]
		switch {
		case rec == nil:
			t.Errorf("round %d: ACK of round %d for %s (%s, %s) has no record", round, ack.round, ack.id, ack.execID, ack.state)
		case idOf[ack.execID] != ack.id:
			t.Errorf("round %d: ACK of round %d: record %s is for input %q, not %s", round, ack.round, ack.execID, idOf[ack.execID], ack.id)
		case rec.State != ack.state:
			t.Errorf("round %d: ACK of round %d for %s (%s) said %s; the record says %s (error %+v)",
				round, ack.round, ack.id, ack.execID, ack.state, rec.State, rec.Error)
		case ack.state == "COMPLETED":
			ackCompleted++ // its state was checked with the records above
		}
	}
	h.lookStarted, h.lookRecorded = 0, 0
	for _, id := range h.inputs {
		if strings.HasSuffix(id, "-ro") {
			h.lookStarted++
			if attemptOf[id] != "" {
				h.lookRecorded++
			}
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("after round %2d: %d read-only calls started, %d recorded, %d left no trace", round, h.lookStarted, h.lookRecorded, h.lookStarted-h.lookRecorded)
	t.Logf("after round %2d: %d records (%d COMPLETED, %d recovered as interrupted, %d conflicts), %d ACKs (%d COMPLETED), %d claims found on disk by the parent, counter %d",
		round, len(recs), len(completed), recovered, conflicts, len(h.acks), ackCompleted, h.preRecoveryClaims, n)
}

// boltCheck opens the file with bbolt alone, read-only, and runs its
// consistency check.
func (h *crashHarness) boltCheck(round int, when string) {
	t := h.t
	db, err := bolt.Open(h.path, 0o600, &bolt.Options{ReadOnly: true, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatalf("round %d: bolt.Open %s: %v", round, when, err)
	}
	defer db.Close()
	var problems []error
	err = db.View(func(tx *bolt.Tx) error {
		for err := range tx.Check() {
			problems = append(problems, err)
		}
		if when == "after recovery" {
			if c := tx.Bucket([]byte("executing")); c != nil && c.Stats().KeyN != 0 {
				problems = append(problems, fmt.Errorf("the executing index still holds %d claims", c.Stats().KeyN))
			}
		}
		return nil
	})
	if err != nil {
		problems = append(problems, err)
	}
	if len(problems) > 0 {
		t.Fatalf("round %d: bbolt check %s: %d problems: %v", round, when, len(problems), problems)
	}
}
