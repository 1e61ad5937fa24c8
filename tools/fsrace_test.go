package tools_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

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

// swapRace runs op in a loop while another goroutine swaps the entry name
// (a file or directory in dir) with a symbolic link to target (a sibling in
// dir) as fast as it can: rename-exchange (renameat2 RENAME_EXCHANGE) where
// the file system has it, else renaming a link over the file and the file
// back (a directory: moving it aside, putting the link in its place and
// moving it back). op reports whether it reached the sibling;
// that fails the test at once. The loop runs until op has been refused
// (the swapped-in link met, ErrAccessDenied) and at least 2000 times
// (10000 without rename-exchange);
// bounded: a machine too busy to schedule the swapper fails the test,
// loudly. repair, when set, runs in the swapper between swaps: op may
// replace name (a staged write renames over it).
func swapRace(t *testing.T, dir, name, target string, repair func(), op func(i int) (leaked string, err error)) {
	t.Helper()
	entry, link := filepath.Join(dir, name), filepath.Join(dir, "swap")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	exchange := func() error {
		return unix.Renameat2(unix.AT_FDCWD, entry, unix.AT_FDCWD, link, unix.RENAME_EXCHANGE)
	}
	useExchange := exchange() == nil && exchange() == nil
	minOps := 2000
	if !useExchange {
		minOps = 10000 // the swap is slower, and the link there for less of the time
		t.Logf("rename-exchange unavailable here: swapping by renames")
	}
	aside, tmpLink, tmpFile := filepath.Join(dir, "aside"), filepath.Join(dir, "tmplink"), filepath.Join(dir, "tmpfile")
	fi, err := os.Lstat(entry)
	isFile := err == nil && fi.Mode().IsRegular()
	if isFile && !useExchange {
		if err := os.Link(entry, aside); err != nil {
			t.Fatal(err)
		}
	}

	stop := make(chan struct{})
	var swapper sync.WaitGroup
	var swaps atomic.Int64
	swapper.Go(func() {
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			switch {
			case useExchange:
				exchange()
			case isFile: // a link renamed over the file, then the file (a hard link kept aside) renamed back
				os.Symlink(target, tmpLink)
				os.Rename(tmpLink, entry)
				os.Link(aside, tmpFile)
				os.Rename(tmpFile, entry)
			case os.Rename(entry, aside) == nil: // a directory: nothing can be renamed over it
				os.Symlink(target, entry)
				os.Remove(entry)
				os.Rename(aside, entry)
			}
			if repair != nil && n%8 == 0 {
				repair()
			}
			swaps.Add(1)
		}
	})
	defer func() {
		close(stop)
		swapper.Wait()
	}()

	var ok, denied, other int
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; (i < minOps || denied == 0) && time.Now().Before(deadline); i++ {
		if i%16 == 0 {
			runtime.Gosched() // let the swapper run on a busy machine
		}
		leaked, err := op(i)
		switch {
		case leaked != "":
			t.Fatalf("op %d reached the sibling through the swapped-in link: %s (err %v)", i, leaked, err)
		case err == nil:
			ok++
		case errors.Is(err, tools.ErrAccessDenied):
			denied++
		default:
			other++ // a name missing mid-swap, not a directory, not a regular file
		}
	}
	t.Logf("%d swaps; %d done, %d refused, %d other errors", swaps.Load(), ok, denied, other)
	if denied == 0 {
		t.Errorf("the swapped-in link was never met; the test did not exercise the race")
	}
}

// fileGrantTree lays out dir/allowed.txt ("allowed") and its sibling
// dir/sibling.txt ("SECRET"), and returns dir.
func fileGrantTree(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range map[string]string{"allowed.txt": "allowed", "sibling.txt": "SECRET"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// A file-scoped grant is not escaped by swapping the file for a symbolic
// link to a sibling: the granted name is opened once, without following a
// link, and read through that descriptor, so a read returns the granted
// file's content or is refused, never the sibling's. Each attempt has its
// own Env (the place is opened per attempt), and reads twice through it
// (FS.Open, then the file.read tool's Stat and Open).
func TestFS_FileGrantSwapRace(t *testing.T) {
	dir := fileGrantTree(t)
	allowed := filepath.Join(dir, "allowed.txt")
	grants := []capability.Capability{{Name: "filesystem.read", Scope: allowed}}
	readTool := tools.FileRead()
	in, _ := json.Marshal(tools.FileReadInput{Path: allowed})
	swapRace(t, dir, "allowed.txt", "sibling.txt", nil, func(int) (string, error) {
		env := &tools.Env{Grants: grants, WorkDir: dir, Limits: readTool.Declaration().ResourceLimits}
		defer env.Close()
		var b []byte
		f, err := env.FS("filesystem.read").Open(allowed)
		if err == nil {
			b, err = io.ReadAll(f)
			f.Close()
		}
		if strings.Contains(string(b), "SECRET") {
			return "FS.Open read " + string(b), err
		}
		out, err2 := readTool.Execute(context.Background(), env, in)
		if strings.Contains(string(out), "SECRET") {
			return "file.read returned " + string(out), err2
		}
		return "", errors.Join(err, err2)
	})
}

// stageNow is a tools.Stager that renames the staged file over its target
// at once, through an os.Root at the directory, as the runtime does after
// the commit.
type stageNow struct{}

func (stageNow) Prepare(root, staged string) error { return nil }

func (stageNow) Stage(root, staged, target string) error {
	r, err := os.OpenRoot(root)
	if err != nil {
		return err
	}
	defer r.Close()
	return r.Rename(staged, target)
}

// Writes through a file-scoped grant are not led to a sibling by a swapped
// in link: WriteFile, OpenFile and the staged file.write all write the
// granted name or are refused; the sibling keeps its content.
func TestFS_WriteSwapRace(t *testing.T) {
	dir := fileGrantTree(t)
	allowed, sibling, link := filepath.Join(dir, "allowed.txt"), filepath.Join(dir, "sibling.txt"), filepath.Join(dir, "swap")
	grants := []capability.Capability{{Name: "filesystem.write", Scope: allowed}}
	writeTool := tools.FileWrite()
	in, _ := json.Marshal(tools.FileWriteInput{Path: allowed, Content: "staged"})
	// A staged write renames a new file over allowed.txt, which drops the
	// link when the link was there: put one back.
	repair := func() {
		a, aerr := os.Lstat(allowed)
		l, lerr := os.Lstat(link)
		if aerr == nil && lerr == nil && a.Mode().IsRegular() && l.Mode().IsRegular() {
			os.Remove(link)
			os.Symlink("sibling.txt", link)
		}
	}
	swapRace(t, dir, "allowed.txt", "sibling.txt", repair, func(i int) (string, error) {
		env := &tools.Env{Grants: grants, WorkDir: dir, Limits: writeTool.Declaration().ResourceLimits, Stager: stageNow{}}
		defer env.Close()
		w := env.FS("filesystem.write")
		var err error
		switch i % 3 {
		case 0:
			err = w.WriteFile(allowed, []byte("written"), 0o644)
		case 1:
			var f *tools.File
			if f, err = w.OpenFile(allowed, os.O_RDWR, 0); err == nil {
				_, err = f.WriteAt([]byte("over"), 0)
				f.Close()
			}
		case 2:
			_, err = writeTool.Execute(context.Background(), env, in)
		}
		if b, rerr := os.ReadFile(sibling); rerr != nil || string(b) != "SECRET" {
			return fmt.Sprintf("the sibling now holds %q (%v)", b, rerr), err
		}
		return "", err
	})
}

// Listings are not led elsewhere by a swapped-in link: neither for a
// granted directory (the place is opened without following a link, and
// listed through that descriptor) nor for a granted file (which is not a
// directory, and is never followed to one).
func TestFS_ListSwapRace(t *testing.T) {
	listTool := tools.FileList()
	for _, tc := range []struct{ name, granted string }{
		{"directory grant", "allowed"},
		{"file grant", "allowed.txt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			secret := filepath.Join(dir, "secret")
			if err := os.MkdirAll(filepath.Join(dir, "allowed"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(secret, 0o755); err != nil {
				t.Fatal(err)
			}
			for _, p := range []string{"allowed/a.txt", "allowed.txt", "secret/s3cr3t.txt"} {
				if err := os.WriteFile(filepath.Join(dir, p), []byte("x"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			granted := filepath.Join(dir, tc.granted)
			grants := []capability.Capability{{Name: "filesystem.read", Scope: granted}}
			in, _ := json.Marshal(tools.FileListInput{Path: granted, Recursive: true})
			swapRace(t, dir, tc.granted, "secret", nil, func(int) (string, error) {
				env := &tools.Env{Grants: grants, WorkDir: dir, Limits: listTool.Declaration().ResourceLimits}
				defer env.Close()
				es, err := env.FS("filesystem.read").ReadDir(granted)
				for _, e := range es {
					if e.Name() == "s3cr3t.txt" {
						return "ReadDir listed " + e.Name(), err
					}
				}
				out, err2 := listTool.Execute(context.Background(), env, in)
				if strings.Contains(string(out), "s3cr3t") {
					return "file.list returned " + string(out), err2
				}
				return "", errors.Join(err, err2)
			})
		})
	}
}
