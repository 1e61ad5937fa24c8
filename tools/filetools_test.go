package tools_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/tools"
)

// runTool validates in, runs the registered tool id@version in an Env
// granting grants with the declared limits (maxFileSize overridden when
// non-zero), and validates the output.
func runTool(t *testing.T, tl tools.Tool, dir string, grants []capability.Capability, maxFileSize int64, in any) (json.RawMessage, error) {
	t.Helper()
	r := frozen(t, tl)
	d := tl.Declaration()
	e, err := r.Lookup(d.ID, d.Version)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(in)
	if err := e.ValidateInput(raw); err != nil {
		return nil, err
	}
	limits := d.ResourceLimits
	if maxFileSize != 0 {
		limits.MaxFileSize = maxFileSize
	}
	env := &tools.Env{Grants: grants, Limits: limits, WorkDir: dir}
	defer env.Close()
	out, err := tl.Execute(context.Background(), env, raw)
	if err != nil {
		return nil, err
	}
	if err := e.ValidateOutput(out); err != nil {
		t.Fatalf("output %s does not match the schema: %v", out, err)
	}
	return out, nil
}

func TestFileReadRange(t *testing.T) {
	dir := t.TempDir()
	content := "héllo wörld\n" // é and ö are two bytes each: 14 bytes
	if err := os.WriteFile(filepath.Join(dir, "t.txt"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	grants := []capability.Capability{{Name: "filesystem.read", Scope: dir}}
	read := func(in tools.FileReadRangeInput, max int64) (tools.FileReadRangeOutput, error) {
		out, err := runTool(t, tools.FileReadRange(), dir, grants, max, in)
		var o tools.FileReadRangeOutput
		if err == nil {
			json.Unmarshal(out, &o)
		}
		return o, err
	}
	if d := tools.FileReadRange().Declaration(); d.ID != "file.read" || d.Version != "1.1.0" {
		t.Fatalf("declared %s", d.Key())
	}

	o, err := read(tools.FileReadRangeInput{Path: "t.txt"}, 0)
	if err != nil || o.Content != content || o.Size != 14 || o.Length != 14 || !o.EOF || o.Offset != 0 {
		t.Fatalf("whole file: %+v, %v", o, err)
	}
	// Parts of 4 bytes: a part never ends inside a UTF-8 sequence, and the
	// parts put together are the file.
	var got strings.Builder
	for off := int64(0); ; {
		o, err := read(tools.FileReadRangeInput{Path: "t.txt", Offset: off, Limit: 4}, 4)
		if err != nil {
			t.Fatalf("offset %d: %v", off, err)
		}
		if o.Length == 0 || o.Length > 4 || o.Offset != off || o.Size != 14 {
			t.Fatalf("part at %d: %+v", off, o)
		}
		got.WriteString(o.Content)
		off += o.Length
		if o.EOF {
			break
		}
	}
	if got.String() != content {
		t.Errorf("parts joined = %q", got.String())
	}
	if _, err := read(tools.FileReadRangeInput{Path: "t.txt", Offset: 2}, 0); err == nil || !strings.Contains(err.Error(), "inside a UTF-8 sequence") {
		t.Errorf("offset inside é: %v", err)
	}
	if _, err := read(tools.FileReadRangeInput{Path: "t.txt", Offset: 15}, 0); err == nil || !strings.Contains(err.Error(), "past the end") {
		t.Errorf("offset past the end: %v", err)
	}
	var le *tools.LimitError
	if _, err := read(tools.FileReadRangeInput{Path: "t.txt"}, 10); !errors.As(err, &le) || le.Limit != "file_size_limit" {
		t.Errorf("whole file over maxFileSize: %v", err)
	}
	if _, err := read(tools.FileReadRangeInput{Path: "t.txt", Limit: 11}, 10); !errors.As(err, &le) {
		t.Errorf("limit over maxFileSize: %v", err)
	}
	if o, err := read(tools.FileReadRangeInput{Path: "t.txt", Offset: 4, Limit: 10}, 10); err != nil || o.Content != "lo wörld\n" || !o.EOF {
		t.Errorf("the rest within the limit: %+v, %v", o, err)
	}
	if _, err := read(tools.FileReadRangeInput{Path: "../x"}, 0); !errors.Is(err, tools.ErrAccessDenied) {
		t.Errorf("../x: %v", err)
	}
}

func TestFileList(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	for p, c := range map[string]string{"b.txt": "bb", "a.txt": "a", "sub/c.txt": "ccc", "sub/deep/d.txt": "d"} {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(outside, "secret.txt"), []byte("s"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "out")); err != nil {
		t.Fatal(err)
	}
	grants := []capability.Capability{{Name: "filesystem.read", Scope: dir}}
	list := func(in tools.FileListInput) (tools.FileListOutput, error) {
		out, err := runTool(t, tools.FileList(), dir, grants, 0, in)
		var o tools.FileListOutput
		if err == nil {
			json.Unmarshal(out, &o)
		}
		return o, err
	}
	o, err := list(tools.FileListInput{Path: "."})
	if err != nil {
		t.Fatal(err)
	}
	want := []tools.FileListEntry{{"a.txt", "file", 1}, {"b.txt", "file", 2}, {"out", "symlink", 0}, {"sub", "dir", 0}}
	if !equalEntries(o.Entries, want) || o.Truncated {
		t.Errorf("flat: %+v", o)
	}
	o, err = list(tools.FileListInput{Path: ".", Recursive: true})
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, tools.FileListEntry{"sub/c.txt", "file", 3}, tools.FileListEntry{"sub/deep", "dir", 0}, tools.FileListEntry{"sub/deep/d.txt", "file", 1})
	if !equalEntries(o.Entries, want) {
		t.Errorf("recursive (the symlink out is reported, not followed): %+v", o.Entries)
	}
	o, err = list(tools.FileListInput{Path: ".", Recursive: true, Limit: 3})
	if err != nil || len(o.Entries) != 3 || !o.Truncated {
		t.Errorf("limit 3: %+v, %v", o, err)
	}
	for _, p := range []string{"..", outside, "out"} {
		if _, err := list(tools.FileListInput{Path: p}); !errors.Is(err, tools.ErrAccessDenied) {
			t.Errorf("list %s: %v; want a denial", p, err)
		}
	}
}

func equalEntries(a, b []tools.FileListEntry) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
