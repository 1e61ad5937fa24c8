package tools_test

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/tools"
)

// fsTree is a temporary directory laid out as:
//
//	base/secret.txt                 outside every grant
//	base/data/file.txt              "inside"
//	base/data/sub/nested.txt        "nested"
//	base/data/link -> ../secret.txt           relative symlink escaping the root
//	base/data/abslink -> base/secret.txt      absolute symlink escaping the root
//	base/data/dirlink -> ..                   directory symlink escaping the root
//	base/data/dblink -> ../database/x.txt     symlink into the prefix-sharing sibling
//	base/data/inlink -> sub/nested.txt        symlink staying inside
//	base/data/sub/uplink -> ../file.txt       symlink going up but staying inside
//	base/database/x.txt             sibling sharing the prefix "data"
type fsTree struct {
	base, data, database string
}

func newFSTree(t *testing.T) fsTree {
	t.Helper()
	base := t.TempDir()
	tr := fsTree{base: base, data: filepath.Join(base, "data"), database: filepath.Join(base, "database")}
	write := func(rel, content string) {
		p := filepath.Join(base, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("secret.txt", "secret")
	write("data/file.txt", "inside")
	write("data/sub/nested.txt", "nested")
	write("database/x.txt", "database")
	link := func(target, rel string) {
		if err := os.Symlink(target, filepath.Join(base, rel)); err != nil {
			t.Skipf("symbolic links unavailable: %v", err)
		}
	}
	link("../secret.txt", "data/link")
	link(filepath.Join(base, "secret.txt"), "data/abslink")
	link("..", "data/dirlink")
	link("../database/x.txt", "data/dblink")
	link("sub/nested.txt", "data/inlink")
	link("../file.txt", "data/sub/uplink")
	return tr
}

func fsRead(name, scope string) capability.Capability {
	return capability.Capability{Name: name, Scope: scope}
}

func readAll(t *testing.T, f *os.File) string {
	t.Helper()
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatalf("read %s: %v", f.Name(), err)
	}
	return string(b)
}

func wantAccessError(t *testing.T, err error) *tools.AccessError {
	t.Helper()
	var ae *tools.AccessError
	if !errors.As(err, &ae) {
		t.Fatalf("err = %v (%T); want *AccessError", err, err)
	}
	if !errors.Is(err, tools.ErrAccessDenied) {
		t.Errorf("errors.Is(%v, ErrAccessDenied) = false", err)
	}
	if !strings.HasPrefix(ae.Capability, "filesystem.read:") {
		t.Errorf("Capability = %q; want it to name filesystem.read and the path", ae.Capability)
	}
	if ae.Reason == "" {
		t.Errorf("Reason is empty")
	}
	return ae
}

func TestFS_Open(t *testing.T) {
	tr := newFSTree(t)
	env := &tools.Env{
		Grants:  []capability.Capability{fsRead("filesystem.read", tr.data)},
		WorkDir: tr.data,
	}
	t.Cleanup(func() { env.Close() })
	fsys := env.FS("filesystem.read")

	tests := []struct {
		name    string
		path    string
		want    string // content when allowed
		denied  bool   // *AccessError
		notFind bool   // fs.ErrNotExist
	}{
		{name: "relative", path: "file.txt", want: "inside"},
		{name: "relative with dot", path: "./file.txt", want: "inside"},
		{name: "absolute", path: filepath.Join(tr.data, "file.txt"), want: "inside"},
		{name: "nested", path: "sub/nested.txt", want: "nested"},
		{name: "dotdot staying inside", path: "sub/../file.txt", want: "inside"},
		{name: "symlink inside", path: "inlink", want: "nested"},
		{name: "symlink up but inside", path: "sub/uplink", want: "inside"},
		{name: "missing inside", path: "nope.txt", notFind: true},

		{name: "dotdot out", path: "../secret.txt", denied: true},
		{name: "dotdot to sibling", path: "../database/x.txt", denied: true},
		{name: "sibling absolute", path: filepath.Join(tr.base, "secret.txt"), denied: true},
		{name: "parent dir", path: tr.base, denied: true},
		{name: "etc passwd", path: "/etc/passwd", denied: true},
		{name: "root", path: "/", denied: true},
		{name: "prefix confusion", path: filepath.Join(tr.database, "x.txt"), denied: true},
		{name: "prefix confusion dir", path: tr.database, denied: true},
		{name: "symlink escaping", path: "link", denied: true},
		{name: "absolute symlink escaping", path: "abslink", denied: true},
		{name: "through directory symlink", path: "dirlink/secret.txt", denied: true},
		{name: "symlink into prefix sibling", path: "dblink", denied: true},
		{name: "absolute path to escaping symlink", path: filepath.Join(tr.data, "link"), denied: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := fsys.Open(tt.path)
			switch {
			case tt.denied:
				if err == nil {
					got := readAll(t, f)
					t.Fatalf("Open(%q) read %q; want *AccessError", tt.path, got)
				}
				wantAccessError(t, err)
			case tt.notFind:
				if !errors.Is(err, fs.ErrNotExist) {
					t.Fatalf("Open(%q) = %v; want fs.ErrNotExist", tt.path, err)
				}
				if errors.Is(err, tools.ErrAccessDenied) {
					t.Errorf("a missing file inside the grant is not an access error: %v", err)
				}
			default:
				if err != nil {
					t.Fatalf("Open(%q): %v", tt.path, err)
				}
				if got := readAll(t, f); got != tt.want {
					t.Errorf("Open(%q) read %q; want %q", tt.path, got, tt.want)
				}
			}
		})
	}
}

func TestFS_Stat(t *testing.T) {
	tr := newFSTree(t)
	env := &tools.Env{Grants: []capability.Capability{fsRead("filesystem.read", tr.data)}, WorkDir: tr.data}
	t.Cleanup(func() { env.Close() })
	fsys := env.FS("filesystem.read")

	fi, err := fsys.Stat("file.txt")
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() != int64(len("inside")) || !fi.Mode().IsRegular() {
		t.Errorf("Stat(file.txt) = size %d mode %v", fi.Size(), fi.Mode())
	}
	if fi, err := fsys.Stat("sub"); err != nil || !fi.IsDir() {
		t.Errorf("Stat(sub) = %v, %v; want a directory", fi, err)
	}
	for _, p := range []string{"link", "abslink", "dirlink/secret.txt", "../secret.txt", "/etc/passwd", filepath.Join(tr.database, "x.txt")} {
		t.Run(p, func(t *testing.T) {
			fi, err := fsys.Stat(p)
			if err == nil {
				t.Fatalf("Stat(%q) = %v; want *AccessError", p, fi.Name())
			}
			wantAccessError(t, err)
		})
	}
}

func TestEnv_FS_grants(t *testing.T) {
	tr := newFSTree(t)
	secret := filepath.Join(tr.base, "secret.txt")
	tests := []struct {
		name    string
		grants  []capability.Capability
		workDir string
		path    string
		want    string // "" means *AccessError
	}{
		{name: "no grant", path: filepath.Join(tr.data, "file.txt")},
		{name: "grant of another name", grants: []capability.Capability{fsRead("filesystem.write", tr.data)},
			path: filepath.Join(tr.data, "file.txt")},
		{name: "grant of a longer name", grants: []capability.Capability{fsRead("filesystem.readwrite", tr.data)},
			path: filepath.Join(tr.data, "file.txt")},
		{name: "unscoped grant allows anything", grants: []capability.Capability{{Name: "filesystem.read"}},
			path: secret, want: "secret"},
		{name: "unscoped grant follows symlinks anywhere", grants: []capability.Capability{{Name: "filesystem.read"}},
			path: filepath.Join(tr.data, "link"), want: "secret"},
		{name: "unscoped grant with relative path", grants: []capability.Capability{{Name: "filesystem.read"}},
			workDir: tr.data, path: "../secret.txt", want: "secret"},
		{name: "granted file itself", grants: []capability.Capability{fsRead("filesystem.read", secret)},
			path: secret, want: "secret"},
		{name: "granted file, neighbour refused", grants: []capability.Capability{fsRead("filesystem.read", secret)},
			path: filepath.Join(tr.base, "secret.txt2")},
		{name: "granted file is an escaping symlink", grants: []capability.Capability{fsRead("filesystem.read", filepath.Join(tr.data, "link"))},
			path: filepath.Join(tr.data, "link")},
		{name: "granted file is a symlink", grants: []capability.Capability{fsRead("filesystem.read", filepath.Join(tr.data, "inlink"))},
			path: filepath.Join(tr.data, "inlink")},
		{name: "grant with trailing slash", grants: []capability.Capability{fsRead("filesystem.read", tr.data+"/")},
			path: filepath.Join(tr.data, "file.txt"), want: "inside"},
		{name: "grant with trailing slash, sibling refused", grants: []capability.Capability{fsRead("filesystem.read", tr.data+"/")},
			path: filepath.Join(tr.database, "x.txt")},
		{name: "relative grant against WorkDir", grants: []capability.Capability{fsRead("filesystem.read", "data")},
			workDir: tr.base, path: "data/file.txt", want: "inside"},
		{name: "relative grant, outside refused", grants: []capability.Capability{fsRead("filesystem.read", "data")},
			workDir: tr.base, path: "secret.txt"},
		{name: "two grants, second matches", grants: []capability.Capability{fsRead("filesystem.read", tr.database), fsRead("filesystem.read", tr.data)},
			path: filepath.Join(tr.data, "sub", "nested.txt"), want: "nested"},
		// With both base and data granted, the longest scope (data) is used,
		// yet base still grants the secret directly.
		{name: "nested grants", grants: []capability.Capability{fsRead("filesystem.read", tr.base), fsRead("filesystem.read", tr.data)},
			path: secret, want: "secret"},
		{name: "nested grants, inside the longest", grants: []capability.Capability{fsRead("filesystem.read", tr.base), fsRead("filesystem.read", tr.data)},
			path: filepath.Join(tr.data, "file.txt"), want: "inside"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := &tools.Env{Grants: tt.grants, WorkDir: tt.workDir}
			t.Cleanup(func() { env.Close() })
			f, err := env.FS("filesystem.read").Open(tt.path)
			if tt.want == "" {
				if err == nil {
					t.Fatalf("Open(%q) read %q; want *AccessError", tt.path, readAll(t, f))
				}
				wantAccessError(t, err)
				return
			}
			if err != nil {
				t.Fatalf("Open(%q): %v", tt.path, err)
			}
			if got := readAll(t, f); got != tt.want {
				t.Errorf("read %q; want %q", got, tt.want)
			}
		})
	}
}

func TestEnv_Close(t *testing.T) {
	tr := newFSTree(t)
	env := &tools.Env{Grants: []capability.Capability{fsRead("filesystem.read", tr.data)}, WorkDir: tr.data}
	fsys := env.FS("filesystem.read")

	// A file opened before Close stays readable; Close releases the roots.
	f, err := fsys.Open("file.txt")
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if got := readAll(t, f); got != "inside" {
		t.Errorf("read %q from a file opened before Close", got)
	}

	for _, p := range []string{"file.txt", "sub/nested.txt"} {
		if f, err := fsys.Open(p); err == nil {
			f.Close()
			t.Errorf("Open(%q) after Close = nil error", p)
		}
		if _, err := fsys.Stat(p); err == nil {
			t.Errorf("Stat(%q) after Close = nil error", p)
		}
		if f, err := env.FS("filesystem.read").Open(p); err == nil {
			f.Close()
			t.Errorf("a new FS handle opened %q after Close", p)
		}
	}
	if err := env.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestEnv_Close_unused(t *testing.T) {
	var env tools.Env
	if err := env.Close(); err != nil {
		t.Fatalf("Close of an unused Env: %v", err)
	}
	if f, err := env.FS("filesystem.read").Open("/"); err == nil {
		f.Close()
		t.Fatal("Open after Close = nil error")
	}
}

func TestFS_Open_concurrent(t *testing.T) {
	tr := newFSTree(t)
	env := &tools.Env{
		Grants:  []capability.Capability{fsRead("filesystem.read", tr.data), fsRead("filesystem.read", tr.database)},
		WorkDir: tr.data,
	}
	t.Cleanup(func() { env.Close() })
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for range 20 {
				fsys := env.FS("filesystem.read")
				p := "file.txt"
				if i%2 == 1 {
					p = filepath.Join(tr.database, "x.txt")
				}
				f, err := fsys.Open(p)
				if err != nil {
					t.Errorf("Open(%q): %v", p, err)
					return
				}
				f.Close()
				if _, err := fsys.Open("link"); !errors.Is(err, tools.ErrAccessDenied) {
					t.Errorf("Open(link) = %v; want ErrAccessDenied", err)
				}
			}
		})
	}
	wg.Wait()
}

// A grant names a place. Its symbolic links are followed once, when the
// grant is made (capability.Resolve: a policy is built, a per-call grant
// decided), and the handle then reaches that place by its link-free path,
// following no link in it: a link later swapped in for the place (or a
// directory above it) is refused, and retargeting the granted link changes
// nothing for a grant already made. A grant never resolved is its own
// place: a link in it is refused, for a directory as for a file.
func TestFS_GrantIsSymlink(t *testing.T) {
	base := t.TempDir()
	for p, content := range map[string]string{"real/f.txt": "real", "other/f.txt": "other", "t.txt": "target", "o.txt": "o"} {
		p = filepath.Join(base, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	at := func(p string) string { return filepath.Join(base, p) }
	symlink := func(target, name string) {
		t.Helper()
		os.Remove(at(name))
		if err := os.Symlink(target, at(name)); err != nil {
			t.Fatal(err)
		}
	}
	symlink("real", "dlink")  // a granted directory that is a link
	symlink("t.txt", "flink") // a granted file that is a link
	symlink(".", "alias")     // a link above the granted directory
	read := func(g capability.Capability, p string) (string, error) {
		env := &tools.Env{Grants: []capability.Capability{g}, WorkDir: base}
		defer env.Close()
		f, err := env.FS("filesystem.read").Open(p)
		if err != nil {
			return "", err
		}
		defer f.Close()
		b, err := io.ReadAll(f)
		return string(b), err
	}
	grant := func(scope string) capability.Capability {
		return capability.Capability{Name: "filesystem.read", Scope: at(scope)}
	}
	check := func(name string, g capability.Capability, p, want string) {
		t.Helper()
		got, err := read(g, at(p))
		switch {
		case want == "" && !errors.Is(err, tools.ErrAccessDenied):
			t.Errorf("%s: Open(%s) = %q, %v; want an access error", name, p, got, err)
		case want != "" && (err != nil || got != want):
			t.Errorf("%s: Open(%s) = %q, %v; want %q", name, p, got, err, want)
		}
	}

	// Never resolved: the scope is the place, and a link in it is refused.
	check("unresolved directory link", grant("dlink"), "dlink/f.txt", "")
	check("unresolved file link", grant("flink"), "flink", "")
	check("unresolved, link above", grant("alias/real"), "alias/real/f.txt", "")
	check("unresolved, the target is not granted", grant("dlink"), "real/f.txt", "")

	// Resolved when made: the place is where the links led, named either way.
	dir, file, above := capability.Resolve(grant("dlink")), capability.Resolve(grant("flink")), capability.Resolve(grant("alias/real"))
	if dir.Place != at("real") || file.Place != at("t.txt") || above.Place != at("real") {
		t.Fatalf("Resolve: places %q, %q, %q", dir.Place, file.Place, above.Place)
	}
	check("resolved directory link", dir, "dlink/f.txt", "real")
	check("resolved directory link, by its place", dir, "real/f.txt", "real")
	check("resolved file link", file, "flink", "target")
	check("resolved file link, by its place", file, "t.txt", "target")
	check("resolved file link, a neighbour", file, "o.txt", "")
	check("resolved, link above", above, "alias/real/f.txt", "real")

	// Retargeting the granted links does not move a grant already made.
	symlink("other", "dlink")
	symlink("o.txt", "flink")
	check("retargeted directory link", dir, "dlink/f.txt", "real")
	check("retargeted file link", file, "flink", "target")
	if got, err := read(capability.Resolve(grant("dlink")), at("dlink/f.txt")); err != nil || got != "other" {
		t.Errorf("a grant made after the retarget: %q, %v; want other", got, err)
	}

	// A link swapped in for the place itself is refused, not followed.
	if err := os.Rename(at("real"), at("real.old")); err != nil {
		t.Fatal(err)
	}
	symlink("other", "real")
	if err := os.Rename(at("t.txt"), at("t.old")); err != nil {
		t.Fatal(err)
	}
	symlink("o.txt", "t.txt")
	check("place swapped for a link", dir, "dlink/f.txt", "")
	check("file place swapped for a link", file, "flink", "")
	_, err := read(dir, at("dlink/f.txt"))
	if ae := wantAccessError(t, err); !strings.Contains(ae.Reason, "symbolic link") {
		t.Errorf("Reason = %q; want it to say a symbolic link is in the way", ae.Reason)
	}
}
