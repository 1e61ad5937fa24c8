package tools_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/tools"
)

// A process's working directory is the directory that was checked: the
// granted directory swapped for a symbolic link to a sibling outside the
// grant, while processes are started in it, never makes a process run in
// the sibling. The directory is looked up below the grant's place and the
// process changes into it through the descriptor that was checked.
func TestProcess_WorkingDirIsPinned(t *testing.T) {
	pwd, err := filepath.EvalSymlinks("/bin/pwd")
	if err != nil {
		t.Skip("no /bin/pwd on this machine")
	}
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"granted", "outside"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	granted, outside := filepath.Join(dir, "granted"), filepath.Join(dir, "outside")
	rt := openExecRuntime(t, caps(t, "process.exec:"+pwd, "filesystem.read:"+granted))
	swapRace(t, dir, "granted", outside, nil, func(i int) (string, error) {
		res, err := execute(t, rt, tools.ExecCaptureID, map[string]any{"command": pwd, "args": []string{"-P"}, "cwd": granted})
		if err != nil {
			if res != nil && res.Error != nil && res.Error.Code == "capability_boundary" {
				return "", tools.ErrAccessDenied
			}
			return "", err
		}
		var out struct {
			Stdout string `json:"stdout"`
		}
		if err := json.Unmarshal(res.Output, &out); err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(out.Stdout); got == outside {
			return got, nil
		}
		return "", nil
	})
}

// A process run without a cwd runs in a fresh directory of the temporary
// directory, a new one for each process, removed when it ends, however it
// ends: once the removals Run leaves in the background are done
// (WaitProcessDirs, which Runtime.Close calls), nothing named
// toolgate-proc-* is left behind, not even the directory made ahead for
// the next process.
func TestProcess_FreshDirRemoved(t *testing.T) {
	child := childBinary(t) // built before TMPDIR changes
	base := t.TempDir()
	tmp := filepath.Join(base, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", tmp)
	rt := openExecRuntime(t, caps(t, "process.exec:"+child, "filesystem.read:"+base))
	seen := map[string]string{}
	for _, c := range []struct {
		name string
		in   map[string]any
	}{
		{"pwd", map[string]any{"command": child, "args": []string{"pwd"}}},
		{"writes in it", map[string]any{"command": child, "args": []string{"write", "out.bin", "100000"}}},
		{"pwd again", map[string]any{"command": child, "args": []string{"pwd"}}},
		{"fails", map[string]any{"command": child, "args": []string{"exit", "3"}}},
		{"timed out", map[string]any{"command": child, "args": []string{"sleep", "30"}, "timeout_seconds": 1}},
		{"pwd once more", map[string]any{"command": child, "args": []string{"pwd"}}},
	} {
		res, err := execute(t, rt, tools.ExecCaptureID, c.in)
		if res == nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if strings.HasPrefix(c.name, "pwd") {
			var out struct {
				Stdout string `json:"stdout"`
			}
			if err := json.Unmarshal(res.Output, &out); err != nil || !strings.HasPrefix(out.Stdout, filepath.Join(tmp, "toolgate-proc-")) {
				t.Fatalf("%s: %q (%v); want a fresh directory in %s", c.name, out.Stdout, err, tmp)
			}
			if prev, ok := seen[out.Stdout]; ok {
				t.Fatalf("%s ran in the directory %s ran in: %s", c.name, prev, out.Stdout)
			}
			seen[out.Stdout] = c.name
		}
		tools.WaitProcessDirs()
		if left, _ := filepath.Glob(filepath.Join(tmp, "*")); len(left) != 0 {
			t.Errorf("%s: left in the temporary directory: %v", c.name, left)
		}
	}
}
