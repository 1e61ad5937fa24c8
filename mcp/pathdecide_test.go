package mcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/mcp"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
)

// The MCP server decides a call of a tool that requires approval as the
// run will (tools.Declaration.Decide): a file path that leaves its grant,
// by ".." or by a symbolic link, is DENIED at once, never proposed as an
// intent a person could approve but that could not run; a path inside the
// grant becomes an intent.
func TestApproval_PathDecidedAsTheRun(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(dir, filepath.Join(out, "up")); err != nil {
		t.Fatal(err)
	}
	fw := tools.FileWrite11()
	d := fw.Declaration()
	d.ID, d.RequiresApproval = "test.write", true // file.write, approved first
	reg := tools.NewRegistry()
	// The body never runs here: the call is decided, then DENIED or proposed.
	notRun := func(context.Context, *tools.Env, json.RawMessage) (json.RawMessage, error) {
		return nil, errors.New("not run in this test")
	}
	if err := reg.Register(tools.NewRaw(d, notRun)); err != nil {
		t.Fatal(err)
	}
	reg.Freeze()
	rt, err := tgruntime.Open(filepath.Join(t.TempDir(), "tg.db"), &tgruntime.Options{Registry: reg, NoSync: true,
		Grants: map[string][]capability.Capability{principal: {capability.MustParse("filesystem.write:" + out)}}})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	cs := pipeSession(t, rt, &mcp.Options{Principal: principal}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, path := range []string{out + "/../escaped.txt", out + "/up/escaped.txt"} {
		o := failed(t, call(t, ctx, cs, "test.write", map[string]any{"path": path, "content": "x"}, nil))
		if o.State != "DENIED" {
			t.Errorf("%s: %+v; want DENIED, not an intent", path, o)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "escaped.txt")); err == nil {
		t.Error("a path out of the grant was written")
	}
	intentOf(t, call(t, ctx, cs, "test.write", map[string]any{"path": out + "/ok.txt", "content": "x"}, nil))
}
