// Package testchild builds the child program that tests of process tools
// and limits run as a real process: one binary, built once per test
// process, without the race detector. Only tests use it.
package testchild

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

var build = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "toolgate-testchild-")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "child")
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	out, err := exec.Command(gobin, "build", "-o", path, "github.com/toolgate/toolgate/internal/testchild/child").CombinedOutput()
	if err != nil {
		return "", errors.New("building the test child: " + err.Error() + "\n" + string(out))
	}
	return path, nil
})

// Path returns the absolute path of the child program, building it on the
// first call; it fails tb if it cannot be built. The modes are listed in
// the child's package documentation (internal/testchild/child).
func Path(tb testing.TB) string {
	tb.Helper()
	p, err := build()
	if err != nil {
		tb.Fatal(err)
	}
	return p
}
