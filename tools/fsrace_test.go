package tools_test

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/tools"
)

// A symbolic link swapped in while a tool walks the path never leads out of
// the root: os.Root resolves every component inside it, so a reader sees
// the inside file, a refusal, or nothing, and never the outside one.
func TestFS_SymlinkSwappedDuringCall(t *testing.T) {
	tr := newFSTree(t)
	outside := filepath.Join(tr.base, "outside")
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "f"), []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	swap := filepath.Join(tr.data, "swap")

	stop := make(chan struct{})
	var swapper sync.WaitGroup
	var swaps atomic.Int64
	swapper.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			os.RemoveAll(swap)
			if os.Mkdir(swap, 0o755) == nil {
				os.WriteFile(filepath.Join(swap, "f"), []byte("inside"), 0o644)
			}
			os.RemoveAll(swap)
			os.Symlink("../outside", swap)
			swaps.Add(1)
		}
	})

	for _, name := range []string{"filesystem.read", "filesystem.write"} {
		env := &tools.Env{Grants: []capability.Capability{fsRead(name, tr.data)}, WorkDir: tr.data}
		fsys := env.FS(name)
		var inside, denied, missing int
		// Until the race has been met both ways (bounded: a machine too
		// busy to schedule the swapper fails the test below, loudly).
		deadline := time.Now().Add(20 * time.Second)
		for i := 0; (i < 3000 || denied == 0 || inside == 0) && time.Now().Before(deadline); i++ {
			if i%16 == 0 {
				runtime.Gosched() // let the swapper run on a busy machine
			}
			var (
				b   []byte
				err error
			)
			if name == "filesystem.read" {
				var f *os.File
				if f, err = fsys.Open("swap/f"); err == nil {
					b, err = io.ReadAll(f)
					f.Close()
				}
			} else {
				var f *tools.File
				if f, err = fsys.OpenFile("swap/f", os.O_RDWR, 0); err == nil {
					b, err = io.ReadAll(f)
					if err == nil {
						_, err = f.WriteAt([]byte("pwned!"), 0)
					}
					f.Close()
				}
			}
			switch {
			case err == nil && string(b) == "secret":
				close(stop)
				swapper.Wait()
				t.Fatalf("%s: read %q through the swapped link", name, b)
			case err == nil:
				inside++ // "inside", "pwned!", or empty between the swapper's create and write
			case errors.Is(err, tools.ErrAccessDenied):
				denied++
			default:
				missing++ // the swapper removed a component mid-walk
			}
		}
		env.Close()
		t.Logf("%s: %d inside, %d denied, %d missing", name, inside, denied, missing)
		if denied == 0 {
			t.Errorf("%s: the swapped-in link was never met; the test did not exercise the race", name)
		}
	}
	close(stop)
	swapper.Wait()
	if b, _ := os.ReadFile(filepath.Join(outside, "f")); string(b) != "secret" {
		t.Errorf("the outside file now holds %q", b)
	}
}
