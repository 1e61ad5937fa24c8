package tools_test

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/tools"
)

// fileReadEntry returns the registered file.read entry.
func fileReadEntry(t *testing.T) *tools.Entry {
	t.Helper()
	r := frozen(t, tools.Builtins()...)
	e, err := r.Lookup("file.read", "1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// readEnv returns an Env granting filesystem.read on dir with file.read's
// declared limits, closed at the end of the test.
func readEnv(t *testing.T, e *tools.Entry, dir string) *tools.Env {
	t.Helper()
	env := &tools.Env{
		ExecutionID: "exec-1",
		CallID:      "call-1",
		Attempt:     1,
		Principal:   "tester",
		Grants:      []capability.Capability{{Name: "filesystem.read", Scope: dir}},
		Limits:      e.Declaration().ResourceLimits,
		WorkDir:     dir,
	}
	t.Cleanup(func() { env.Close() })
	return env
}

func pathInput(p string) json.RawMessage {
	b, _ := json.Marshal(tools.FileReadInput{Path: p})
	return b
}

func TestFileRead_Declaration(t *testing.T) {
	d := tools.FileRead().Declaration()
	if err := d.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := compactJSON(t, b), compactJSON(t, appendixAWithPath(t)); got != want {
		t.Errorf("file.read declaration =\n%s\nwant RFC-0001 appendix A with its path's input capability\n%s", got, want)
	}
	if got := tools.Builtins(); len(got) == 0 || keyOf(got[0]) != "file.read@1.0.0" {
		t.Errorf("Builtins() = %v; want file.read@1.0.0 first", got)
	}
}

func TestFileRead_Execute(t *testing.T) {
	e := fileReadEntry(t)
	dir := t.TempDir()
	outside := t.TempDir()
	write := func(dir, name string, content []byte) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(dir, "hello.txt", []byte("héllo\nworld\n"))
	write(dir, "empty.txt", nil)
	write(dir, "latin1.txt", []byte("caf\xe9"))
	write(dir, "four.txt", []byte("1234"))
	write(dir, "five.txt", []byte("12345"))
	write(outside, "secret.txt", []byte("secret"))
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(filepath.Join(dir, "sub"), "n.txt", []byte("nested"))
	symlinks := os.Symlink(filepath.Join(outside, "secret.txt"), filepath.Join(dir, "escape")) == nil

	tests := []struct {
		name        string
		path        string
		maxFileSize int64 // overrides the declared limit when non-zero; -1 means unlimited
		want        *tools.FileReadOutput
		check       func(t *testing.T, err error)
		symlink     bool
	}{
		{name: "text", path: "hello.txt", want: &tools.FileReadOutput{Content: "héllo\nworld\n", Size: 13}},
		{name: "absolute", path: filepath.Join(dir, "hello.txt"), want: &tools.FileReadOutput{Content: "héllo\nworld\n", Size: 13}},
		{name: "nested", path: "sub/n.txt", want: &tools.FileReadOutput{Content: "nested", Size: 6}},
		{name: "empty", path: "empty.txt", want: &tools.FileReadOutput{Content: "", Size: 0}},
		{name: "at the limit", path: "four.txt", maxFileSize: 4, want: &tools.FileReadOutput{Content: "1234", Size: 4}},
		{name: "unlimited", path: "five.txt", maxFileSize: -1, want: &tools.FileReadOutput{Content: "12345", Size: 5}},
		{name: "over the limit", path: "five.txt", maxFileSize: 4, check: func(t *testing.T, err error) {
			var le *tools.LimitError
			if !errors.As(err, &le) {
				t.Fatalf("err = %v (%T); want *LimitError", err, err)
			}
			if le.Limit != "file_size_limit" || le.Max != 4 || le.Got != 5 {
				t.Errorf("LimitError = %+v; want file_size_limit 5 > 4", *le)
			}
			// The message names the limit once, in words, with the field.
			if msg := le.Error(); strings.Count(msg, "file_size_limit") != 0 || !strings.Contains(msg, "the file size, 5 bytes, is over the tool's limit of 4 bytes (maxFileSize)") {
				t.Errorf("message %q", msg)
			}
			if !errors.Is(err, tools.ErrLimit) {
				t.Errorf("errors.Is(ErrLimit) = false")
			}
		}},
		{name: "directory", path: "sub", check: func(t *testing.T, err error) {
			if err == nil || !strings.Contains(err.Error(), "not a regular file") {
				t.Errorf("err = %v; want a refusal of a non-regular file", err)
			}
		}},
		{name: "granted root itself", path: ".", check: func(t *testing.T, err error) {
			if err == nil || !strings.Contains(err.Error(), "not a regular file") {
				t.Errorf("err = %v; want a refusal of a non-regular file", err)
			}
		}},
		{name: "not UTF-8", path: "latin1.txt", check: func(t *testing.T, err error) {
			if err == nil || !strings.Contains(err.Error(), "UTF-8") {
				t.Errorf("err = %v; want a refusal of non-UTF-8 content", err)
			}
		}},
		{name: "missing", path: "nope.txt", check: func(t *testing.T, err error) {
			if !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("err = %v; want fs.ErrNotExist", err)
			}
		}},
		{name: "outside", path: filepath.Join(outside, "secret.txt"), check: func(t *testing.T, err error) {
			if !errors.Is(err, tools.ErrAccessDenied) {
				t.Errorf("err = %v; want ErrAccessDenied", err)
			}
		}},
		{name: "dotdot", path: "../" + filepath.Base(outside) + "/secret.txt", check: func(t *testing.T, err error) {
			if !errors.Is(err, tools.ErrAccessDenied) {
				t.Errorf("err = %v; want ErrAccessDenied", err)
			}
		}},
		{name: "escaping symlink", path: "escape", symlink: true, check: func(t *testing.T, err error) {
			if !errors.Is(err, tools.ErrAccessDenied) {
				t.Errorf("err = %v; want ErrAccessDenied", err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.symlink && !symlinks {
				t.Skip("symbolic links unavailable")
			}
			in := pathInput(tt.path)
			env := readEnv(t, e, dir)
			switch {
			case tt.maxFileSize > 0:
				env.Limits.MaxFileSize = tt.maxFileSize
			case tt.maxFileSize < 0:
				env.Limits.MaxFileSize = 0
			}
			out, err := e.Tool().Execute(t.Context(), env, in)
			if tt.want == nil {
				if err == nil {
					t.Fatalf("Execute(%s) = %s; want an error", in, out)
				}
				tt.check(t, err)
				return
			}
			if err != nil {
				t.Fatalf("Execute(%s): %v", in, err)
			}
			if err := e.ValidateOutput(out); err != nil {
				t.Errorf("output does not match the output schema: %v", err)
			}
			var got tools.FileReadOutput
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatalf("output %s: %v", out, err)
			}
			if got != *tt.want {
				t.Errorf("Execute(%s) = %+v; want %+v", in, got, *tt.want)
			}
		})
	}
}

func TestFileRead_Execute_canceled(t *testing.T) {
	e := fileReadEntry(t)
	dir := t.TempDir()
	for _, name := range []string{"a.txt", "empty.txt"} {
		content := []byte("content")
		if name == "empty.txt" {
			content = nil
		}
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"a.txt", "empty.txt"} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			out, err := e.Tool().Execute(ctx, readEnv(t, e, dir), pathInput(name))
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Execute with a canceled context = %s, %v; want context.Canceled", out, err)
			}
		})
	}
}

func TestFileRead_Execute_noGrant(t *testing.T) {
	e := fileReadEntry(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.txt"), []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := readEnv(t, e, dir)
	env.Grants = []capability.Capability{{Name: "filesystem.write", Scope: dir}}
	if _, err := e.Tool().Execute(t.Context(), env, pathInput("a.txt")); !errors.Is(err, tools.ErrAccessDenied) {
		t.Fatalf("Execute without filesystem.read = %v; want ErrAccessDenied", err)
	}
}

func TestFileRead_Execute_closedEnv(t *testing.T) {
	e := fileReadEntry(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.txt"), []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := readEnv(t, e, dir)
	if _, err := e.Tool().Execute(t.Context(), env, pathInput("a.txt")); err != nil {
		t.Fatal(err)
	}
	env.Close()
	if out, err := e.Tool().Execute(t.Context(), env, pathInput("a.txt")); err == nil {
		t.Fatalf("Execute after Env.Close = %s; want an error", out)
	}
}

// A named pipe is not a regular file, and opening one for reading blocks
// until a writer appears: file.read must refuse it without opening it.
func TestFileRead_Execute_fifo(t *testing.T) {
	e := fileReadEntry(t)
	dir := t.TempDir()
	fifo := filepath.Join(dir, "pipe")
	if err := mkfifo(fifo); err != nil {
		t.Skipf("named pipes unavailable: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := e.Tool().Execute(t.Context(), readEnv(t, e, dir), pathInput("pipe"))
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Fatalf("Execute(fifo) = %v; want a refusal of a non-regular file", err)
		}
	case <-time.After(30 * time.Second): // a watchdog, not a timing assertion
		// Unblock the reader so the goroutine ends.
		if w, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
			w.Close()
		}
		<-done
		t.Fatal("Execute(fifo) blocked opening a named pipe")
	}
}

// mkfifo makes a named pipe with the mkfifo command, keeping the test free
// of platform-specific syscalls.
func mkfifo(path string) error {
	if _, err := exec.LookPath("mkfifo"); err != nil {
		return err
	}
	return exec.Command("mkfifo", path).Run()
}
