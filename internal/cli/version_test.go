package cli

import (
	"runtime/debug"
	"strings"
	"testing"
)

// toolgate --version prints the module version and the VCS revision from
// the build info, and exits 0.
func TestVersion(t *testing.T) {
	r := toolgate(t, "", "--version")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "toolgate ") || !strings.Contains(r.stdout, "\nrevision ") || !strings.Contains(r.stdout, "built with go") {
		t.Fatalf("--version: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	info := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/toolgate/toolgate", Version: "v1.2.3"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef"}, {Key: "vcs.time", Value: "2026-11-25T18:00:00Z"}, {Key: "vcs.modified", Value: "true"}}}
	want := "v1.2.3 (module github.com/toolgate/toolgate)\nrevision 0123456789abcdef (2026-11-25T18:00:00Z), with uncommitted changes\nbuilt with go1.26.0"
	if got := version(info, true); got != want {
		t.Errorf("version:\n%s\nwant\n%s", got, want)
	}
	if got := version(nil, false); !strings.Contains(got, "unknown") {
		t.Errorf("no build info: %q", got)
	}
}
