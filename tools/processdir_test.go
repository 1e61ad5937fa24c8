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
