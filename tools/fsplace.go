package tools

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// place is a granted place, opened once for an attempt: a directory,
// reached through an os.Root at it, or a file, reached by its name in the
// directory holding it and opened without following a link.
//
// The place's own path is opened following no symbolic link at all (a
// grant's links were followed when the grant was made, see
// capability.Resolve), and the os.Root is checked to be the very directory
// that link-free open found, so a link swapped in for the place, or for any
// directory above it, is refused rather than followed.
type place struct {
	path string   // absolute and link-free
	root *os.Root // the directory; for a file, the directory holding it
	dir  *os.File // for a file: root's directory (O_PATH), to open the file from
	file string   // for a file: its name in root; "" for a directory
}

// openPlace opens the place at the absolute path p for the handle of
// capability capName.
func openPlace(capName, p string) (*place, error) {
	fd, err := openNoLinks(p, unix.O_PATH)
	if err != nil {
		return nil, placeError(capName, p, err)
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.IsDir() {
		r, err := openRootAt(capName, p, fi)
		if err != nil {
			return nil, err
		}
		return &place{path: p, root: r}, nil
	}
	dirPath := filepath.Dir(p)
	dfd, err := openNoLinks(dirPath, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return nil, placeError(capName, dirPath, err)
	}
	dir := os.NewFile(uintptr(dfd), dirPath)
	dfi, err := dir.Stat()
	if err != nil {
		dir.Close()
		return nil, err
	}
	r, err := openRootAt(capName, dirPath, dfi)
	if err != nil {
		dir.Close()
		return nil, err
	}
	return &place{path: p, root: r, dir: dir, file: filepath.Base(p)}, nil
}

// openRootAt opens an os.Root at the directory p and checks that it is the
// directory want describes (found by a link-free open): os.OpenRoot itself
// would follow a link swapped in meanwhile.
func openRootAt(capName, p string, want fs.FileInfo) (*os.Root, error) {
	r, err := os.OpenRoot(p)
	if err != nil {
		return nil, err
	}
	got, err := r.Stat(".")
	if err != nil {
		r.Close()
		return nil, err
	}
	if !os.SameFile(got, want) {
		r.Close()
		return nil, &AccessError{Capability: capName + ":" + p,
			Reason: "the granted place changed while it was being opened (a symbolic link was swapped in)"}
	}
	return r, nil
}

func (p *place) close() error {
	var err error
	if p.dir != nil {
		err = p.dir.Close()
	}
	return errors.Join(err, p.root.Close())
}

// within returns the root and the name in it that rel, a path below the
// place, is reached by.
func (p *place) within(rel string) (*os.Root, string) {
	if p.file != "" {
		return p.root, p.file
	}
	return p.root, rel
}

// openFile opens rel below the place as os.OpenFile would: below a
// directory through its os.Root (which follows a link only while it stays
// inside), the granted file itself with O_NOFOLLOW, so the one descriptor
// checked is the one read or written.
func (p *place) openFile(capName, rel string, flag int, perm fs.FileMode) (*os.File, error) {
	if p.file == "" {
		return p.root.OpenFile(rel, flag, perm)
	}
	rc, err := p.dir.SyscallConn()
	if err != nil {
		return nil, err
	}
	var fd int
	cerr := rc.Control(func(dirfd uintptr) { // holds the directory open across the call
		for {
			fd, err = unix.Openat(int(dirfd), p.file, flag|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(perm.Perm()))
			if err != unix.EINTR {
				return
			}
		}
	})
	if cerr != nil {
		return nil, cerr
	}
	if errors.Is(err, unix.ELOOP) {
		return nil, fileIsLink(capName, p.path)
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: p.path, Err: err}
	}
	return os.NewFile(uintptr(fd), p.path), nil
}

// stat describes rel below the place as FS.Stat does; the granted file
// itself must not be a symbolic link.
func (p *place) stat(capName, rel string) (fs.FileInfo, error) {
	if p.file == "" {
		return p.root.Stat(rel)
	}
	fi, err := p.root.Lstat(p.file)
	if err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		return nil, fileIsLink(capName, p.path)
	}
	return fi, err
}

func fileIsLink(capName, p string) error {
	return &AccessError{Capability: capName + ":" + p,
		Reason: "the granted file is a symbolic link now; a grant's links are followed only when the grant is made"}
}

// placeError explains why the place p could not be opened: a symbolic
// link in its path is an *AccessError naming the link.
func placeError(capName, p string, err error) error {
	if !errors.Is(err, unix.ELOOP) {
		return &os.PathError{Op: "open", Path: p, Err: err}
	}
	link := p
	for q := p; ; q = filepath.Dir(q) {
		if fi, lerr := os.Lstat(q); lerr == nil && fi.Mode()&fs.ModeSymlink != 0 {
			link = q
		}
		if q == filepath.Dir(q) {
			break
		}
	}
	what := fmt.Sprintf("%s is a symbolic link", link)
	if target, rerr := os.Readlink(link); rerr == nil {
		what += " (to " + target + ")"
	}
	return &AccessError{Capability: capName + ":" + p,
		Reason: "the granted place passes through a symbolic link: " + what +
			"; a grant's links are followed only when the grant is made (toolgate policy check shows where it leads)"}
}

// openNoLinks opens the absolute path p with flags (O_PATH, optionally
// O_DIRECTORY), following no symbolic link in any of its components: a
// link is unix.ELOOP. It is openat2 with RESOLVE_NO_SYMLINKS where the
// kernel has it (Linux 5.6), else a walk of the path (walkNoLinks).
func openNoLinks(p string, flags int) (int, error) {
	how := unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Resolve: unix.RESOLVE_NO_SYMLINKS}
	for {
		fd, err := unix.Openat2(unix.AT_FDCWD, p, &how)
		switch err {
		case unix.EINTR, unix.EAGAIN:
			continue
		case unix.ENOSYS, unix.EPERM:
			// Not here (EPERM is how some seccomp filters refuse a system
			// call they do not know): walk instead.
			return walkNoLinks(p, flags)
		}
		return fd, err
	}
}

// walkNoLinks is openNoLinks one component at a time, each opened
// relative to the descriptor of its parent with O_NOFOLLOW, so no
// component can be swapped between the check and the use.
func walkNoLinks(p string, flags int) (int, error) {
	if !filepath.IsAbs(p) {
		return -1, unix.EINVAL
	}
	fd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	comps := strings.Split(strings.Trim(filepath.Clean(p), "/"), "/")
	for i, c := range comps {
		if c == "" {
			continue
		}
		nfd, err := unix.Openat(fd, c, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			return -1, err
		}
		var st unix.Stat_t
		if err := unix.Fstat(nfd, &st); err != nil {
			unix.Close(nfd)
			return -1, err
		}
		last := i == len(comps)-1
		switch {
		case st.Mode&unix.S_IFMT == unix.S_IFLNK:
			err = unix.ELOOP
		case (!last || flags&unix.O_DIRECTORY != 0) && st.Mode&unix.S_IFMT != unix.S_IFDIR:
			err = unix.ENOTDIR
		}
		if err != nil {
			unix.Close(nfd)
			return -1, err
		}
		fd = nfd
	}
	return fd, nil
}
