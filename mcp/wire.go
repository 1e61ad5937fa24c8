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
	if m := decodeWireFast(data); m != nil {
		return m, nil
	}
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

// decodeWireFast decodes the common message without reflection: valid
// JSON, an object whose keys are exactly jsonrpc ("2.0"), id (a string or
// a number), method (a string), params and result. Anything else (an
// error member, another key, a key in another case or escaped) returns
// nil, for decodeWire to decide.
func decodeWireFast(data []byte) *wireMsg {
	if len(data) < 2 || data[0] != '{' || !json.Valid(data) {
		return nil
	}
	m := &wireMsg{}
	for i := skipSpace(data, 1); i < len(data) && data[i] != '}'; {
		k := i
		if i = skipString(data, i); i < 0 {
			return nil
		}
		key := data[k:i]
		i = skipSpace(data, i)
		v := skipSpace(data, i+1)
		if i = skipValue(data, v); i < 0 {
			return nil
		}
		val := json.RawMessage(data[v:i])
		switch string(key) {
		case `"jsonrpc"`:
			if string(val) != `"2.0"` {
				return nil
			}
			m.VersionTag = "2.0"
		case `"id"`:
			if c := val[0]; c != '"' && c != '-' && (c < '0' || c > '9') && string(val) != "null" {
				return nil
			}
			m.ID = val
		case `"method"`:
			if val[0] != '"' {
				return nil
			}
			m.Method = val
		case `"params"`:
			m.Params = val
		case `"result"`:
			m.Result = val
		default:
			return nil
		}
		if i = skipSpace(data, i); i < len(data) && data[i] == ',' {
			i = skipSpace(data, i+1)
		}
	}
	if m.VersionTag == "" || (len(m.Method) == 0 && (len(m.ID) == 0 || string(m.ID) == "null")) {
		return nil
	}
	return m
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

// tag is tagMessage of a decoded message. It splices the tag into the
// params' _meta (adding a _meta when there is none) without decoding and
// encoding the params again: data is valid JSON (decodeWire read it), and
// only the top level of params is walked. The tag is one string,
// "SESSION ID" (the session is hex, so the first space ends it). A message
// whose params are not an object, whose name is not a string, or whose
// _meta is not an object is passed on untagged, for the SDK to refuse.
func (s *Server) tag(m *wireMsg, session string) []byte {
	if string(m.Method) != `"tools/call"` {
		return nil
	}
	id, ok := idString(m.ID)
	if !ok {
		return nil
	}
	p := m.Params
	if len(p) < 2 || p[0] != '{' {
		return nil
	}
	meta, named := -1, false // where the _meta object starts; name is a string
	for i := skipSpace(p, 1); i < len(p) && p[i] != '}'; {
		k := i
		if i = skipString(p, i); i < 0 {
			return nil
		}
		key := p[k:i]
		if i = skipSpace(p, i); i >= len(p) || p[i] != ':' {
			return nil
		}
		v := skipSpace(p, i+1)
		if i = skipValue(p, v); i < 0 {
			return nil
		}
		switch string(key) {
		case `"_meta"`:
			if p[v] != '{' {
				return nil
			}
			meta = v // the decoders keep the last of duplicate keys
		case `"name"`:
			named = p[v] == '"'
		}
		if i = skipSpace(p, i); i < len(p) && p[i] == ',' {
			i = skipSpace(p, i+1)
		}
	}
	if !named {
		return nil // the SDK refuses it, quoting the params: without the key
	}
	entry := make([]byte, 0, 64+len(id))
	entry = append(entry, '"')
	entry = append(entry, s.tagKey...)
	entry = append(entry, `":`...)
	entry = appendJSONString(entry, session+" "+id)
	var b bytes.Buffer
	b.Grow(len(p) + len(entry) + len(m.ID) + 64)
	b.WriteString(`{"jsonrpc":"2.0","id":`)
	b.Write(m.ID)
	b.WriteString(`,"method":"tools/call","params":`)
	at := meta + 1
	if meta < 0 {
		at = 1
	}
	b.Write(p[:at])
	if meta < 0 {
		b.WriteString(`"_meta":{`)
		b.Write(entry)
		b.WriteByte('}')
	} else {
		b.Write(entry)
	}
	if rest := skipSpace(p, at); rest < len(p) && p[rest] != '}' {
		b.WriteByte(',')
	}
	b.Write(p[at:])
	b.WriteByte('}')
	return b.Bytes()
}

// The JSON walkers below read valid JSON only (decodeWire checked it); each
// returns the index just past what it read, or -1.

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

func skipString(b []byte, i int) int {
	if i >= len(b) || b[i] != '"' {
		return -1
	}
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return -1
}

func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				if i = skipString(b, i); i < 0 {
					return -1
				}
				i--
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
		return -1
	}
	for ; i < len(b); i++ { // a number, true, false or null
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i
		}
	}
	return i
}

// appendJSONString appends s as a JSON string.
func appendJSONString(b []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always encodes
	return append(b, q...)
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
