package proc_test

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/proc"
)

// With util-linux prlimit(1) installed, the limits hold from the command's
// first instruction: cat reads its own limits as the first thing it does,
// and must see them every time.
func TestRun_LimitsBeforeFirstInstruction(t *testing.T) {
	if _, err := os.Stat("/usr/bin/prlimit"); err != nil {
		if _, err := os.Stat("/bin/prlimit"); err != nil {
			t.Skip("util-linux prlimit(1) is not installed: limits are set right after start, with a window (see the package doc)")
		}
	}
	r := prlimitRunner(t)
	if c := r.Capabilities(); !strings.Contains(c.Prlimit.Detail, "before the command runs") {
		t.Errorf("Probe does not report the trampoline: %q", c.Prlimit.Detail)
	}
	fsize := regexp.MustCompile(`Max file size\s+12345\s+12345\s+bytes`)
	as := regexp.MustCompile(`Max address space\s+536870912\s+536870912\s+bytes`)
	for i := range 20 {
		res, err := r.Run(context.Background(), proc.Spec{
			Path: "cat", Args: []string{"/proc/self/limits"},
			MaxStdout: 1 << 16, MaxFileSize: 12345, MaxMemory: 512 << 20,
		})
		if err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		if out := string(res.Stdout.Data); !fsize.MatchString(out) || !as.MatchString(out) {
			t.Fatalf("run %d: the command started without its limits:\n%s", i, out)
		}
	}
}
