package bench

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestRun(t *testing.T) {
	dir := t.TempDir()
	var progress []string
	rep, err := Run(context.Background(), Options{Callers: 4, Duration: 100 * time.Millisecond, Sync: false, Dir: dir,
		Progress: func(s string) { progress = append(progress, s) }})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Callers != 4 || rep.Sync || rep.DurationS != 0.1 {
		t.Errorf("report options: callers %d sync %v duration %v", rep.Callers, rep.Sync, rep.DurationS)
	}
	if rep.FsyncCount == 0 || rep.FsyncP50us <= 0 || rep.FsyncP50us > rep.FsyncP99us {
		t.Errorf("fsync: %d samples, p50 %vµs, p99 %vµs", rep.FsyncCount, rep.FsyncP50us, rep.FsyncP99us)
	}
	if rep.ClaimBytes <= 0 || rep.FinalBytes <= rep.ClaimBytes {
		t.Errorf("record sizes: claim %d, final %d", rep.ClaimBytes, rep.FinalBytes)
	}
	if rep.RecordKeys != "uuid4" && rep.RecordKeys != "uuid7" {
		t.Errorf("record keys %q", rep.RecordKeys)
	}
	for _, p := range []struct {
		name    string
		ph      Phase
		callers int
	}{{"floor w1", rep.Floor.W1, 1}, {"floor wN", rep.Floor.WN, 4}, {"runtime w1", rep.Runtime.W1, 1}, {"runtime wN", rep.Runtime.WN, 4},
		{"read-only w1", rep.ReadOnly.W1, 1}, {"read-only wN", rep.ReadOnly.WN, 4}} {
		ph := p.ph
		if ph.Callers != p.callers || ph.Ops <= 0 || ph.OpsPerS <= 0 || ph.ElapsedS < 0.1 ||
			ph.P50us <= 0 || ph.P50us > ph.P99us {
			t.Errorf("%s: %+v", p.name, ph)
		}
	}
	r := rep.Ratios
	if r.RuntimeW1OverFloorW1 <= 0 || r.RuntimeWNOverFloorW1 <= 0 || r.RuntimeWNOverFloorWN <= 0 {
		t.Errorf("ratios %+v", r)
	}
	if got, want := r.RuntimeW1OverFloorW1, rep.Runtime.W1.OpsPerS/rep.Floor.W1.OpsPerS; got != want {
		t.Errorf("runtime_w1_over_floor_w1 %v, want %v", got, want)
	}

	// Every field the CLI's --json promises is there, under its name.
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"callers", "sync", "fsync_p50_us", "fsync_p99_us", "ratios", "floor", "runtime", "read_only"} {
		if _, ok := m[k]; !ok {
			t.Errorf("no %q in %s", k, b)
		}
	}
	for _, kind := range []string{"floor", "runtime", "read_only"} {
		for _, w := range []string{"w1", "wN"} {
			ph, _ := m[kind].(map[string]any)[w].(map[string]any)
			for _, k := range []string{"ops_per_s", "p50_us", "p99_us"} {
				if v, ok := ph[k].(float64); !ok || v <= 0 {
					t.Errorf("%s.%s.%s = %v in %s", kind, w, k, ph[k], b)
				}
			}
		}
	}
	for _, k := range []string{"runtime_w1_over_floor_w1", "runtime_wN_over_floor_w1"} {
		if _, ok := m["ratios"].(map[string]any)[k].(float64); !ok {
			t.Errorf("no ratios.%s in %s", k, b)
		}
	}

	if len(progress) < 5 || !strings.Contains(strings.Join(progress, "\n"), "runtime, 4 callers") {
		t.Errorf("progress: %q", progress)
	}
	// The temporary files are gone.
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("left behind in %s: %v", dir, left)
	}
}

// With a ProfileDir, each measured phase leaves a CPU profile named after
// its key in the report.
func TestRun_Profiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "profiles")
	rep, err := Run(context.Background(), Options{Callers: 2, Duration: 50 * time.Millisecond, Dir: t.TempDir(), ProfileDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, name := range []string{"floor-w1", "floor-wN", "runtime-w1", "runtime-wN", "read-only-w1", "read-only-wN"} {
		want = append(want, filepath.Join(dir, name+".pprof"))
	}
	if !slices.Equal(rep.Profiles, want) {
		t.Fatalf("profiles %q, want %q", rep.Profiles, want)
	}
	for _, path := range want {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if len(data) < 2 || data[0] != 0x1f || data[1] != 0x8b { // a pprof profile is gzipped
			t.Errorf("%s is not a pprof profile (%d bytes)", path, len(data))
		}
	}

	// The profiler is the process's: a second one cannot start.
	stop, err := startProfile(filepath.Join(dir, "first.pprof"))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if _, err := Run(context.Background(), Options{Callers: 1, Duration: 10 * time.Millisecond, Dir: t.TempDir(), ProfileDir: dir}); err == nil || !strings.Contains(err.Error(), "CPU profile") {
		t.Fatalf("Run with a profiler already running = %v", err)
	}
}

func TestRun_Canceled(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(150*time.Millisecond, cancel)
	start := time.Now()
	_, err := Run(ctx, Options{Callers: 2, Duration: time.Minute, Dir: dir})
	if !errors.Is(err, ErrInterrupted) {
		t.Fatalf("err %v, want ErrInterrupted", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("took %v to stop", d)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("left behind in %s: %v", dir, left)
	}
}

func TestRun_InvalidOptions(t *testing.T) {
	for _, o := range []Options{{Callers: 0, Duration: time.Second}, {Callers: 1, Duration: 0}, {Callers: -1, Duration: -1}} {
		if _, err := Run(context.Background(), o); err == nil {
			t.Errorf("Run(%+v) = nil error", o)
		}
	}
}

func TestPercentile(t *testing.T) {
	var d []time.Duration
	for i := 100; i >= 1; i-- {
		d = append(d, time.Duration(i))
	}
	for _, tc := range []struct {
		p    float64
		want time.Duration
	}{{50, 50}, {99, 99}, {100, 100}, {1, 1}, {0.1, 1}} {
		if got := percentile(d, tc.p); got != tc.want {
			t.Errorf("p%v = %v, want %v", tc.p, got, tc.want)
		}
	}
	if got := percentile([]time.Duration{7}, 99); got != 7 {
		t.Errorf("p99 of one = %v", got)
	}
	if got := percentile(nil, 50); got != 0 {
		t.Errorf("p50 of none = %v", got)
	}
}

func TestIDGen(t *testing.T) {
	var g idGen
	prev := ""
	for range 10000 {
		id := string(g.next(true))
		if len(id) != 36 || id[14] != '7' || id <= prev {
			t.Fatalf("ordered id %q after %q", id, prev)
		}
		prev = id
	}
	if id := string(g.next(false)); len(id) != 36 || id[14] != '4' || id[8] != '-' || id[23] != '-' {
		t.Fatalf("random id %q", id)
	}
}

// The runtime's durable call costs two syncs of the store's own count (the
// claim's group and the commit's, each one entry of the write-ahead log;
// and now and then one more, when the log's file is extended), where the
// floor's two bbolt updates cost four; with 4 callers the groups are
// shared. Counts, never wall time.
func TestRun_SyncsPerCall(t *testing.T) {
	rep, err := Run(context.Background(), Options{Callers: 4, Duration: 300 * time.Millisecond, Sync: true, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if got := rep.Runtime.W1.SyncsPerOp; got < 2 || got > 2.05 {
		t.Errorf("one caller: %.3f syncs per call, want 2 and the log's extensions (%d calls)", got, rep.Runtime.W1.Ops)
	}
	if got := rep.Runtime.WN.SyncsPerOp; got <= 0 || got > 2 {
		t.Errorf("4 callers: %.3f syncs per call, want more than 0 and at most 2", got)
	}
	// A read-only call stores no claim: one sync.
	if got := rep.ReadOnly.W1.SyncsPerOp; got < 1 || got > 1.05 {
		t.Errorf("read-only, one caller: %.3f syncs per call, want 1 and the log's extensions (%d calls)", got, rep.ReadOnly.W1.Ops)
	}
	if got := rep.ReadOnly.WN.SyncsPerOp; got <= 0 || got > 1 {
		t.Errorf("read-only, 4 callers: %.3f syncs per call, want more than 0 and at most 1", got)
	}
	if rep.Floor.W1.SyncsPerOp != 4 {
		t.Errorf("the floor: %.3f syncs per op, want bbolt's 4", rep.Floor.W1.SyncsPerOp)
	}
	rep, err = Run(context.Background(), Options{Callers: 2, Duration: 100 * time.Millisecond, Sync: false, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Runtime.W1.SyncsPerOp != 0 || rep.ReadOnly.W1.SyncsPerOp != 0 || rep.Floor.W1.SyncsPerOp != 0 {
		t.Errorf("sync off: %.3f, %.3f and %.3f syncs per op, want none", rep.Runtime.W1.SyncsPerOp, rep.ReadOnly.W1.SyncsPerOp, rep.Floor.W1.SyncsPerOp)
	}
}
