package tools

import (
	"io"
	"os"
	"time"

	"github.com/toolgate/toolgate/internal/proc"
)

// MCPProcess is a stdio MCP server that Start started, bounded as the
// process tools are (the bounded process tools document, 004): an argv and
// no shell, the command resolved in the search path, only the environment
// the file gives it, its own process group killed as a whole when it is
// closed or when its leader exits (no process of it outlives it), and
// RLIMIT_AS and RLIMIT_FSIZE when the file's limits give max_memory and
// max_file_size. Read reads what the server writes on its standard output;
// Write writes its standard input.
type MCPProcess struct {
	p *proc.Process
}

// Start starts a stdio server (Command set); stderr receives its standard
// error (nil discards it). A limit that cannot be enforced refuses the
// start.
func (s *MCPServer) Start(stderr io.Writer) (*MCPProcess, error) {
	path, err := s.CommandPath()
	if err != nil {
		return nil, err
	}
	env, err := s.Environ()
	if err != nil {
		return nil, err
	}
	p, err := proc.Start(proc.StartSpec{
		Path: path, Args: s.Args, Env: env, Stderr: stderr,
		MaxMemory: s.MaxMemory, MaxFileSize: s.MaxFileSize, Grace: 2 * time.Second,
	})
	if err != nil {
		return nil, err
	}
	return &MCPProcess{p: p}, nil
}

// Pid is the server's process id, which is also its process group's.
func (m *MCPProcess) Pid() int { return m.p.Pid }

func (m *MCPProcess) Read(b []byte) (int, error)  { return m.p.Read(b) }
func (m *MCPProcess) Write(b []byte) (int, error) { return m.p.Write(b) }

// Close closes the server's standard input, lets it exit for 2 seconds,
// then kills its process group, and waits for it; safe to call more than
// once, concurrently.
func (m *MCPProcess) Close() error { return m.p.Close() }

// Done is closed once the server has exited and its group was killed.
func (m *MCPProcess) Done() <-chan struct{} { return m.p.Done() }

// State is how the server's process ended; it waits for Done.
func (m *MCPProcess) State() *os.ProcessState { return m.p.State() }
