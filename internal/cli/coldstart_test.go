package cli

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The CLI's cold start: what runs before main (package initialization) and
// what 'toolgate tools' costs. Start-up time is measured by
// BenchmarkColdStart; these tests guard it by allocation counts, which do
// not depend on the machine's load.

// initBudget is the most allocations one package's initialization may make
// in the toolgate binary, and initExceptions the packages allowed more,
// with why.
const initBudget = 1000

var initExceptions = map[string]struct {
	allocs int
	why    string
}{
	// v5 compiles the meta-schemas of five drafts in its init, 8,550
	// allocations and about 2 ms; only a newer major version (or another
	// validator) would not.
	"github.com/santhosh-tekuri/jsonschema/v5": {9000, "compiles its meta-schemas at init"},
}

// buildToolgate builds cmd/toolgate into dir.
func buildToolgate(tb testing.TB, dir string) string {
	tb.Helper()
	bin := filepath.Join(dir, "toolgate")
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if out, err := exec.Command(gobin, "build", "-o", bin, "github.com/toolgate/toolgate/cmd/toolgate").CombinedOutput(); err != nil {
		tb.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

var initLine = regexp.MustCompile(`^init (\S+) @[0-9.]+ ms, [0-9.]+ ms clock, (\d+) bytes, (\d+) allocs$`)

// No package's initialization makes more than initBudget allocations
// (a schema compiled, a regular expression with a counted repetition, an
// exporter built at init would), outside initExceptions.
func TestColdStart_InitAllocations(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the toolgate binary")
	}
	dir := t.TempDir()
	bin := buildToolgate(t, dir)
	for _, args := range [][]string{{"--version"}, {"tools"}} {
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1", "TOOLGATE_DB="+filepath.Join(dir, "toolgate.db"), "TOOLGATE_REGISTRY=", "OTEL_EXPORTER_OTLP_ENDPOINT=")
		cmd.Stdout = io.Discard
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("toolgate %v: %v\n%s", args, err, stderr.String())
		}
		n := 0
		for _, line := range strings.Split(stderr.String(), "\n") {
			m := initLine.FindStringSubmatch(strings.TrimSpace(line))
			if m == nil {
				continue
			}
			n++
			allocs, _ := strconv.Atoi(m[3])
			budget, why := initBudget, "over the budget of every package"
			if e, ok := initExceptions[m[1]]; ok {
				budget, why = e.allocs, "over its exception ("+e.why+")"
			}
			if allocs > budget {
				t.Errorf("toolgate %v: init of %s makes %d allocations (%s bytes), %s of %d: make it lazy (sync.OnceValue), or keep it from being linked",
					args, m[1], allocs, m[2], why, budget)
			}
		}
		if n < 50 {
			t.Fatalf("toolgate %v: GODEBUG=inittrace=1 printed %d init lines:\n%s", args, n, stderr.String())
		}
	}
}

// 'toolgate tools' lists the built-in tools without compiling their
// schemas (53,000 allocations when Register compiled them all).
func TestColdStart_ToolsAllocations(t *testing.T) {
	workdir(t)
	allocs := testing.AllocsPerRun(5, func() {
		if code := Main(context.Background(), []string{"tools"}, Stdio{In: strings.NewReader(""), Out: io.Discard, Err: io.Discard}); code != 0 {
			t.Fatalf("toolgate tools: exit %d", code)
		}
	})
	if allocs > 5000 {
		t.Errorf("toolgate tools makes %.0f allocations, more than 5000: is a schema compiled that nothing uses?", allocs)
	}
}

// BenchmarkColdStart runs the toolgate binary as a user does, against a
// Go program that prints hello, built in the same run: the x-hello metric
// is the ratio of their wall times. TOOLGATE_COLDSTART_BASELINE names
// another toolgate binary (say, built from main) to measure beside it.
//
//	go test ./internal/cli -run '^$' -bench ColdStart -benchtime 200x
func BenchmarkColdStart(b *testing.B) {
	dir := b.TempDir()
	bins := map[string]string{"toolgate": buildToolgate(b, dir)}
	if base := os.Getenv("TOOLGATE_COLDSTART_BASELINE"); base != "" {
		bins["baseline"] = base
	}
	hello := filepath.Join(dir, "hello")
	src := filepath.Join(dir, "hello.go")
	if err := os.WriteFile(src, []byte("package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"hello\") }\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if out, err := exec.Command(gobin, "build", "-o", hello, src).CombinedOutput(); err != nil {
		b.Fatalf("go build hello: %v\n%s", err, out)
	}
	env := append(os.Environ(), "TOOLGATE_DB="+filepath.Join(dir, "toolgate.db"), "TOOLGATE_REGISTRY=", "OTEL_EXPORTER_OTLP_ENDPOINT=")
	start := func(b *testing.B, bin string, args ...string) {
		cmd := exec.Command(bin, args...)
		cmd.Dir, cmd.Env = dir, env
		if err := cmd.Run(); err != nil {
			b.Fatalf("%s %v: %v", bin, args, err)
		}
	}
	// hello's time per run, for the ratios: measured first, then as a
	// benchmark of its own.
	const helloRuns = 50
	t0 := time.Now()
	for range helloRuns {
		start(b, hello)
	}
	helloNs := float64(time.Since(t0).Nanoseconds()) / helloRuns
	b.Run("hello", func(b *testing.B) {
		for b.Loop() {
			start(b, hello)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/helloNs, "x-hello")
	})
	for _, name := range []string{"baseline", "toolgate"} {
		bin, ok := bins[name]
		if !ok {
			continue
		}
		for _, args := range [][]string{{"--version"}, {"tools"}} {
			b.Run(name+"/"+strings.TrimLeft(args[0], "-"), func(b *testing.B) {
				for b.Loop() {
					start(b, bin, args...)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/helloNs, "x-hello")
			})
		}
	}
}
