package tools

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// openNoLinks (openat2 with RESOLVE_NO_SYMLINKS) and walkNoLinks, its
// fallback where the kernel has no openat2, agree: a symbolic link in any
// component is ELOOP, a non-directory where one is needed ENOTDIR.
func TestOpenNoLinks_WalkAgrees(t *testing.T) {
	base := t.TempDir()
	if err := os.MkdirAll(filepath.Join(base, "d", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(base, "d", "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{"l": "d", "d/fl": "f", "d/dangling": "nope"} {
		if err := os.Symlink(target, filepath.Join(base, link)); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		path  string
		flags int
		want  error
	}{
		{"/", unix.O_PATH | unix.O_DIRECTORY, nil},
		{"d", unix.O_PATH | unix.O_DIRECTORY, nil},
		{"d/sub", unix.O_PATH, nil},
		{"d/f", unix.O_PATH, nil},
		{"d/f", unix.O_PATH | unix.O_DIRECTORY, unix.ENOTDIR},
		{"d/f/x", unix.O_PATH, unix.ENOTDIR},
		{"d/nope", unix.O_PATH, unix.ENOENT},
		{"l", unix.O_PATH, unix.ELOOP},
		{"l/sub", unix.O_PATH | unix.O_DIRECTORY, unix.ELOOP},
		{"d/fl", unix.O_PATH, unix.ELOOP},
		{"d/dangling", unix.O_PATH, unix.ELOOP},
	}
	for _, tt := range tests {
		p := tt.path
		if p != "/" {
			p = filepath.Join(base, p)
		}
		for name, open := range map[string]func(string, int) (int, error){"openat2": openNoLinks, "walk": walkNoLinks} {
			fd, err := open(p, tt.flags)
			if err == nil {
				var st, want unix.Stat_t
				unix.Fstat(fd, &st)
				unix.Close(fd)
				if err := unix.Lstat(p, &want); err != nil || st.Ino != want.Ino || st.Dev != want.Dev {
					t.Errorf("%s(%s) opened another file than %s", name, tt.path, p)
				}
			}
			if !errors.Is(err, tt.want) {
				t.Errorf("%s(%s, %#x) = %v; want %v", name, tt.path, tt.flags, err, tt.want)
			}
		}
	}
}
