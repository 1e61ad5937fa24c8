package cli

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/server"
)

func TestReadLine(t *testing.T) {
	cases := []struct {
		in   string
		want string
		err  error
	}{
		{"y\n", "y", nil},
		{"y\r\n", "y", nil},
		{"y", "y", nil},
		{"yes\nmore\n", "yes", nil},
		{"\n", "", nil},
		{"", "", io.EOF},
		{strings.Repeat("a", 8) + "\n", strings.Repeat("a", 8), nil},
		{strings.Repeat("a", 8) + "\r\n", strings.Repeat("a", 8), nil},
		{strings.Repeat("a", 8), strings.Repeat("a", 8), nil},
		{strings.Repeat("a", 9) + "\n", "", errLineTooLong},
		{strings.Repeat("a", 9), "", errLineTooLong},
		{strings.Repeat("a", 100), "", errLineTooLong},
	}
	for _, tc := range cases {
		got, err := readLine(strings.NewReader(tc.in), 8)
		if got != tc.want || !errors.Is(err, tc.err) {
			t.Errorf("readLine(%q, 8) = %q, %v; want %q, %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

// endless is stdin that never ends (as /dev/zero): it counts what is read
// and gives up after a MiB, so that an unbounded reader fails the test
// instead of eating the machine's memory.
type endless struct {
	b    byte
	read int
}

func (e *endless) Read(p []byte) (int, error) {
	if e.read >= 1<<20 {
		return 0, errors.New("endless: read a MiB without stopping")
	}
	p = p[:min(len(p), 1<<20-e.read)]
	for i := range p {
		p[i] = e.b
	}
	e.read += len(p)
	return len(p), nil
}

// Only a terminal is a terminal: not /dev/null or /dev/zero (character
// devices), a pipe or a file.
func TestStdio_Terminal(t *testing.T) {
	pr, pw, err := os.Pipe()
	must(t, err)
	defer pr.Close()
	defer pw.Close()
	file, err := os.Create(filepath.Join(t.TempDir(), "f"))
	must(t, err)
	defer file.Close()
	for _, name := range []string{os.DevNull, "/dev/zero"} {
		f, err := os.Open(name)
		if err != nil {
			t.Skip(err)
		}
		defer f.Close()
		if (Stdio{In: f}).terminal() {
			t.Errorf("%s is taken for a terminal", name)
		}
	}
	for _, f := range []*os.File{pr, file} {
		if (Stdio{In: f}).terminal() {
			t.Errorf("%s is taken for a terminal", f.Name())
		}
	}
	if (Stdio{In: strings.NewReader("y\n")}).terminal() {
		t.Error("a reader is taken for a terminal")
	}
	// The master side of a pseudo-terminal answers TCGETS.
	if ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0); err == nil {
		defer ptmx.Close()
		if !(Stdio{In: ptmx}).terminal() {
			t.Error("a pseudo-terminal is not taken for a terminal")
		}
	}
}

// 'intent approve' on a terminal that types forever reads one bounded
// line. (With /dev/zero on stdin it does not read at all: that is no
// terminal, see TestStdio_Terminal.)
func TestIntentApprove_EndlessStdin(t *testing.T) {
	workdir(t)
	id, _ := propose(t, "file.read", "--input", `{"path":"hello.txt"}`)
	var out, errb strings.Builder
	in := &endless{b: 'y'}
	code := Main(t.Context(), []string{"intent", "approve", id}, Stdio{In: in, Out: &out, Err: &errb, Terminal: func() bool { return true }})
	if code != ExitDenied || !strings.Contains(errb.String(), "not approved") {
		t.Fatalf("approve on an endless terminal: exit %d\n%s", code, errb.String())
	}
	if in.read > 2*maxAnswer {
		t.Fatalf("approve read %d bytes of stdin for a y/n answer", in.read)
	}
	if r := toolgate(t, "", "intent", "list", "--status", "pending"); !strings.Contains(r.stdout, id) {
		t.Fatal("the intent is no longer pending")
	}
}

// 'serve --hash-token' reads one bounded line.
func TestServe_HashTokenBounded(t *testing.T) {
	workdir(t)
	in := &endless{b: 'a'}
	var out, errb strings.Builder
	code := Main(t.Context(), []string{"serve", "--hash-token"}, Stdio{In: in, Out: &out, Err: &errb})
	if code != ExitUsage || !strings.Contains(errb.String(), "longer than 4096 bytes") || out.Len() != 0 {
		t.Fatalf("endless token: exit %d %q %q", code, out.String(), errb.String())
	}
	if in.read > 2*maxToken {
		t.Fatalf("--hash-token read %d bytes of stdin", in.read)
	}
	tok := strings.Repeat("t", maxToken)
	if r := toolgate(t, tok+"\n", "serve", "--hash-token"); r.code != 0 || strings.TrimSpace(r.stdout) != server.HashToken(tok) {
		t.Errorf("a %d-byte token: exit %d %q", maxToken, r.code, r.stderr)
	}
	if r := toolgate(t, tok+"t\n", "serve", "--hash-token"); r.code != ExitUsage {
		t.Errorf("a %d-byte token: exit %d", maxToken+1, r.code)
	}
	for _, in := range []string{"", "\n"} {
		if r := toolgate(t, in, "serve", "--hash-token"); r.code != ExitUsage || !strings.Contains(r.stderr, "no token") {
			t.Errorf("stdin %q: exit %d %q", in, r.code, r.stderr)
		}
	}
}
