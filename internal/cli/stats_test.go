package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/txn"
)

// statsJSON is the decoded output of 'stats --json', by field name, so that
// the test checks the names as well as the values.
type statsJSON struct {
	Since *string                       `json:"since"`
	Tools map[string]map[string]float64 `json:"tools"`
	Total map[string]float64            `json:"total"`
}

func statsRun(t *testing.T, args ...string) statsJSON {
	t.Helper()
	r := toolgate(t, "", append([]string{"stats", "--json"}, args...)...)
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("stats --json %v: exit %d\n%s%s", args, r.code, r.stdout, r.stderr)
	}
	var out statsJSON
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	if err := dec.Decode(&out); err != nil || out.Tools == nil || out.Total == nil {
		t.Fatalf("stats --json %v: %v\n%s", args, err, r.stdout)
	}
	return out
}

// statsFields are the fields of one tool's (or the total's) statistics.
var statsFields = []string{"invocations", "attempts", "retries", "completed", "failed", "denied", "rolled_back", "aborted",
	"executing", "finished", "success_rate", "failure_rate", "invocation_success_rate", "latency_samples", "p50_ms", "p95_ms", "p99_ms"}

func checkStats(t *testing.T, name string, got, want map[string]float64) {
	t.Helper()
	if keys := slices.Sorted(maps.Keys(got)); !slices.Equal(keys, slices.Sorted(slices.Values(statsFields))) {
		t.Fatalf("%s: fields %v, want %v", name, keys, slices.Sorted(slices.Values(statsFields)))
	}
	for _, k := range statsFields {
		w, ok := want[k]
		if !ok {
			t.Fatalf("%s: test lacks an expectation for %s", name, k)
		}
		if math.Abs(got[k]-w) > 1e-9 {
			t.Errorf("%s: %s = %v, want %v", name, k, got[k], w)
		}
	}
}

// seedStats stores records of three tools through the txn API. The old ones
// started two hours ago, the others ten minutes ago.
//
//	a.tool  a1 ca1 #1 COMPLETED     10ms  recent
//	        a2 ca2 #1 ROLLED_BACK  100ms  recent, through ABORTED (a timeout)
//	        a3 ca2 #2 COMPLETED     20ms  recent, the retry of ca2
//	        a4 ca3 #1 FAILED         1ms  old
//	        a5 ca4 #1 DENIED         2ms  old
//	        a6 ca5 #1 ROLLED_BACK   30ms  recent, the tool failed; version 2.0.0
//	        a7 ca6 #1 EXECUTING           recent
//	b.tool  b001..b100, calls cb001..cb100, COMPLETED, 1ms..100ms, recent
//	c.tool  c1, c2, no call id, DENIED, 0ms, old
func seedStats(t *testing.T, dir string) {
	t.Helper()
	ctx := context.Background()
	store, err := txn.Open(theDB(), &txn.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	now := time.Now()
	old, recent := now.Add(-2*time.Hour), now.Add(-10*time.Minute)
	path := func(start time.Time, states ...string) []txn.Transition {
		var trs []txn.Transition
		for i := 1; i < len(states); i++ {
			trs = append(trs, txn.Transition{From: states[i-1], To: states[i], Event: "e", At: start})
		}
		return trs
	}
	ran := []string{"DECLARED", "VALIDATED", "AUTHORIZED", "EXECUTING"}
	put := func(id, call string, attempt int, tool, version, state string, start time.Time, d time.Duration, states []string) {
		t.Helper()
		must(t, store.Put(ctx, &txn.Record{ExecutionID: id, CallID: call, Attempt: attempt, ToolID: tool, ToolVersion: version,
			State: state, Transitions: path(start, states...), StartedAt: start, EndedAt: start.Add(d)}))
	}
	put("a1", "ca1", 1, "a.tool", "1.0.0", "COMPLETED", recent, 10*time.Millisecond, append(ran, "COMPLETED"))
	put("a2", "ca2", 1, "a.tool", "1.0.0", "ROLLED_BACK", recent, 100*time.Millisecond, append(ran, "ABORTED", "ROLLED_BACK"))
	put("a3", "ca2", 2, "a.tool", "1.0.0", "COMPLETED", recent, 20*time.Millisecond, append(ran, "COMPLETED"))
	put("a4", "ca3", 1, "a.tool", "1.0.0", "FAILED", old, time.Millisecond, []string{"DECLARED", "FAILED"})
	put("a5", "ca4", 1, "a.tool", "1.0.0", "DENIED", old, 2*time.Millisecond, []string{"DECLARED", "VALIDATED", "DENIED"})
	put("a6", "ca5", 1, "a.tool", "2.0.0", "ROLLED_BACK", recent, 30*time.Millisecond, append(ran, "ROLLED_BACK"))
	if _, err := store.Begin(ctx, &txn.Record{ExecutionID: "a7", CallID: "ca6", Attempt: 1, ToolID: "a.tool", ToolVersion: "1.0.0",
		State: "EXECUTING", Transitions: path(recent, ran...), StartedAt: recent}); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 100; i++ {
		put(fmt.Sprintf("b%03d", i), fmt.Sprintf("cb%03d", i), 1, "b.tool", "1.0.0", "COMPLETED", recent,
			time.Duration(i)*time.Millisecond, append(ran, "COMPLETED"))
	}
	put("c1", "", 1, "c.tool", "1.0.0", "DENIED", old, 0, []string{"DECLARED", "VALIDATED", "DENIED"})
	put("c2", "", 1, "c.tool", "1.0.0", "DENIED", old, 0, []string{"DECLARED", "VALIDATED", "DENIED"})
}

var (
	// ca1 and ca2 (on its retry) of the ended calls ca1..ca5 succeeded;
	// the latencies are 1 2 10 20 30 100 ms.
	statsA = map[string]float64{
		"invocations": 6, "attempts": 7, "retries": 1, "completed": 2, "failed": 1, "denied": 1, "rolled_back": 2, "aborted": 1,
		"executing": 1, "finished": 6, "success_rate": 2.0 / 6, "failure_rate": 4.0 / 6, "invocation_success_rate": 2.0 / 5,
		"latency_samples": 6, "p50_ms": 10, "p95_ms": 100, "p99_ms": 100,
	}
	statsB = map[string]float64{
		"invocations": 100, "attempts": 100, "retries": 0, "completed": 100, "failed": 0, "denied": 0, "rolled_back": 0, "aborted": 0,
		"executing": 0, "finished": 100, "success_rate": 1, "failure_rate": 0, "invocation_success_rate": 1,
		"latency_samples": 100, "p50_ms": 50, "p95_ms": 95, "p99_ms": 99,
	}
	statsC = map[string]float64{
		"invocations": 2, "attempts": 2, "retries": 0, "completed": 0, "failed": 0, "denied": 2, "rolled_back": 0, "aborted": 0,
		"executing": 0, "finished": 2, "success_rate": 0, "failure_rate": 1, "invocation_success_rate": 0,
		"latency_samples": 2, "p50_ms": 0, "p95_ms": 0, "p99_ms": 0,
	}
)

func TestStats_JSON(t *testing.T) {
	dir := workdir(t)
	seedStats(t, dir)
	out := statsRun(t)
	if out.Since != nil {
		t.Fatalf("since %q without --since", *out.Since)
	}
	if keys := slices.Sorted(maps.Keys(out.Tools)); !slices.Equal(keys, []string{"a.tool", "b.tool", "c.tool"}) {
		t.Fatalf("tools %v", keys)
	}
	checkStats(t, "a.tool", out.Tools["a.tool"], statsA)
	checkStats(t, "b.tool", out.Tools["b.tool"], statsB)
	checkStats(t, "c.tool", out.Tools["c.tool"], statsC)
	// The 108 latencies: 0 0, 1..100, and 1 2 10 20 30 100. Nearest rank:
	// p50 is the 54th, p95 the 103rd, p99 the 107th.
	checkStats(t, "total", out.Total, map[string]float64{
		"invocations": 108, "attempts": 109, "retries": 1, "completed": 102, "failed": 1, "denied": 3, "rolled_back": 2, "aborted": 1,
		"executing": 1, "finished": 108, "success_rate": 102.0 / 108, "failure_rate": 6.0 / 108, "invocation_success_rate": 102.0 / 107,
		"latency_samples": 108, "p50_ms": 47, "p95_ms": 96, "p99_ms": 100,
	})
}

func TestStats_Filters(t *testing.T) {
	dir := workdir(t)
	seedStats(t, dir)

	before := time.Now()
	out := statsRun(t, "--since", "1h")
	if out.Since == nil {
		t.Fatal("since is null with --since")
	}
	cutoff, err := time.Parse(time.RFC3339, *out.Since)
	if err != nil || cutoff.Before(before.Add(-time.Hour-time.Second)) || cutoff.After(time.Now().Add(-time.Hour+time.Second)) {
		t.Fatalf("since %q (%v), want about an hour ago", *out.Since, err)
	}
	if keys := slices.Sorted(maps.Keys(out.Tools)); !slices.Equal(keys, []string{"a.tool", "b.tool"}) {
		t.Fatalf("--since 1h: tools %v", keys)
	}
	recentA := map[string]float64{
		"invocations": 4, "attempts": 5, "retries": 1, "completed": 2, "failed": 0, "denied": 0, "rolled_back": 2, "aborted": 1,
		"executing": 1, "finished": 4, "success_rate": 0.5, "failure_rate": 0.5, "invocation_success_rate": 2.0 / 3,
		"latency_samples": 4, "p50_ms": 20, "p95_ms": 100, "p99_ms": 100, // 10 20 30 100
	}
	checkStats(t, "a.tool since 1h", out.Tools["a.tool"], recentA)
	checkStats(t, "b.tool since 1h", out.Tools["b.tool"], statsB)

	// Everything is younger than three hours; nothing younger than a minute.
	out = statsRun(t, "--since", "3h")
	checkStats(t, "a.tool since 3h", out.Tools["a.tool"], statsA)
	out = statsRun(t, "--since", "1m")
	if len(out.Tools) != 0 || out.Total["attempts"] != 0 {
		t.Fatalf("--since 1m: %+v", out)
	}

	out = statsRun(t, "--tool", "a.tool")
	if len(out.Tools) != 1 {
		t.Fatalf("--tool a.tool: tools %v", slices.Collect(maps.Keys(out.Tools)))
	}
	checkStats(t, "--tool a.tool", out.Tools["a.tool"], statsA)
	checkStats(t, "--tool a.tool total", out.Total, statsA)

	out = statsRun(t, "--tool", "a.tool", "--since", "1h")
	checkStats(t, "--tool a.tool --since 1h total", out.Total, recentA)

	out = statsRun(t, "--tool", "a.tool@2.0.0")
	if out.Total["attempts"] != 1 || out.Total["rolled_back"] != 1 || out.Total["aborted"] != 0 || out.Total["p50_ms"] != 30 {
		t.Fatalf("--tool a.tool@2.0.0: %v", out.Total)
	}

	out = statsRun(t, "--tool", "no.such.tool")
	if len(out.Tools) != 0 || out.Total["attempts"] != 0 {
		t.Fatalf("--tool no.such.tool: %+v", out)
	}
}

func TestStats_Text(t *testing.T) {
	dir := workdir(t)
	seedStats(t, dir)
	r := toolgate(t, "", "stats")
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	if len(lines) != 5 {
		t.Fatalf("%d lines, want a header, 3 tools and a total:\n%s", len(lines), r.stdout)
	}
	if got := strings.Fields(lines[0]); !slices.Equal(got, []string{"TOOL", "CALLS", "ATTEMPTS", "RETRIES", "COMPLETED", "FAILED",
		"DENIED", "ROLLED_BACK", "ABORTED", "EXECUTING", "SUCCESS", "FAILURE", "CALL_SUCCESS", "P50", "P95", "P99"}) {
		t.Fatalf("header %q", lines[0])
	}
	for i, want := range [][]string{
		{"a.tool", "6", "7", "1", "2", "1", "1", "2", "1", "1", "33.3%", "66.7%", "40.0%", "10ms", "100ms", "100ms"},
		{"b.tool", "100", "100", "0", "100", "0", "0", "0", "0", "0", "100.0%", "0.0%", "100.0%", "50ms", "95ms", "99ms"},
		{"c.tool", "2", "2", "0", "0", "0", "2", "0", "0", "0", "0.0%", "100.0%", "0.0%", "0s", "0s", "0s"},
		{"TOTAL", "108", "109", "1", "102", "1", "3", "2", "1", "1", "94.4%", "5.6%", "95.3%", "47ms", "96ms", "100ms"},
	} {
		if got := strings.Fields(lines[i+1]); !slices.Equal(got, want) {
			t.Fatalf("row %d: %q, want %q", i+1, got, want)
		}
	}

	// --since names its cutoff; rates and latencies without samples are "-".
	r = toolgate(t, "", "stats", "--since", "1m")
	lines = strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	if r.code != 0 || len(lines) != 4 || !strings.HasPrefix(lines[0], "Attempts started since ") || !strings.Contains(lines[0], "(the last 1m0s)") {
		t.Fatalf("--since 1m: exit %d\n%s", r.code, r.stdout)
	}
	if got := strings.Fields(lines[3]); !slices.Equal(got, []string{"TOTAL", "0", "0", "0", "0", "0", "0", "0", "0", "0", "-", "-", "-", "-", "-", "-"}) {
		t.Fatalf("empty total: %q", got)
	}
}

func TestStats_EmptyDatabase(t *testing.T) {
	dir := workdir(t)
	db := filepath.Join(dir, "fresh", "toolgate.db")
	t.Setenv("TOOLGATE_DB", db)
	zero := map[string]float64{}
	for _, k := range statsFields {
		zero[k] = 0
	}
	check := func(what string) {
		t.Helper()
		out := statsRun(t)
		if len(out.Tools) != 0 || out.Since != nil {
			t.Fatalf("%s: %+v", what, out)
		}
		checkStats(t, what, out.Total, zero)
		r := toolgate(t, "", "stats")
		lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
		if r.code != 0 || r.stderr != "" || len(lines) != 2 || !strings.HasPrefix(lines[1], "TOTAL ") {
			t.Fatalf("%s: exit %d\n%s%s", what, r.code, r.stdout, r.stderr)
		}
	}
	check("missing database")
	r := toolgate(t, "", "stats", "--json")
	if !strings.Contains(r.stdout, `"tools": {}`) || !strings.Contains(r.stdout, `"since": null`) {
		t.Fatalf("empty --json:\n%s", r.stdout)
	}
	if _, err := os.Stat(filepath.Dir(db)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("stats created %s: %v", filepath.Dir(db), err)
	}

	store, err := txn.Open(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	must(t, store.Close())
	check("empty database")
}

func TestStats_Usage(t *testing.T) {
	workdir(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--since", "-1h"}, "negative"},
		{[]string{"--since", "yesterday"}, "invalid argument"},
		{[]string{"--since", "7"}, "invalid argument"},
		{[]string{"extra"}, "unknown command"},
	} {
		r := toolgate(t, "", append([]string{"stats"}, tc.args...)...)
		if r.code != ExitUsage || !strings.Contains(r.stderr, tc.want) || r.stdout != "" {
			t.Fatalf("%v: exit %d, stderr lacks %q:\n%s", tc.args, r.code, tc.want, r.stderr)
		}
	}
	if r := toolgate(t, "", "--help"); !strings.Contains(r.stdout, "stats") {
		t.Fatalf("stats is not listed:\n%s", r.stdout)
	}
}

func TestStats_Locked(t *testing.T) {
	bboltOnly(t, whyLock)
	dir := workdir(t)
	seedStats(t, dir)
	writer, err := txn.Open(theDB(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close()
	r := toolgate(t, "", "stats")
	if r.code != ExitInternal || !strings.Contains(r.stderr, "locked by another process") || r.stdout != "" {
		t.Fatalf("stats beside a writer: exit %d %q", r.code, r.stderr)
	}
}

// Statistics of real invocations through 'toolgate run'.
func TestStats_Runs(t *testing.T) {
	workdir(t)
	for _, tc := range []struct {
		code int
		args []string
	}{
		{ExitCompleted, []string{"--call-id", "ok-1", "--allow", "filesystem.read:.", "--input", `{"path":"hello.txt"}`}},
		{ExitCompleted, []string{"--call-id", "ok-2", "--allow", "filesystem.read:.", "--input", `{"path":"hello.txt"}`}},
		{ExitDenied, []string{"--call-id", "denied", "--input", `{"path":"hello.txt"}`}},
		{ExitFailed, []string{"--call-id", "failed", "--allow", "filesystem.read:.", "--input", `{"path":7}`}},
		{ExitAborted, []string{"--call-id", "aborted", "--allow", "filesystem.read:.", "--input", `{"path":"big.txt"}`}},
		{ExitRollback, []string{"--call-id", "rb", "--allow", "filesystem.read:.", "--input", `{"path":"sub"}`}},
	} {
		if r := toolgate(t, "", append([]string{"run", "file.read"}, tc.args...)...); r.code != tc.code {
			t.Fatalf("run %v: exit %d, want %d\n%s", tc.args, r.code, tc.code, r.stderr)
		}
	}
	for _, args := range [][]string{nil, {"--since", "1h"}, {"--tool", "file.read"}} {
		out := statsRun(t, args...)
		got := out.Tools["file.read"]
		if len(out.Tools) != 1 || got == nil {
			t.Fatalf("%v: tools %v", args, slices.Collect(maps.Keys(out.Tools)))
		}
		for k, want := range map[string]float64{
			"invocations": 6, "attempts": 6, "retries": 0, "completed": 2, "failed": 1, "denied": 1, "rolled_back": 2, "aborted": 1,
			"executing": 0, "finished": 6, "success_rate": 2.0 / 6, "failure_rate": 4.0 / 6, "invocation_success_rate": 2.0 / 6,
			"latency_samples": 6,
		} {
			if math.Abs(got[k]-want) > 1e-9 || out.Total[k] != got[k] {
				t.Errorf("%v: %s = %v (total %v), want %v", args, k, got[k], out.Total[k], want)
			}
		}
		if !(got["p50_ms"] <= got["p95_ms"] && got["p95_ms"] <= got["p99_ms"] && got["p99_ms"] > 0) {
			t.Errorf("%v: percentiles %v %v %v", args, got["p50_ms"], got["p95_ms"], got["p99_ms"])
		}
	}
	r := toolgate(t, "", "stats")
	if r.code != 0 || !strings.Contains(r.stdout, "\nfile.read ") || !strings.Contains(r.stdout, "\nTOTAL ") {
		t.Fatalf("stats: exit %d\n%s", r.code, r.stdout)
	}
}
