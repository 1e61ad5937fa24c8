package mcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
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
	if !members(data, lowercaseMember) {
		return nil, errMemberCase
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

// errMemberCase refuses a message with a member such as "Method" or
// "PARAMS": encoding/json (decodeWire) reads it as method or params, the
// SDK's decoder does not, so that a message could be one call here and
// another in the SDK (over HTTP the SDK reads the body itself).
var errMemberCase = errors.New("the members of a message are jsonrpc, id, method, params, result and error, in lowercase")

func lowercaseMember(key []byte, _, _ int) bool {
	k, err := unquote(json.RawMessage(key))
	if err != nil {
		return false
	}
	for _, name := range []string{"jsonrpc", "id", "method", "params", "result", "error"} {
		if k != name && strings.EqualFold(k, name) {
			return false
		}
	}
	return true
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
	ok := members(data, func(key []byte, v, end int) bool {
		val := json.RawMessage(data[v:end])
		switch string(key) {
		case `"jsonrpc"`:
			if string(val) != `"2.0"` {
				return false
			}
			m.VersionTag = "2.0"
		case `"id"`:
			if c := val[0]; c != '"' && c != '-' && (c < '0' || c > '9') && string(val) != "null" {
				return false
			}
			m.ID = val
		case `"method"`:
			if val[0] != '"' {
				return false
			}
			m.Method = val
		case `"params"`:
			m.Params = val
		case `"result"`:
			m.Result = val
		default:
			return false
		}
		return true
	})
	if !ok {
		return nil
	}
	if m.VersionTag == "" || (len(m.Method) == 0 && (len(m.ID) == 0 || string(m.ID) == "null")) {
		return nil
	}
	return m
}

// tagMessage puts the request id of a tools/call message into its _meta and
// returns the message re-encoded, or nil when data is anything else (or not
// valid JSON-RPC: the SDK answers that). The HTTP transport tags with it. A
// tools/call whose id is a number but not an integer (errID: the SDK would
// answer and record it under another id), or whose params the SDK could not
// decode (checkCallParams: its message would quote them and name Go types)
// is refused: a *wireRefusal.
func (s *Server) tagMessage(data []byte, session string) ([]byte, error) {
	if !bytes.Contains(data, []byte(`"tools/call"`)) && !bytes.Contains(data, []byte(`\`)) {
		return nil, nil // neither the method, nor one written with escapes
	}
	m, err := decodeWire(data)
	if errors.Is(err, errMemberCase) {
		return nil, &wireRefusal{code: jsonrpc.CodeInvalidRequest, msg: "invalid request: " + err.Error()}
	}
	if err != nil || len(m.Method) == 0 {
		return nil, nil
	}
	if method, err := unquote(m.Method); err != nil || method != "tools/call" {
		return nil, nil
	}
	id, err := makeID(m.ID)
	if err != nil {
		return nil, &wireRefusal{code: jsonrpc.CodeInvalidRequest, msg: "invalid request: " + err.Error()}
	}
	if !id.IsValid() {
		return nil, nil
	}
	if err := checkCallParams(m.Params); err != nil {
		return nil, &wireRefusal{id: m.ID, code: jsonrpc.CodeInvalidParams, msg: err.Error()}
	}
	p := s.tagParams(m.Params, idText(id), session)
	if p == nil {
		return nil, nil
	}
	var b bytes.Buffer
	b.Grow(len(p) + len(m.ID) + 64)
	b.WriteString(`{"jsonrpc":"2.0","id":`)
	b.Write(m.ID)
	b.WriteString(`,"method":"tools/call","params":`)
	b.Write(p)
	b.WriteByte('}')
	return b.Bytes(), nil
}

// tagParams returns the params of a tools/call with the tag spliced into
// their _meta (a _meta added when there is none), without decoding and
// encoding them again: p is valid JSON (decodeWire read it), and only its
// top level is walked. The tag is one string, "SESSION ID" (the session
// is hex, so the first space ends it). It goes last in the last _meta
// object (its key in any spelling): the decoders merge duplicate _meta
// objects and keep the last of duplicate keys, so a copy of the tag's key
// that a client wrote itself (had it learnt the key) loses to the server's.
// Params that are not an object, whose name is not a string, or whose
// _meta is not an object are not tagged (nil): the SDK refuses them.
func (s *Server) tagParams(p json.RawMessage, id, session string) json.RawMessage {
	meta, metaEnd, named := -1, -1, false // where the last _meta object starts and ends; name is a string
	walked := members(p, func(key []byte, v, end int) bool {
		name := key[1 : len(key)-1]
		if bytes.IndexByte(name, '\\') >= 0 { // as the decoders read it: "\u005fmeta" is _meta
			u, err := unquote(json.RawMessage(key))
			if err != nil {
				return false
			}
			name = []byte(u)
		}
		switch string(name) {
		case "_meta":
			if p[v] != '{' {
				return false
			}
			// The decoders merge duplicate _meta objects, a later key
			// overriding an earlier one: the tag goes last in the last.
			meta, metaEnd = v, end
		case "name":
			named = p[v] == '"'
		}
		return true
	})
	if !walked || !named {
		return nil // the SDK refuses it, quoting the params: without the key
	}
	b := make([]byte, 0, len(p)+len(s.tagKey)+len(session)+len(id)+32)
	tag := func(b []byte) []byte {
		b = append(b, '"')
		b = append(b, s.tagKey...)
		b = append(b, `":`...)
		return appendJSONString(b, session+" "+id)
	}
	if meta < 0 { // a _meta of its own, first
		b = append(b, p[:1]...)
		b = tag(append(b, `"_meta":{`...))
		b = append(b, '}')
		if rest := skipSpace(p, 1); rest < len(p) && p[rest] != '}' {
			b = append(b, ',')
		}
		return append(b, p[1:]...)
	}
	at := metaEnd - 1 // the _meta object's closing brace
	b = append(b, p[:at]...)
	if skipSpace(p, meta+1) < at { // not empty
		b = append(b, ',')
	}
	b = tag(b)
	return append(b, p[at:]...)
}

// maxParamsDepth is how deep the SDK's decoder lets params nest.
const maxParamsDepth = 1000

// paramsError is params of a tools/call that the SDK's decoder would
// refuse, said in the protocol's terms: the SDK's own message quotes the
// params whole (the tag with them) and names Go types.
type paramsError struct{ reason string }

func (e *paramsError) Error() string { return "invalid params: " + e.reason }

// checkCallParams refuses the params of a tools/call that the SDK could
// not decode (as sdk.CallToolParamsRaw, at most maxParamsDepth deep).
func checkCallParams(p json.RawMessage) error {
	if len(p) == 0 || string(p) == "null" {
		return nil // the SDK says params are required
	}
	if nestedDeeper(p, maxParamsDepth) {
		return &paramsError{fmt.Sprintf("the params nest deeper than %d levels", maxParamsDepth)}
	}
	if p[0] != '{' {
		return &paramsError{"the params of tools/call are a JSON object"}
	}
	if plainCallParams(p) {
		return nil
	}
	var v sdk.CallToolParamsRaw
	if err := json.Unmarshal(p, &v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return &paramsError{fmt.Sprintf("params.%s may not be a JSON %s", te.Field, te.Value)}
		}
		return &paramsError{"the params of tools/call are {name, arguments, _meta, inputResponses, requestState} with the types MCP gives them"}
	}
	return nil
}

// plainCallParams reports whether the params object p holds only the
// members of a common call, each of a type the SDK takes: name (a
// string), arguments (anything) and _meta (an object), their keys
// unescaped. Such params need no trial decode.
func plainCallParams(p []byte) bool {
	return members(p, func(key []byte, v, _ int) bool {
		switch string(key) {
		case `"name"`:
			return p[v] == '"'
		case `"_meta"`:
			return p[v] == '{'
		case `"arguments"`:
			return true
		}
		return false
	})
}

// members calls fn with each top-level member of the object p (valid
// JSON): its key as written, quotes included, and where its value starts
// and ends. It reports false when fn does, or when p is not an object.
func members(p []byte, fn func(key []byte, v, end int) bool) bool {
	if len(p) < 2 || p[0] != '{' {
		return false
	}
	for i := skipSpace(p, 1); i < len(p) && p[i] != '}'; {
		k := i
		if i = skipString(p, i); i < 0 {
			return false
		}
		key := p[k:i]
		if i = skipSpace(p, i); i >= len(p) || p[i] != ':' {
			return false
		}
		v := skipSpace(p, i+1)
		if i = skipValue(p, v); i < 0 || !fn(key, v, i) {
			return false
		}
		if i = skipSpace(p, i); i < len(p) && p[i] == ',' {
			i = skipSpace(p, i+1)
		}
	}
	return true
}

// nestedDeeper reports whether the JSON b nests objects and arrays deeper
// than max, as the SDK's decoder counts.
func nestedDeeper(b []byte, max int) bool {
	depth, inString, escaped := 0, false, false
	for _, c := range b {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			if depth++; depth > max {
				return true
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return false
}

// cleanError is an error response to send in place of r: the SDK's
// message for params it could not decode quotes the params whole (a
// tools/call's tag with them) and names Go types; it becomes a message in
// the protocol's terms. Any other error is sent as it is.
func (s *Server) cleanError(r *jsonrpc.Response) *jsonrpc.Response {
	msg := r.Error.Error()
	var code int64
	var we *jsonrpc.Error
	if errors.As(r.Error, &we) {
		code = we.Code
	}
	switch {
	case strings.Contains(msg, s.tagKey):
		if code == 0 {
			code = jsonrpc.CodeInternalError
		}
		return &jsonrpc.Response{ID: r.ID, Error: &jsonrpc.Error{Code: code, Message: "the request could not be handled"}}
	case strings.Contains(msg, "unmarshaling ") && (code == 0 || code == jsonrpc.CodeInvalidParams):
		// The SDK's message for params it could not decode (code 0 for
		// initialize's).
		return &jsonrpc.Response{ID: r.ID, Error: &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams,
			Message: "invalid params: the params do not have the types the protocol gives them"}}
	}
	return r
}

// wireRefusal is a message answered with the protocol's error rather than
// handed to the SDK: its id (nil for none), code and message.
type wireRefusal struct {
	id   json.RawMessage
	code int64
	msg  string
}

func (r *wireRefusal) Error() string { return r.msg }

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
