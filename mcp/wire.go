package mcp

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// The SDK does not hand a tool handler the JSON-RPC id of its request. The
// transports of this package read it off the wire instead: a tools/call
// request gets the id (and the session) in its _meta, under a key that is
// random per Server, so that a client cannot forge it.

type tag struct {
	ID      string `json:"id"`
	Session string `json:"session,omitempty"`
}

// wireMsg is a JSON-RPC message as the SDK's decoder reads it
// (jsonrpc.DecodeMessage), decoded here with encoding/json: the SDK's
// decoder allocates a large buffer per message, and every message is
// decoded by the SDK once more anyway.
type wireMsg struct {
	VersionTag string          `json:"jsonrpc"`
	ID         json.RawMessage `json:"id"`
	Method     json.RawMessage `json:"method"`
	Params     json.RawMessage `json:"params"`
	Result     json.RawMessage `json:"result"`
	Error      *jsonrpc.Error  `json:"error"`
}

// decodeWire decodes one message, refusing what the SDK's decoder refuses.
func decodeWire(data []byte) (*wireMsg, error) {
	var m wireMsg
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, errors.New("not a JSON-RPC message: " + err.Error())
	}
	if m.VersionTag != "2.0" {
		return nil, fmt.Errorf("invalid message version tag %q; expected \"2.0\"", m.VersionTag)
	}
	if id := string(m.ID); id != "" && id != "null" && id[0] != '"' && id[0] != '-' && (id[0] < '0' || id[0] > '9') {
		return nil, errors.New("an id is a string or a number")
	}
	if len(m.Method) > 0 {
		var method string
		if err := json.Unmarshal(m.Method, &method); err != nil {
			return nil, errors.New("the method is a string")
		}
		return &m, nil
	}
	if len(m.ID) == 0 || string(m.ID) == "null" {
		return nil, errors.New("a message without a method is a response, which needs an id")
	}
	return &m, nil
}

// idString is an id as the SDK reads it: a string, or a number made an
// int64.
func idString(raw json.RawMessage) (string, bool) {
	switch {
	case len(raw) == 0 || string(raw) == "null":
		return "", false
	case raw[0] == '"':
		var s string
		return s, json.Unmarshal(raw, &s) == nil
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil {
		return "", false
	}
	return strconv.FormatInt(int64(f), 10), true
}

// tagMessage puts the request id of a tools/call message into its _meta and
// returns the message re-encoded, or nil when data is anything else (or not
// valid JSON-RPC: the SDK answers that).
func (s *Server) tagMessage(data []byte, session string) []byte {
	if !bytes.Contains(data, []byte(`"tools/call"`)) {
		return nil
	}
	m, err := decodeWire(data)
	if err != nil {
		return nil
	}
	return s.tag(m, session)
}

// tag is tagMessage of a decoded message.
func (s *Server) tag(m *wireMsg, session string) []byte {
	if string(m.Method) != `"tools/call"` {
		return nil
	}
	id, ok := idString(m.ID)
	if !ok {
		return nil
	}
	var params map[string]json.RawMessage
	if json.Unmarshal(m.Params, &params) != nil || params == nil {
		return nil
	}
	var name string
	if json.Unmarshal(params["name"], &name) != nil {
		return nil // the SDK refuses it, quoting the params: without the key
	}
	meta := map[string]json.RawMessage{}
	if raw, ok := params["_meta"]; ok {
		if json.Unmarshal(raw, &meta) != nil || meta == nil {
			return nil
		}
	}
	meta[s.tagKey] = mustJSON(tag{ID: id, Session: session})
	params["_meta"] = mustJSON(meta)
	var b bytes.Buffer
	b.WriteString(`{"jsonrpc":"2.0","id":`)
	b.Write(m.ID)
	b.WriteString(`,"method":"tools/call","params":`)
	b.Write(mustJSON(params))
	b.WriteByte('}')
	return b.Bytes()
}

func mustJSON(v any) json.RawMessage {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(err) // maps of raw JSON that decoded a moment ago
	}
	return bytes.TrimRight(b.Bytes(), "\n")
}

// tagReader passes newline-delimited JSON-RPC through, tagging tools/call
// requests. A line longer than max passes through untouched (the SDK's
// reader refuses it). A line that is not JSON-RPC is answered here with
// the protocol's error (parse error, invalid request) and dropped: the
// SDK's reader would end the session on it.
type tagReader struct {
	s       *Server
	src     io.ReadCloser
	w       *lockedWriter
	br      *bufio.Reader
	session string
	max     int
	pending []byte
	through bool // passing the rest of an overlong line through
	err     error
}

func newTagReader(s *Server, src io.ReadCloser, w *lockedWriter, session string, max int) *tagReader {
	return &tagReader{s: s, src: src, w: w, br: bufio.NewReaderSize(src, 64<<10), session: session, max: max}
}

// lockedWriter serializes writes: the SDK's (one whole message per Write)
// and the errors tagReader answers.
type lockedWriter struct {
	mu sync.Mutex
	w  io.WriteCloser
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lockedWriter) Close() error { return l.w.Close() }

// check decodes a line; one that is not a JSON-RPC message is answered
// with the protocol's error (ok false).
func (t *tagReader) check(line []byte) (m *wireMsg, ok bool) {
	if len(line) == 0 {
		return nil, true
	}
	code, msg := int64(jsonrpc.CodeParseError), "parse error: not JSON"
	switch {
	case line[0] == '[' && json.Valid(line):
		// JSON-RPC batches left MCP in 2025-06-18, and the SDK's reader
		// ends the session on one it cannot take.
		code, msg = jsonrpc.CodeInvalidRequest, "invalid request: batches are not supported; send one message per line"
	case line[0] == '{':
		m, err := decodeWire(line)
		if err == nil {
			return m, true
		}
		if json.Valid(line) {
			code, msg = jsonrpc.CodeInvalidRequest, "invalid request: "+err.Error()
		}
	case json.Valid(line):
		code, msg = jsonrpc.CodeInvalidRequest, "invalid request: a message is a JSON object"
	}
	var id json.RawMessage = json.RawMessage("null")
	var probe struct {
		ID json.RawMessage `json:"id"`
	}
	if json.Unmarshal(line, &probe) == nil && len(probe.ID) > 0 && (probe.ID[0] == '"' || probe.ID[0] == '-' || probe.ID[0] >= '0' && probe.ID[0] <= '9') {
		id = probe.ID
	}
	out := mustJSON(map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{"code": code, "message": msg}})
	t.w.Write(append(out, '\n'))
	return nil, false
}

func (t *tagReader) Read(p []byte) (int, error) {
	for len(t.pending) == 0 {
		if t.err != nil {
			return 0, t.err
		}
		t.fill()
	}
	n := copy(p, t.pending)
	t.pending = t.pending[n:]
	return n, nil
}

// fill reads the next line (or a piece of an overlong one) into pending.
func (t *tagReader) fill() {
	if t.through {
		chunk, err := t.br.ReadSlice('\n')
		t.pending = append(t.pending[:0], chunk...)
		if err == nil || !errors.Is(err, bufio.ErrBufferFull) {
			t.through = false
			t.err = err
		}
		return
	}
	var line []byte
	for {
		chunk, err := t.br.ReadSlice('\n')
		line = append(line, chunk...)
		if errors.Is(err, bufio.ErrBufferFull) {
			if len(line) > t.max {
				t.pending, t.through = line, true
				return
			}
			continue
		}
		if err != nil {
			t.err = err
		}
		break
	}
	switch msg, ok := t.check(bytes.TrimSpace(line)); {
	case !ok:
		line = nil
	case msg != nil:
		if tagged := t.s.tag(msg, t.session); tagged != nil {
			line = append(tagged, '\n')
		}
	}
	t.pending = line
}

func (t *tagReader) Close() error { return t.src.Close() }
