package cli

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"syscall"
	"unsafe"
)

const (
	// maxAnswer bounds the line read for a y/n question.
	maxAnswer = 256
	// maxToken bounds the line 'serve --hash-token' reads.
	maxToken = 4 << 10
)

// errLineTooLong is a line longer than readLine's bound.
var errLineTooLong = errors.New("line too long")

// readLine reads one line of at most max bytes from r and returns it
// without its line ending ("\n" or "\r\n"). It reads at most max+2 bytes,
// so that endless input (/dev/zero) costs nothing: a longer line is
// errLineTooLong. A last line without a newline is a line; no input at all
// is io.EOF.
func readLine(r io.Reader, max int) (string, error) {
	br := bufio.NewReaderSize(io.LimitReader(r, int64(max)+2), max+2)
	line, err := br.ReadSlice('\n')
	switch {
	case errors.Is(err, bufio.ErrBufferFull):
		return "", errLineTooLong
	case errors.Is(err, io.EOF) && len(line) == 0:
		return "", io.EOF
	case err != nil && !errors.Is(err, io.EOF):
		return "", err
	}
	line = bytes.TrimSuffix(line, []byte("\n"))
	line = bytes.TrimSuffix(line, []byte("\r"))
	if len(line) > max {
		return "", errLineTooLong
	}
	return string(line), nil
}

// terminal reports whether the command can ask its user: stdin is a
// terminal (or the caller says so).
func (s Stdio) terminal() bool {
	if s.Terminal != nil {
		return s.Terminal()
	}
	f, ok := s.In.(*os.File)
	return ok && isTerminal(f)
}

// isTerminal reports whether f is a terminal: whether it answers TCGETS,
// as isatty(3) does. A character device is not enough: /dev/null and
// /dev/zero are character devices too. (The dependency policy keeps
// golang.org/x/sys/unix out of this package.)
func isTerminal(f *os.File) bool {
	sc, err := f.SyscallConn()
	if err != nil {
		return false
	}
	var errno syscall.Errno
	if err := sc.Control(func(fd uintptr) {
		var t syscall.Termios
		_, _, errno = syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TCGETS, uintptr(unsafe.Pointer(&t)))
	}); err != nil {
		return false
	}
	return errno == 0
}
