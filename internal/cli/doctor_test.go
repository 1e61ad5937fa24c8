package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/tools"
)

type doctorReport struct {
	OK     bool    `json:"ok"`
	Checks []check `json:"checks"`
}

func doctor(t *testing.T, args ...string) (doctorReport, run) {
	t.Helper()
	r := toolgate(t, "", append([]string{"doctor", "--json"}, args...)...)
	var rep doctorReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("doctor --json: %v\n%s%s", err, r.stdout, r.stderr)
	}
	return rep, r
}

// doctor reports every limit, each with a status saying whether and how it
// is enforced here; none is left out.
func TestDoctor_ReportsEveryLimit(t *testing.T) {
	workdir(t)
	rep, r := doctor(t)
	if r.code != ExitCompleted || !rep.OK {
		t.Fatalf("code %d, ok %v\n%s", r.code, rep.OK, r.stdout)
	}
	byName := map[string]check{}
	for _, c := range rep.Checks {
		byName[c.Name] = c
		switch c.Status {
		case checkOK, checkFallback, checkNotEnforced:
		default:
			t.Errorf("%s: status %q", c.Name, c.Status)
		}
		if c.Detail == "" {
			t.Errorf("%s: no detail", c.Name)
		}
	}
	for _, want := range []string{"database", "policy", "filesystem handles", "maxMemory (in-process tools)"} {
		if _, ok := byName[want]; !ok {
			t.Errorf("no %q check", want)
		}
	}
	for _, s := range tools.ProcessSupport() {
		c, ok := byName[s.Name]
		if !ok {
			t.Errorf("the process limit %q is not reported", s.Name)
			continue
		}
		want := checkOK
		if !s.OK {
			want = checkNotEnforced
		} else if s.Fallback {
			want = checkFallback
		}
		if c.Status != want {
			t.Errorf("%s: status %q, the runner says %q", s.Name, c.Status, want)
		}
	}
	if c := byName["maxMemory (in-process tools)"]; c.Status != checkNotEnforced || !strings.Contains(c.Detail, "trusted") {
		t.Errorf("in-process memory must be reported as not enforced, plainly: %+v", c)
	}
}

func TestDoctor_Broken(t *testing.T) {
	dir := workdir(t)
	bad := filepath.Join(dir, "policy.json")
	must(t, os.WriteFile(bad, []byte(`{"version": 1, "principals": []}`), 0o600))
	rep, r := doctor(t, "--policy", bad)
	if r.code != ExitInternal || rep.OK {
		t.Fatalf("invalid policy: code %d, ok %v", r.code, rep.OK)
	}
	for _, c := range rep.Checks {
		if c.Name == "policy" && (c.Status != checkFailed || !strings.Contains(c.Detail, "policy.json")) {
			t.Errorf("policy check = %+v", c)
		}
	}
	t.Setenv("TOOLGATE_DB", filepath.Join(dir, "hello.txt")) // not a database
	rep, r = doctor(t)
	if r.code != ExitInternal || rep.OK {
		t.Fatalf("bad database: code %d, ok %v\n%s", r.code, rep.OK, r.stdout)
	}
}
