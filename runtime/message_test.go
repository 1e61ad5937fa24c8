package runtime_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"syscall"
	"testing"

	"github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
	"github.com/toolgate/toolgate/txn"
)

// Issue 17 §5: Message renders an error in the user's terms (no package
// prefixes, no system call names, no Go type names), while the error value
// keeps what errors.Is and errors.As need.
func TestMessage_UserTerms(t *testing.T) {
	var typeErr error
	var v struct {
		Path string `json:"path"`
	}
	typeErr = json.Unmarshal([]byte(`{"path":7}`), &v)
	_, numErr := strconv.Atoi("many")
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&fs.PathError{Op: "statat", Path: "notes.txt", Err: syscall.ENOENT}, "cannot access notes.txt: no such file or directory"},
		{&fs.PathError{Op: "readdirent", Path: "sub", Err: syscall.EACCES}, "cannot read sub: permission denied"},
		{fmt.Errorf("tools: %w", &fs.PathError{Op: "openat", Path: "a b.txt", Err: syscall.EACCES}), "cannot open a b.txt: permission denied"},
		{&runtime.ExecutionError{Tool: "file.read", Err: fmt.Errorf("tools: %w", &fs.PathError{Op: "openat", Path: "x", Err: syscall.ENOENT})},
			"file.read failed: cannot open x: no such file or directory"},
		{&os.SyscallError{Syscall: "fsync", Err: syscall.EIO}, "input/output error"},
		{&os.LinkError{Op: "renameat", Old: "a", New: "b", Err: syscall.EXDEV}, "cannot rename a to b: invalid cross-device link"},
		{fmt.Errorf("runtime: %w", fmt.Errorf("%w: %s", txn.ErrLocked, "/srv/toolgate.db")), "database is locked by another process: /srv/toolgate.db"},
		{fmt.Errorf("%w: %q", tools.ErrToolNotFound, "nope"), `tool not found: "nope"`},
		{fmt.Errorf("reading input: %w", typeErr), `reading input: the value of "path" is a number where a string is expected`},
		{fmt.Errorf("--limit: %w", numErr), `--limit: "many" is not a whole number`},
		{errors.New("wrapped with %v: txn: corrupt database"), "wrapped with %v: corrupt database"},
	} {
		if got := runtime.Message(tc.err); got != tc.want {
			t.Errorf("Message(%q) = %q, want %q", tc.err, got, tc.want)
		}
	}
	err := &runtime.ExecutionError{Tool: "t", Err: &fs.PathError{Op: "openat", Path: "x", Err: syscall.ENOENT}}
	if !errors.Is(err, fs.ErrNotExist) || !errors.Is(err, runtime.ErrExecution) {
		t.Errorf("the error value lost its chain: %v", err)
	}
	if runtime.Message(nil) != "" {
		t.Error("Message(nil) is not empty")
	}
}
