package mcp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// upstreamTransport is the stdio framing of the gateway's connection to an
// upstream server (one JSON-RPC message per line), read here rather than by
// the SDK's IOTransport for the reason lineTransport is: the SDK's reader
// scans each message, then decodes it twice (as a batch, then as a
// message), each decode allocating a 32 KiB buffer. This one decodes each
// line once (decodeWire), without reflection for the common message.
//
// What it takes is what the SDK's reader takes on a protocol without
// batches: one JSON-RPC message per line. Anything else from the server (a
// line that is not a message, a batch, a line over max bytes) ends the
// connection, as the SDK's reader ends it: the call in flight is a
// ResourceError and the next call starts the server again.
type upstreamTransport struct {
	rw  io.ReadWriteCloser // the server's standard output and input
	max int                // the longest line taken, in bytes
}

func (t *upstreamTransport) Connect(context.Context) (sdk.Connection, error) {
	c := &upstreamConn{rw: t.rw, max: t.max, incoming: make(chan readResult), closed: make(chan struct{})}
	go c.readLoop()
	return c, nil
}

// upstreamConn is a connection of upstreamTransport. Reads come from one
// goroutine, so that Close unblocks a Read at once.
type upstreamConn struct {
	rw        io.ReadWriteCloser
	max       int
	incoming  chan readResult
	closed    chan struct{}
	closeOnce sync.Once
	closeErr  error
	wmu       sync.Mutex
	wbuf      []byte
}

func (c *upstreamConn) SessionID() string { return "" }

func (c *upstreamConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case r := <-c.incoming:
		return r.msg, r.err
	case <-c.closed:
		return nil, io.EOF
	}
}

func (c *upstreamConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	data, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return fmt.Errorf("encoding a message: %v", err)
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.wbuf = append(append(c.wbuf[:0], data...), '\n') // one write: never interleaved
	_, err = c.rw.Write(c.wbuf)
	if cap(c.wbuf) > 64<<10 {
		c.wbuf = nil // do not hold on to a large request's buffer
	}
	return err
}

func (c *upstreamConn) Close() error {
	c.closeOnce.Do(func() {
		close(c.closed)
		c.closeErr = c.rw.Close()
	})
	return c.closeErr
}

// readLoop reads lines until the input ends, a line is not a message, or
// the connection closes; the first error is the last thing it passes on.
func (c *upstreamConn) readLoop() {
	br := bufio.NewReaderSize(c.rw, 64<<10)
	for {
		line, over, err := readLine(br, c.max)
		var msg jsonrpc.Message
		switch {
		case over:
			err = fmt.Errorf("the server sent a message longer than %d bytes", c.max)
		case len(line) > 0:
			var derr error
			if msg, derr = upstreamMessage(line); derr != nil {
				msg, err = nil, derr
			}
		}
		if msg != nil {
			select {
			case c.incoming <- readResult{msg: msg}:
			case <-c.closed:
				return
			}
		}
		if err != nil {
			select {
			case c.incoming <- readResult{err: err}:
			case <-c.closed:
			}
			return
		}
	}
}

// upstreamMessage is the SDK's form of one line from the server.
func upstreamMessage(line []byte) (jsonrpc.Message, error) {
	if line[0] == '[' {
		return nil, errors.New("the server sent a JSON-RPC batch; MCP has none since 2025-06-18")
	}
	m, err := decodeWire(line)
	if err != nil {
		return nil, fmt.Errorf("the server sent a line that is not a JSON-RPC message: %v", err)
	}
	id, err := makeID(m.ID)
	if err != nil {
		return nil, fmt.Errorf("the server sent a message with a bad id: %v", err)
	}
	if len(m.Method) == 0 {
		resp := &jsonrpc.Response{ID: id, Result: m.Result}
		if m.Error != nil {
			resp.Error = m.Error // not a typed nil
		}
		return resp, nil
	}
	method, err := unquote(m.Method)
	if err != nil {
		return nil, errors.New("the server sent a message whose method is not a string")
	}
	return &jsonrpc.Request{ID: id, Method: method, Params: m.Params}, nil
}
