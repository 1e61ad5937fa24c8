package runtime_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/toolgate/toolgate/runtime"
)

// A file error reads once, in the user's terms, however it was wrapped:
// a wrapper that repeats the error's operation and path (as the database
// layer's "open PATH: " before "open PATH: not a directory") does not
// make the user read it twice, and a file error a wrapper formatted with
// %v (its text only, "open policy.json: no such file or directory") reads
// as one in the error's tree does.
func TestMessage_FileErrorsOnce(t *testing.T) {
	_, real := os.Open(filepath.Join(t.TempDir(), "nope.json")) // a real *fs.PathError: "open /tmp/.../nope.json: no such ..."
	pe := &fs.PathError{Op: "open", Path: "/srv/f/state.db", Err: syscall.ENOTDIR}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("txn: open %s: %w", pe.Path, pe), "cannot open /srv/f/state.db: not a directory"},
		{fmt.Errorf("capability: invalid policy: %v", &fs.PathError{Op: "open", Path: "nope.json", Err: syscall.ENOENT}),
			"invalid policy: cannot open nope.json: no such file or directory"},
		{fmt.Errorf("--policy: %v", &fs.PathError{Op: "read", Path: "a dir", Err: syscall.EISDIR}), "--policy: cannot read a dir: is a directory"},
		{errors.New("tools: statat sub/x.txt: permission denied; then: openat y: no such file or directory"),
			"cannot access sub/x.txt: permission denied; then: cannot open y: no such file or directory"},
		{fmt.Errorf("loading: %v", real), "loading: cannot open " + real.(*fs.PathError).Path + ": no such file or directory"},
		// Not a file error's form: left as it is.
		{errors.New("open the door: it is stuck"), "open the door: it is stuck"},
		{errors.New("cannot open x: no such file or directory"), "cannot open x: no such file or directory"},
	} {
		if got := runtime.Message(tc.err); got != tc.want {
			t.Errorf("Message(%q)\n = %q\nwant %q", tc.err, got, tc.want)
		}
	}
}

// JSONKind is the one wording of a JSON value's kind: Message's for a
// decoding error, and the HTTP boundary's (server) for a request body.
func TestJSONKind(t *testing.T) {
	for v, want := range map[string]string{
		"object": "an object", "array": "an array", "bool": "a boolean", "null": "null",
		"number": "a number", "number 1e999": "a number", "number -5": "a number", "string": "a string",
	} {
		if got := runtime.JSONKind(v); got != want {
			t.Errorf("JSONKind(%q) = %q, want %q", v, got, want)
		}
	}
	var v struct {
		Flag string `json:"flag"`
	}
	err := json.Unmarshal([]byte(`{"flag":true}`), &v)
	if got, want := runtime.Message(err), `the value of "flag" is a boolean where a string is expected`; got != want {
		t.Errorf("Message = %q, want %q", got, want)
	}
}

// rendered is an error whose text is already in the user's terms, as a
// front end's wrapper gives it (internal/cli's userError).
type rendered struct{ err error }

func (e rendered) Error() string { return runtime.Message(e.err) }
func (e rendered) Unwrap() error { return e.err }

// Message of an error whose text is already Message's says it once:
// rendering again changes nothing ("cannot open", not "cannot cannot
// open").
func TestMessage_Idempotent(t *testing.T) {
	pe := &fs.PathError{Op: "open", Path: "/srv/f/state.db", Err: syscall.ENOTDIR}
	for _, err := range []error{pe, fmt.Errorf("txn: open %s: %w", pe.Path, pe), fmt.Errorf("runtime: %w", &fs.PathError{Op: "statat", Path: "x", Err: syscall.ENOENT})} {
		once := runtime.Message(err)
		if twice := runtime.Message(rendered{err}); twice != once {
			t.Errorf("Message of a rendered %q = %q, want %q", err, twice, once)
		}
		if again := runtime.Message(errors.New(once)); again != once {
			t.Errorf("Message of the text %q = %q", once, again)
		}
	}
}
