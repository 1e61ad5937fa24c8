package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

func TestBench_JSON(t *testing.T) {
	workdir(t)
	t.Setenv("TMPDIR", t.TempDir())
	r := toolgate(t, "", "bench", "--duration", "100ms", "--callers", "2", "--sync=false", "--json")
	if r.code != ExitCompleted {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if r.stderr != "" {
		t.Errorf("stderr is not a terminal, yet got %q", r.stderr)
	}
	type phase struct {
		OpsPerS *float64 `json:"ops_per_s"`
		P50us   *float64 `json:"p50_us"`
		P99us   *float64 `json:"p99_us"`
	}
	type pair struct {
		W1 *phase `json:"w1"`
		WN *phase `json:"wN"`
	}
	var rep struct {
		Callers    int      `json:"callers"`
		Sync       *bool    `json:"sync"`
		FsyncP50us *float64 `json:"fsync_p50_us"`
		Floor      *pair    `json:"floor"`
		Runtime    *pair    `json:"runtime"`
		ReadOnly   *pair    `json:"read_only"`
		Ratios     *struct {
			RuntimeW1OverFloorW1 *float64 `json:"runtime_w1_over_floor_w1"`
			RuntimeWNOverFloorW1 *float64 `json:"runtime_wN_over_floor_w1"`
		} `json:"ratios"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("%v:\n%s", err, r.stdout)
	}
	if rep.Callers != 2 || rep.Sync == nil || *rep.Sync || rep.FsyncP50us == nil || rep.Floor == nil || rep.Runtime == nil || rep.Ratios == nil {
		t.Fatalf("incomplete report:\n%s", r.stdout)
	}
	if rep.ReadOnly == nil {
		t.Fatalf("no read_only:\n%s", r.stdout)
	}
	for name, p := range map[string]*phase{"floor.w1": rep.Floor.W1, "floor.wN": rep.Floor.WN, "runtime.w1": rep.Runtime.W1, "runtime.wN": rep.Runtime.WN,
		"read_only.w1": rep.ReadOnly.W1, "read_only.wN": rep.ReadOnly.WN} {
		if p == nil || p.OpsPerS == nil || p.P50us == nil || p.P99us == nil {
			t.Fatalf("%s incomplete:\n%s", name, r.stdout)
		}
		if *p.OpsPerS <= 0 || *p.P50us <= 0 || *p.P50us > *p.P99us {
			t.Errorf("%s: ops/s %v, p50 %vµs, p99 %vµs", name, *p.OpsPerS, *p.P50us, *p.P99us)
		}
	}
	if rep.Ratios.RuntimeW1OverFloorW1 == nil || rep.Ratios.RuntimeWNOverFloorW1 == nil || *rep.Ratios.RuntimeW1OverFloorW1 <= 0 {
		t.Errorf("ratios:\n%s", r.stdout)
	}
}

func TestBench_Table(t *testing.T) {
	workdir(t)
	t.Setenv("TMPDIR", t.TempDir())
	r := toolgate(t, "", "bench", "--duration", "50ms", "--callers", "3", "--sync=false")
	if r.code != ExitCompleted {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) < 6 || !strings.HasPrefix(lines[0], "fsync p50 ") || !strings.Contains(lines[0], "sync=false, callers=3, 50ms per phase") ||
		!strings.HasPrefix(lines[1], "PHASE") || !strings.Contains(lines[1], "VS FLOOR w1") || !strings.HasSuffix(lines[1], "SYNCS/OP") {
		t.Fatalf("table:\n%s", r.stdout)
	}
	for i, want := range []string{"floor 1 ", "floor 3 ", "runtime 1 ", "runtime 3 ", "read-only 1 ", "read-only 3 "} {
		// With sync off nothing is synced: no count of syncs ("-").
		if got := strings.Join(strings.Fields(lines[2+i]), " "); !strings.HasPrefix(got, want) || !strings.HasSuffix(got, "x -") {
			t.Errorf("row %d %q, want %q... ending in a ratio and no syncs", i, lines[2+i], want)
		}
	}
	if !strings.HasSuffix(strings.Fields(lines[2])[5], "1.00x") {
		t.Errorf("floor w1 against itself: %q", lines[2])
	}
}

// --cpuprofile leaves one profile per phase and names them.
func TestBench_CPUProfile(t *testing.T) {
	workdir(t)
	t.Setenv("TMPDIR", t.TempDir())
	dir := filepath.Join(t.TempDir(), "prof")
	r := toolgate(t, "", "bench", "--duration", "20ms", "--callers", "2", "--sync=false", "--cpuprofile", dir)
	if r.code != ExitCompleted {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	for _, name := range []string{"floor-w1", "floor-wN", "runtime-w1", "runtime-wN", "read-only-w1", "read-only-wN"} {
		path := filepath.Join(dir, name+".pprof")
		if !strings.Contains(r.stdout, "CPU profile: "+path+"\n") {
			t.Errorf("the table does not name %s:\n%s", path, r.stdout)
		}
		if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", path, err)
		}
	}
}

func TestBench_Usage(t *testing.T) {
	for _, args := range [][]string{
		{"bench", "--callers", "0"},
		{"bench", "--duration", "0s"},
		{"bench", "--duration", "-1s"},
		{"bench", "--duration", "soon"},
		{"bench", "--frobnicate"},
		{"bench", "extra"},
		{"bench", "--duration", "10ms", "--cpuprofile", "/dev/null/profiles"},
		{"bench", "--duration", "10ms", "--db", "some/file.db"}, // bench makes its own files
	} {
		r := toolgate(t, "", args...)
		if r.code != ExitUsage {
			t.Errorf("%v: exit %d, want %d\nstderr: %s", args, r.code, ExitUsage, r.stderr)
		}
		if r.stdout != "" {
			t.Errorf("%v: stdout %q", args, r.stdout)
		}
	}
}

func TestFmtMicros(t *testing.T) {
	for us, want := range map[float64]string{412.3: "412µs", 1100: "1.1ms", 3.21: "3.21µs", 0: "0s", 12345.6: "12.3ms", 0.5: "500ns"} {
		if got := fmtMicros(us); got != want {
			t.Errorf("fmtMicros(%v) = %q, want %q", us, got, want)
		}
	}
}

// toolgate bench --db postgres://... measures the same phases on Postgres,
// in scratch schemas it drops afterwards. Needs TOOLGATE_TEST_POSTGRES
// (bash scripts/pg-test.sh run go test -run TestBench_Postgres ./internal/cli).
func TestBench_Postgres(t *testing.T) {
	base := os.Getenv("TOOLGATE_TEST_POSTGRES")
	if base == "" {
		t.Skip("TOOLGATE_TEST_POSTGRES is not set; run it with: bash scripts/pg-test.sh run go test -run TestBench_Postgres ./internal/cli")
	}
	workdir(t)
	r := toolgate(t, "", "bench", "--db", base, "--duration", "100ms", "--callers", "4", "--json")
	if r.code != ExitCompleted {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	type phase struct {
		OpsPerS float64 `json:"ops_per_s"`
	}
	var rep struct {
		Backend       string `json:"backend"`
		ServerVersion string `json:"server_version"`
		Floor         struct {
			W1 phase `json:"w1"`
		} `json:"floor"`
		Runtime struct {
			W1 phase `json:"w1"`
		} `json:"runtime"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Backend != "postgres" || rep.ServerVersion == "" || rep.Floor.W1.OpsPerS <= 0 || rep.Runtime.W1.OpsPerS <= 0 {
		t.Fatalf("report:\n%s", r.stdout)
	}
	ctx := context.Background()
	c, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var left int
	if err := c.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'toolgate_bench_%'`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d scratch schemas left, %v", left, err)
	}
	tab := toolgate(t, "", "bench", "--db", base, "--duration", "50ms", "--callers", "2")
	if tab.code != ExitCompleted || !strings.HasPrefix(tab.stdout, "postgres ") || !strings.Contains(tab.stdout, "2 pgx transactions per op") {
		t.Fatalf("table: %d\n%s%s", tab.code, tab.stdout, tab.stderr)
	}
}

// bench --gateway: an MCP client calls the upstream's echo directly and
// through 'toolgate mcp' (both this binary, built), alternately, and the
// report holds the p50 of each and their ratio; the table says the same,
// and --cpuprofile leaves the profile of the toolgate mcp process.
func TestBench_Gateway(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the toolgate binary")
	}
	bin := buildToolgate(t, t.TempDir()) // before workdir's Chdir
	workdir(t)
	t.Setenv("TMPDIR", t.TempDir())
	old := toolgateBinary
	toolgateBinary = func() (string, error) { return bin, nil }
	t.Cleanup(func() { toolgateBinary = old })

	r := toolgate(t, "", "bench", "--gateway", "--calls", "8", "--warmup", "2", "--json")
	if r.code != ExitCompleted {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	var rep struct {
		Calls      int      `json:"calls"`
		Warmup     int      `json:"warmup"`
		Sync       bool     `json:"sync"`
		FsyncP50us *float64 `json:"fsync_p50_us"`
		Direct     *struct {
			P50 *float64 `json:"p50_us"`
			P99 *float64 `json:"p99_us"`
		} `json:"direct"`
		Gateway *struct {
			P50 *float64 `json:"p50_us"`
			P99 *float64 `json:"p99_us"`
		} `json:"gateway"`
		RatioP50   *float64 `json:"ratio_p50"`
		AddedP50us *float64 `json:"added_p50_us"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("%v:\n%s", err, r.stdout)
	}
	if rep.Calls != 8 || rep.Warmup != 2 || !rep.Sync || rep.FsyncP50us == nil || rep.Direct == nil || rep.Gateway == nil ||
		rep.Direct.P50 == nil || rep.Gateway.P50 == nil || rep.RatioP50 == nil || rep.AddedP50us == nil {
		t.Fatalf("incomplete report:\n%s", r.stdout)
	}
	if *rep.Direct.P50 <= 0 || *rep.Gateway.P50 <= 0 || *rep.Direct.P50 > *rep.Direct.P99 || *rep.Gateway.P50 > *rep.Gateway.P99 {
		t.Errorf("latencies:\n%s", r.stdout)
	}
	if got, want := *rep.RatioP50, *rep.Gateway.P50 / *rep.Direct.P50; got != want {
		t.Errorf("ratio %v, want %v", got, want)
	}

	dir := filepath.Join(t.TempDir(), "prof")
	tab := toolgate(t, "", "bench", "--gateway", "--calls", "3", "--warmup", "0", "--cpuprofile", dir)
	if tab.code != ExitCompleted {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", tab.code, tab.stdout, tab.stderr)
	}
	lines := strings.Split(strings.TrimSpace(tab.stdout), "\n")
	if len(lines) < 5 || !strings.HasPrefix(lines[0], "MCP echo call, 3 calls of each after 0 warm-up, alternated; durable database") ||
		!strings.HasPrefix(lines[1], "CALL") || !strings.HasPrefix(lines[2], "direct ") || !strings.HasPrefix(lines[3], "gateway ") ||
		!strings.HasPrefix(lines[4], "gateway / direct p50: ") {
		t.Fatalf("table:\n%s", tab.stdout)
	}
	prof := filepath.Join(dir, "gateway.pprof")
	if !strings.Contains(tab.stdout, "CPU profile of toolgate mcp: "+prof+"\n") {
		t.Errorf("the table does not name %s:\n%s", prof, tab.stdout)
	}
	if fi, err := os.Stat(prof); err != nil || fi.Size() == 0 {
		t.Errorf("%s: %v", prof, err)
	}
}

// The options of the storage phases do not go with --gateway, nor its own
// without it.
func TestBench_GatewayUsage(t *testing.T) {
	for _, args := range [][]string{
		{"bench", "--gateway", "--callers", "2"},
		{"bench", "--gateway", "--duration", "1s"},
		{"bench", "--gateway", "--sync=false"},
		{"bench", "--gateway", "--db", "postgres://localhost/x"},
		{"bench", "--gateway", "--calls", "0"},
		{"bench", "--gateway", "--warmup", "-1"},
		{"bench", "--calls", "10"},
		{"bench", "--warmup", "1"},
	} {
		r := toolgate(t, "", args...)
		if r.code != ExitUsage {
			t.Errorf("%v: exit %d, want %d\nstderr: %s", args, r.code, ExitUsage, r.stderr)
		}
		if r.stdout != "" || !strings.HasPrefix(r.stderr, "toolgate: ") {
			t.Errorf("%v: stdout %q, stderr %q", args, r.stdout, r.stderr)
		}
	}
}
