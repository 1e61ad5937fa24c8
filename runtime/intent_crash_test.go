package runtime_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/internal/testdb"
	"github.com/toolgate/toolgate/lifecycle"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
)

// Intents under SIGKILL: a child executes approved intents concurrently
// (and re-executes executed ones) on a durable database; the parent kills
// it at random moments, at least 50 times. The tool appends "<msg>\n" to a
// runs file with fsync before it does anything else, then says "RAN <msg>"
// on its standard output. After recovery: no intent ran its tool twice,
// every intent that ran is marked executed, and an intent a kill
// interrupted is ABORTED then ROLLED_BACK, marked executed, and refuses to
// run again (a human decides what to do about it).
//
// The kills are timed from what the child says, not from the clock alone,
// so that a loaded machine (a child slow to get going) does not make every
// kill land before any tool ran: in a third of the rounds the kill comes at
// random 2 to 42 ms after READY (during the first claims, or before any),
// in a third at random 0 to 20 ms after the first RAN (tools running), and
// in a third the first tool to run holds after it recorded its run (saying
// "HELD <msg>" instead of RAN) until the kill, which comes 0 to 20 ms after
// it: each of these rounds interrupts that intent mid-execution, whatever
// the machine's speed.

const (
	intentCrashEnvDB   = "TOOLGATE_INTENT_CRASH_DB" // set only in the child
	intentCrashEnvRuns = "TOOLGATE_INTENT_CRASH_RUNS"
	intentCrashEnvHold = "TOOLGATE_INTENT_CRASH_HOLD" // set: the child's first tool run holds until the kill
	intentCrashTool    = "crash.intent"
	intentCrashRounds  = 55
	intentCrashCount   = 1200
)

// intentCrashOptions are the options of the runtimes of the test. ran, if
// not nil, is called after the tool recorded its run, with the intent's
// msg.
func intentCrashOptions(runsFile string, noSync bool, ran func(msg string)) *tgruntime.Options {
	d := decl(intentCrashTool, func(d *tools.Declaration) {
		d.RequiredCapabilities = []capability.Capability{capability.MustParse("state.write:test")}
	})
	t := tool(d, func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
		f, err := os.OpenFile(runsFile, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			return msg{}, err
		}
		_, err = f.WriteString(in.Msg + "\n")
		if err == nil {
			err = f.Sync()
		}
		f.Close()
		if err != nil {
			return msg{}, err
		}
		if ran != nil {
			ran(in.Msg)
		}
		time.Sleep(time.Duration(rand.IntN(4000)) * time.Microsecond) // long enough for kills to land mid-execution
		return in, env.State.Put("test", in.Msg, []byte("done"))
	})
	reg := tools.NewRegistry()
	if err := reg.Register(t); err != nil {
		panic(err)
	}
	return &tgruntime.Options{Registry: reg, Grants: grantAll, OpenTimeout: 10 * time.Second, NoSync: noSync, MaxConcurrent: 64}
}

// TestIntentCrashChild is the child: it executes approved intents until
// killed. It does nothing unless TestIntentCrashSafety started it.
func TestIntentCrashChild(t *testing.T) {
	path := os.Getenv(intentCrashEnvDB)
	if path == "" {
		t.Skip("the child of TestIntentCrashSafety; it runs only there")
	}
	var runs atomic.Int64
	hold := os.Getenv(intentCrashEnvHold) != ""
	ran := func(m string) {
		if runs.Add(1) == 1 && hold {
			fmt.Printf("HELD %s\n", m)
			select {} // mid-execution, its run recorded, until the kill
		}
		fmt.Printf("RAN %s\n", m) // one write: lines of concurrent runs do not mix
	}
	rt, err := tgruntime.Open(path, intentCrashOptions(os.Getenv(intentCrashEnvRuns), false, ran))
	if err != nil {
		fmt.Printf("OPEN-FAILED %v\n", err)
		os.Exit(3)
	}
	ctx := context.Background()
	all, err := rt.Intents(ctx, tgruntime.IntentFilter{})
	if err != nil {
		fmt.Printf("LIST-FAILED %v\n", err)
		os.Exit(3)
	}
	var todo []*tgruntime.Intent
	for _, in := range all {
		if in.Status == tgruntime.IntentApproved || rand.IntN(20) == 0 { // and a few executed ones again
			todo = append(todo, in)
		}
	}
	rand.Shuffle(len(todo), func(i, j int) { todo[i], todo[j] = todo[j], todo[i] })
	fmt.Println("READY")
	work := make(chan *tgruntime.Intent)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for in := range work {
				rt.Execute(ctx, tgruntime.Invocation{IntentID: in.ID, IntentHash: in.Hash, Principal: "tester"})
			}
		})
	}
	for _, in := range todo {
		work <- in
	}
	close(work)
	wg.Wait()
	fmt.Println("DONE")
	time.Sleep(time.Minute) // wait for the kill
}

func TestIntentCrashSafety(t *testing.T) {
	if os.Getenv(intentCrashEnvDB) != "" {
		return
	}
	testdb.BboltOnly(t, whyKill)
	dir := t.TempDir()
	path, runsFile := filepath.Join(dir, "intents.db"), filepath.Join(dir, "runs")
	ctx := context.Background()

	// Propose and approve the intents.
	rt, err := tgruntime.Open(path, intentCrashOptions(runsFile, true, nil))
	if err != nil {
		t.Fatal(err)
	}
	hashes := map[string]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < intentCrashCount; i += 8 {
				in, err := rt.Propose(ctx, invoke(intentCrashTool, fmt.Sprintf(`{"msg":"m%04d"}`, i)))
				if err == nil {
					_, err = rt.Approve(ctx, in.ID, "alice")
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				hashes[in.ID] = in.Hash
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if err := rt.Close(ctx); err != nil || t.Failed() {
		t.Fatal(err)
	}

	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 7))
	t.Logf("kill timings from seed %d", seed)
	kills, held := 0, 0
	for round := 1; round <= intentCrashRounds; round++ {
		mode := round % 3 // 0: the first run holds; 1: timed from READY; 2: from the first RAN
		cmd := exec.Command(os.Args[0], "-test.run=^TestIntentCrashChild$", "-test.count=1", "-test.timeout=2m")
		cmd.Env = append(os.Environ(), intentCrashEnvDB+"="+path, intentCrashEnvRuns+"="+runsFile)
		if mode == 0 {
			cmd.Env = append(cmd.Env, intentCrashEnvHold+"=1")
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// What the child says: READY, RAN lines (HELD for a held run), DONE
		// (nothing left to run: it waits for the kill), or a line ending in
		// FAILED. ended is closed when the child closed its standard output:
		// it died (a hung child ends at its own -test.timeout, and says why
		// in the lines kept in other).
		readyCh, ranCh, heldCh, doneCh, ended := make(chan struct{}), make(chan struct{}), make(chan struct{}), make(chan struct{}), make(chan struct{})
		var failure string
		var other []string
		go func() {
			defer close(ended)
			once := map[chan struct{}]bool{}
			said := func(c chan struct{}) {
				if !once[c] {
					once[c] = true
					close(c)
				}
			}
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				switch l := sc.Text(); {
				case l == "READY":
					said(readyCh)
				case strings.HasPrefix(l, "RAN "):
					said(ranCh)
				case strings.HasPrefix(l, "HELD "):
					said(heldCh)
				case l == "DONE":
					said(doneCh)
				case strings.HasSuffix(strings.Fields(l + " x")[0], "FAILED") && failure == "":
					failure = l
				case len(other) < 50:
					other = append(other, l)
				}
			}
		}()
		trigger, delay := (<-chan struct{})(readyCh), time.Duration(2+rng.IntN(40))*time.Millisecond
		switch mode {
		case 0:
			trigger, delay = heldCh, time.Duration(rng.IntN(21))*time.Millisecond
		case 2:
			trigger, delay = ranCh, time.Duration(rng.IntN(21))*time.Millisecond
		}
		wasHeld := false
		select {
		case <-trigger:
			time.Sleep(delay) // a random moment after what the child said
			wasHeld = mode == 0
		case <-doneCh:
		case <-ended:
			cmd.Wait()
			if failure != "" {
				t.Fatalf("round %d: child: %s", round, failure)
			}
			t.Fatalf("round %d: the child ended before it was killed: %v\n%s", round, cmd.ProcessState, strings.Join(other, "\n"))
		}
		cmd.Process.Kill()
		<-ended
		cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			kills++
			if wasHeld {
				held++ // its first run was held: interrupted mid-execution
			}
		}
	}
	if kills < 50 {
		t.Fatalf("only %d SIGKILLs landed", kills)
	}

	// Recovery, then the checks.
	rt, err = tgruntime.Open(path, intentCrashOptions(runsFile, false, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(ctx)
	b, err := os.ReadFile(runsFile)
	if err != nil {
		t.Fatal(err)
	}
	ran := map[string]int{}
	for _, l := range strings.Fields(string(b)) {
		ran[l]++
	}
	intents, err := rt.Intents(ctx, tgruntime.IntentFilter{})
	if err != nil {
		t.Fatal(err)
	}
	executed, interrupted := 0, 0
	for _, in := range intents {
		var m msg
		if err := json.Unmarshal(in.Input, &m); err != nil {
			t.Fatal(err)
		}
		if ran[m.Msg] > 1 {
			t.Errorf("intent %s (%s) ran its tool %d times", in.ID, m.Msg, ran[m.Msg])
		}
		if ran[m.Msg] == 1 && in.Status != tgruntime.IntentExecuted {
			t.Errorf("intent %s ran but is %s, not executed", in.ID, in.Status)
		}
		if in.Status != tgruntime.IntentExecuted {
			continue
		}
		executed++
		rec, err := rt.Execution(ctx, in.Execution.ExecutionID)
		if err != nil {
			t.Errorf("intent %s: its execution %s has no record: %v", in.ID, in.Execution.ExecutionID, err)
			continue
		}
		if rec.State == string(lifecycle.Executing) {
			t.Errorf("intent %s: execution left EXECUTING after recovery", in.ID)
		}
		if rec.Error != nil && rec.Error.Code == "interrupted" {
			interrupted++
			if p := statePath(rec); p[len(p)-2] != "ABORTED" || p[len(p)-1] != "ROLLED_BACK" {
				t.Errorf("interrupted intent %s: path %v", in.ID, p)
			}
			_, err := rt.Execute(ctx, tgruntime.Invocation{IntentID: in.ID, IntentHash: hashes[in.ID], Principal: "tester"})
			var ie *tgruntime.IntentError
			if !errors.As(err, &ie) || ie.Code != "intent_already_executed" {
				t.Errorf("interrupted intent %s ran again or was not refused: %v", in.ID, err)
			}
		}
	}
	if b2, _ := os.ReadFile(runsFile); len(b2) != len(b) {
		t.Error("re-executing interrupted intents ran a tool")
	}
	t.Logf("%d kills (%d of them while a tool was held); %d of %d intents executed, %d of them interrupted mid-execution; %d tool runs", kills, held, executed, len(intents), interrupted, len(ran))
	if interrupted == 0 {
		t.Error("no kill landed while a tool ran: the test did not exercise an interrupted intent")
	}
	if interrupted < held {
		t.Errorf("%d intents interrupted, but %d kills came while a tool was held mid-execution", interrupted, held)
	}
	// Whatever the kills interrupted, every record and intent is proven by
	// the audit log: the events are written with what they record.
	n := 0
	if _, err := rt.VerifyRecords(ctx, func(d tgruntime.Discrepancy) error {
		if n++; n <= 10 {
			t.Errorf("after the kills: %s", d)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
