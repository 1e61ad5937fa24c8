package tools_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/lifecycle"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
)

// run executes id (at its default version when version is "") with the
// raw input bytes as they are, as the principal "tester".
func runRaw(rt *tgruntime.Runtime, id, version string, input []byte) (*tgruntime.Result, error) {
	return rt.Execute(context.Background(), tgruntime.Invocation{Tool: id, Version: version, Input: input, Principal: "tester"})
}

// The default versions of the file tools are the newest; the registry
// picks them for a bare id, and they take ordinary file names, while
// file.read@1.0.0 stays RFC-0001 appendix A's, pattern included.
func TestFileTools_DefaultVersions(t *testing.T) {
	reg := frozen(t, tools.Builtins()...)
	for id, want := range map[string]string{"file.read": "1.2.0", "file.list": "1.1.0", "file.write": "1.1.0"} {
		e, err := reg.Lookup(id, "")
		if err != nil || e.Declaration().Version != want {
			t.Errorf("%s: default %v (%v); want %s", id, keyOf(e.Tool()), err, want)
		}
	}
	e, _ := reg.Lookup("file.read", "1.0.0")
	var schema struct {
		Properties struct {
			Path struct {
				Pattern string `json:"pattern"`
			} `json:"path"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(e.Declaration().InputSchema, &schema); err != nil || schema.Properties.Path.Pattern != "^[a-zA-Z0-9/_.-]+$" {
		t.Errorf("file.read@1.0.0 path pattern %q (%v); want appendix A's", schema.Properties.Path.Pattern, err)
	}
	for _, key := range [][2]string{{"file.read", "1.0.0"}, {"file.read", "1.1.0"}, {"file.list", "1.0.0"}, {"file.write", "1.0.0"}} {
		e, _ := reg.Lookup(key[0], key[1])
		if err := e.ValidateInput([]byte(`{"path": "my notes.txt", "content": ""}`)); err == nil && key[0] != "file.write" ||
			e.ValidateInput([]byte(`{"path": "my notes.txt"}`)) == nil && key[0] != "file.write" {
			t.Errorf("%s@%s accepts a name outside appendix A's set; its schema must not change", key[0], key[1])
		}
	}
}

// Ordinary file names work with the default versions: spaces, non-ASCII
// letters, a leading '-', '..' segments that stay inside the grant, the
// longest name a directory entry may have. Each is written, listed and
// read back through the runtime.
func TestFileTools_OrdinaryNames(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	rt := openExecRuntime(t, caps(t, "filesystem.read:"+dir, "filesystem.write:"+dir))
	long := strings.Repeat("é", 126) + ".tx" // 255 bytes: NAME_MAX, the longest name a directory entry may have
	for _, name := range []string{
		"my notes.txt", "café.txt", "日本語 メモ.txt", "emoji 😀.txt", "-rf", "--output=x", " leading space",
		"trailing space ", "quote \"'`.txt", "back\\slash", "$(id);|&.txt", "sub/../dotdot.txt", "sub/" + long,
	} {
		t.Run(name, func(t *testing.T) {
			content := "content of " + name
			p := filepath.Join(dir, name)
			out := completed(t, rt, "file.write", map[string]any{"path": p, "content": content})
			if out["path"] != p {
				t.Errorf("write: %v", out)
			}
			if b, err := os.ReadFile(filepath.Clean(p)); err != nil || string(b) != content {
				t.Fatalf("on disk: %q, %v", b, err)
			}
			out = completed(t, rt, "file.read", map[string]any{"path": p})
			if out["content"] != content {
				t.Errorf("read: %v", out)
			}
			out = completed(t, rt, "file.list", map[string]any{"path": filepath.Dir(filepath.Clean(p))})
			found := false
			for _, e := range out["entries"].([]any) {
				found = found || e.(map[string]any)["path"] == filepath.Base(filepath.Clean(p))
			}
			if !found {
				t.Errorf("list: %s not in %v", filepath.Base(p), out["entries"])
			}
		})
	}
	// Relative to the runtime's working directory (here: the process's),
	// through as many '..' as it takes, as well.
	wd, _ := os.Getwd()
	rel, err := filepath.Rel(wd, filepath.Join(dir, "café.txt"))
	if err != nil || !strings.HasPrefix(rel, "..") {
		t.Fatalf("relative path %q, %v", rel, err)
	}
	if out := completed(t, rt, "file.read", map[string]any{"path": rel}); out["content"] != "content of café.txt" {
		t.Errorf("relative: %v", out)
	}
}

// What the default versions refuse, before anything runs (FAILED, the
// input's fault, nothing written): control characters (NUL, C0 such as a
// newline or a tab, DEL, C1), an input that is not valid UTF-8 (raw bytes,
// or half a UTF-16 surrogate pair escaped), an empty or too long path.
// A name the filesystem refuses fails the attempt saying so; '..' leading
// out of the grant is a capability denial. Each message says what is wrong.
func TestFileTools_RefusedNames(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	rt := openExecRuntime(t, caps(t, "filesystem.read:"+dir, "filesystem.write:"+dir))
	write := func(path string) []byte {
		return []byte(`{"path": ` + path + `, "content": "x"}`)
	}
	for _, tc := range []struct {
		name    string
		input   []byte
		state   lifecycle.State
		class   error
		message string
	}{
		{"NUL", write(`"` + dir + `/a\u0000b"`), lifecycle.Failed, tgruntime.ErrValidation, "' (File path to write: any UTF-8 name without control characters)"},
		{"newline", write(`"` + dir + `/a\nb"`), lifecycle.Failed, tgruntime.ErrValidation, "' (File path to write: any UTF-8 name without control characters)"},
		{"tab", write(`"` + dir + `/a\tb"`), lifecycle.Failed, tgruntime.ErrValidation, "' (File path to write: any UTF-8 name without control characters)"},
		{"escape", write(`"` + dir + `/a\u001bb"`), lifecycle.Failed, tgruntime.ErrValidation, "' (File path to write: any UTF-8 name without control characters)"},
		{"DEL", write(`"` + dir + `/a\u007fb"`), lifecycle.Failed, tgruntime.ErrValidation, "' (File path to write: any UTF-8 name without control characters)"},
		{"C1 NEL", write(`"` + dir + "/a\u0085b\""), lifecycle.Failed, tgruntime.ErrValidation, "' (File path to write: any UTF-8 name without control characters)"},
		{"C1 escaped", write(`"` + dir + `/a\u009fb"`), lifecycle.Failed, tgruntime.ErrValidation, "' (File path to write: any UTF-8 name without control characters)"},
		{"invalid UTF-8", write("\"" + dir + "/caf\xe9.txt\""), lifecycle.Failed, tgruntime.ErrValidation, "not valid UTF-8"},
		{"lone low surrogate", write(`"` + dir + `/caf\udce9.txt"`), lifecycle.Failed, tgruntime.ErrValidation, `\udce9`},
		{"lone high surrogate", write(`"` + dir + `/\ud83d.txt"`), lifecycle.Failed, tgruntime.ErrValidation, "surrogate pair"},
		{"lone surrogate in the content", []byte(`{"path": "` + dir + `/ok.txt", "content": "\udc80"}`), lifecycle.Failed, tgruntime.ErrValidation, "surrogate pair"},
		{"empty", write(`""`), lifecycle.Failed, tgruntime.ErrValidation, "/path"},
		{"longer than 4096 characters", write(`"` + dir + "/" + strings.Repeat("a", 4096) + `"`), lifecycle.Failed, tgruntime.ErrValidation, "/path"},
		{"a name longer than the filesystem allows", write(`"` + dir + "/" + strings.Repeat("é", 128) + `"`), lifecycle.RolledBack, tgruntime.ErrExecution, "file name too long"},
		{".. out of the grant", write(`"` + dir + `/../` + filepath.Base(outside) + `/x.txt"`), lifecycle.Denied, tgruntime.ErrAuthorization, "requires filesystem.write:" + filepath.Join(filepath.Dir(dir), filepath.Base(outside), "x.txt")}, // decided before it runs (tools.Declaration.Decide)
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := runRaw(rt, "file.write", "", tc.input)
			if res == nil || res.State != tc.state || !errors.Is(err, tc.class) {
				t.Fatalf("res %+v, err %v; want %s, %v", res, err, tc.state, tc.class)
			}
			if !strings.Contains(err.Error(), tc.message) {
				t.Errorf("message %q; want it to say %q", err, tc.message)
			}
			for _, d := range []string{dir, outside} {
				if left, _ := os.ReadDir(d); len(left) != 0 {
					t.Errorf("written: %v", left)
				}
			}
		})
	}
	// A surrogate pair escaped is one valid character.
	if res, err := runRaw(rt, "file.write", "", write(`"`+dir+`/\ud83d\ude00.txt"`)); err != nil || res.State != lifecycle.Completed {
		t.Errorf("a surrogate pair: %v", err)
	} else if _, err := os.Stat(filepath.Join(dir, "😀.txt")); err != nil {
		t.Error(err)
	}
}
