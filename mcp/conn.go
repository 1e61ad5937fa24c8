package mcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// lineTransport is the stdio framing (one JSON-RPC message per line) read
// and written here rather than by the SDK's IOTransport, for three reasons:
//
//   - the SDK's reader hands the handler no JSON-RPC id; this one puts the
//     id of each tools/call into its _meta (see tag);
//   - the SDK's reader ends the session on a line it cannot take (not
//     JSON, a batch, a line over the limit); this one answers such a line
//     with the protocol's error and reads on;
//   - the SDK decodes each message three times (as a batch, as a message,
//     its method), each decode allocating a 32 KiB buffer: that garbage
//     was most of an MCP call's cost. This one decodes once, without
//     reflection for the common message (decodeWireFast).
//
// Everything above the framing (sessions, methods, progress, cancellation,
// elicitation) is the SDK's: Connect returns an sdk.Connection.
type lineTransport struct {
	s       *Server
	r       io.ReadCloser
	w       io.WriteCloser
	session string
	max     int // the longest line taken, in bytes
}

func (t *lineTransport) Connect(context.Context) (sdk.Connection, error) {
	c := &lineConn{
		t:        t,
		incoming: make(chan readResult),
		closed:   make(chan struct{}),
	}
	go c.readLoop()
	return c, nil
}

type readResult struct {
	msg jsonrpc.Message
	err error
}

// lineConn is a connection of lineTransport. Reads come from one
// goroutine, so that Close unblocks a Read at once (a read of stdin
// cannot be interrupted).
type lineConn struct {
	t         *lineTransport
	incoming  chan readResult
	closed    chan struct{}
	closeOnce sync.Once
	closeErr  error
	wmu       sync.Mutex
	wbuf      []byte
}

func (c *lineConn) SessionID() string { return "" }

func (c *lineConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case r := <-c.incoming:
		return r.msg, r.err
	case <-c.closed:
		return nil, io.EOF
	}
}

func (c *lineConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if r, ok := msg.(*jsonrpc.Response); ok && r.Error != nil {
		msg = c.t.s.cleanError(r)
	}
	data, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return fmt.Errorf("encoding a message: %v", err)
	}
	return c.writeLine(data)
}

// writeLine writes data and a newline in one write: a message is never
// interleaved with another.
func (c *lineConn) writeLine(data []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.wbuf = append(append(c.wbuf[:0], data...), '\n')
	_, err := c.t.w.Write(c.wbuf)
	if cap(c.wbuf) > 64<<10 {
		c.wbuf = nil // do not hold on to a large result's buffer
	}
	return err
}

func (c *lineConn) Close() error {
	c.closeOnce.Do(func() {
		close(c.closed)
		c.closeErr = errors.Join(c.t.r.Close(), c.t.w.Close())
	})
	return c.closeErr
}

// readLoop reads lines until the input ends or the connection closes,
// passing on each message and answering each line that is not one.
func (c *lineConn) readLoop() {
	br := bufio.NewReaderSize(c.t.r, 64<<10)
	for {
		line, over, err := readLine(br, c.t.max)
		var msg jsonrpc.Message
		switch {
		case over:
			c.refuse(prefixID(line), jsonrpc.CodeInvalidRequest,
				fmt.Sprintf("invalid request: a message is longer than %d bytes", c.t.max))
		case len(line) > 0:
			msg = c.decode(line)
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

// readLine reads the next line, without its end and surrounding space.
// A line longer than max is read to its end and dropped: over is true and
// line holds its first max bytes.
func readLine(br *bufio.Reader, max int) (line []byte, over bool, err error) {
	for {
		chunk, err := br.ReadSlice('\n')
		if !over {
			line = append(line, chunk...)
			n := len(line) // not counting the line's end, \n or \r\n
			if n > 0 && line[n-1] == '\n' {
				if n--; n > 0 && line[n-1] == '\r' {
					n--
				}
			}
			if n > max {
				line, over = line[:max], true
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if over {
			return line, true, err
		}
		return bytes.TrimSpace(line), false, err
	}
}

// decode makes a message of a line, or answers the line with the
// protocol's error and returns nil.
func (c *lineConn) decode(line []byte) jsonrpc.Message {
	code, text := int64(jsonrpc.CodeParseError), "parse error: not JSON"
	switch {
	case line[0] == '[' && json.Valid(line):
		// JSON-RPC batches left MCP in 2025-06-18.
		code, text = jsonrpc.CodeInvalidRequest, "invalid request: batches are not supported; send one message per line"
	case line[0] == '{':
		m, err := decodeWire(line)
		if err == nil {
			var msg jsonrpc.Message
			if msg, err = c.message(m); err == nil {
				return msg
			}
		}
		var pe *paramsError
		switch {
		case errors.As(err, &pe):
			code, text = jsonrpc.CodeInvalidParams, pe.Error()
		case json.Valid(line):
			code, text = jsonrpc.CodeInvalidRequest, "invalid request: "+err.Error()
		}
	case json.Valid(line):
		code, text = jsonrpc.CodeInvalidRequest, "invalid request: a message is a JSON object"
	}
	var probe struct {
		ID json.RawMessage `json:"id"`
	}
	json.Unmarshal(line, &probe)
	c.refuse(probe.ID, code, text)
	return nil
}

// message is the SDK's form of a decoded message; a tools/call request
// gets its tag.
func (c *lineConn) message(m *wireMsg) (jsonrpc.Message, error) {
	id, err := makeID(m.ID)
	if err != nil {
		return nil, err
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
		return nil, errors.New("the method is a string")
	}
	params := m.Params
	if method == "tools/call" && id.IsValid() {
		if err := checkCallParams(params); err != nil {
			return nil, err
		}
		if tagged := c.t.s.tagParams(params, idText(id), c.t.session); tagged != nil {
			params = tagged
		}
	}
	return &jsonrpc.Request{ID: id, Method: method, Params: params}, nil
}

// refuse answers a line that is not a message: with its id when one could
// be read, else null.
func (c *lineConn) refuse(id json.RawMessage, code int64, text string) {
	if !validID(id) {
		id = json.RawMessage("null")
	}
	out := mustJSON(map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{"code": code, "message": text}})
	c.writeLine(out)
}

func validID(id json.RawMessage) bool {
	return len(id) > 0 && (id[0] == '"' || id[0] == '-' || id[0] >= '0' && id[0] <= '9') && json.Valid(id)
}

// errID refuses an id that is not a string or an integer (MCP's
// RequestId): the SDK makes any number an int64, so that 1.5 was answered
// and recorded as 1, and 1e300 as -9223372036854775808, the answer naming
// another request than the one asked. An integer beyond ±2^53 is refused
// too: it does not survive a float64.
var errID = errors.New("an id is a string or an integer (at most 2^53 in magnitude)")

// makeID is the id as the SDK's decoder reads it: absent or null is none,
// a string stays a string, an integer is made an int64; any other number
// is refused (errID).
func makeID(raw json.RawMessage) (jsonrpc.ID, error) {
	switch {
	case len(raw) == 0 || string(raw) == "null":
		return jsonrpc.ID{}, nil
	case raw[0] == '"':
		s, err := unquote(raw)
		if err != nil {
			return jsonrpc.ID{}, errID
		}
		return jsonrpc.MakeID(s)
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return jsonrpc.ID{}, errID
	}
	return jsonrpc.MakeID(f)
}

// idText is an id as the call id records it.
func idText(id jsonrpc.ID) string {
	switch v := id.Raw().(type) {
	case string:
		return v
	case int64:
		return strconv.FormatInt(v, 10)
	}
	return ""
}

// unquote decodes a JSON string; one without escapes is only sliced.
func unquote(raw json.RawMessage) (string, error) {
	if len(raw) >= 2 && raw[0] == '"' && raw[len(raw)-1] == '"' && bytes.IndexByte(raw[1:len(raw)-1], '\\') < 0 && bytes.IndexByte(raw[1:len(raw)-1], '"') < 0 {
		return string(raw[1 : len(raw)-1]), nil
	}
	var s string
	err := json.Unmarshal(raw, &s)
	return s, err
}

// prefixID reads the id of a message from its first bytes (the rest did
// not fit): the top-level "id" member, when it comes whole before the cut.
func prefixID(b []byte) json.RawMessage {
	b = bytes.TrimLeft(b, " \t\r\n")
	var id json.RawMessage
	members(b, func(key []byte, v, end int) bool {
		if end >= len(b) { // cut inside the value
			return false
		}
		if string(key) == `"id"` {
			id = json.RawMessage(b[v:end])
			return false
		}
		return true
	})
	return id
}
