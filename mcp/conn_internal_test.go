package mcp

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// readLine: a line of exactly max bytes (its end not counted) is taken, a
// longer one is dropped to its end and the next line read whole, whatever
// the buffer's size.
func TestReadLine(t *testing.T) {
	const max = 10
	in := strings.Repeat("a", max) + "\r\n" + // max, CRLF
		strings.Repeat("b", max+1) + "\n" + // one over
		strings.Repeat("c", 40) + "\n" + // over, across buffer fills
		"  {} \n" +
		"last" // no newline at the end
	br := bufio.NewReaderSize(strings.NewReader(in), 16)
	type want struct {
		line string
		over bool
	}
	for i, w := range []want{
		{strings.Repeat("a", max), false},
		{strings.Repeat("b", max), true},
		{strings.Repeat("c", max), true},
		{"{}", false},
		{"last", false},
	} {
		line, over, err := readLine(br, max)
		if string(line) != w.line || over != w.over {
			t.Errorf("line %d: %q over=%v, want %q over=%v", i, line, over, w.line, w.over)
		}
		if i < 4 && err != nil || i == 4 && !errors.Is(err, io.EOF) {
			t.Errorf("line %d: err %v", i, err)
		}
	}
}

// prefixID finds the id of a cut message only when it came whole.
func TestPrefixID(t *testing.T) {
	for in, want := range map[string]string{
		`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"na`: `7`,
		` { "method" : "x", "id" : "a\"b" , "params":[1,2`:            `"a\"b"`,
		`{"jsonrpc":"2.0","params":{"x":"y"},"id":-3,"meth`:           `-3`,
		`{"jsonrpc":"2.0","method":"tools/call","params":{"name":"t`:  ``, // the id comes after the cut
		`{"jsonrpc":"2.0","id":12`:                                    ``, // the id itself is cut
		`{"jsonrpc":"2.0","id":"ab`:                                   ``,
		`[{"id":1}`:                                                   ``,
		`garbage`:                                                     ``,
		``:                                                            ``,
		`{"params":{"id":5,"x":"`:                                     ``, // not the top level
	} {
		if got := string(prefixID([]byte(in))); got != want {
			t.Errorf("prefixID(%s) = %q, want %q", in, got, want)
		}
	}
}

// makeID reads an id as the SDK's decoder does; idText is how the call id
// records it.
func TestMakeID(t *testing.T) {
	for raw, want := range map[string]any{
		``: nil, `null`: nil, `7`: int64(7), `-2`: int64(-2), `7.0`: int64(7), `1e3`: int64(1000),
		`"x"`: "x", `"a\u0020b"`: "a b", `""`: "",
	} {
		id, err := makeID(json.RawMessage(raw))
		if err != nil || id.Raw() != want {
			t.Errorf("makeID(%s) = %v, %v; want %v", raw, id.Raw(), err, want)
		}
	}
	for _, raw := range []string{`true`, `{}`, `[1]`, `"unterminated`} {
		if _, err := makeID(json.RawMessage(raw)); err == nil {
			t.Errorf("makeID(%s): no error", raw)
		}
	}
	if got := idText(jsonrpc.ID{}); got != "" {
		t.Errorf("idText of no id = %q", got)
	}
}

// message turns each kind of line into the SDK's message: a request
// (tagged when it is a tools/call with an id), a notification, a result,
// an error response.
func TestLineConn_Message(t *testing.T) {
	c := &lineConn{t: &lineTransport{s: &Server{tagKey: "io.toolgate/rpc-k"}, session: "s1"}}
	decode := func(line string) jsonrpc.Message {
		t.Helper()
		m, err := decodeWire([]byte(line))
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		msg, err := c.message(m)
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		return msg
	}
	req, ok := decode(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"t"}}`).(*jsonrpc.Request)
	if !ok || req.Method != "tools/call" || req.ID.Raw() != int64(3) {
		t.Fatalf("tools/call: %#v", req)
	}
	var p struct {
		Meta map[string]string `json:"_meta"`
	}
	if err := json.Unmarshal(req.Params, &p); err != nil || p.Meta["io.toolgate/rpc-k"] != "s1 3" {
		t.Errorf("tools/call params %s: the tag is missing", req.Params)
	}
	if n, ok := decode(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}}`).(*jsonrpc.Request); !ok || n.ID.IsValid() || n.Method != "notifications/cancelled" || string(n.Params) != `{"requestId":3}` {
		t.Errorf("notification: %#v", n)
	}
	if n, ok := decode(`{"jsonrpc":"2.0","method":"tools/call","params":{"name":"t"}}`).(*jsonrpc.Request); !ok || strings.Contains(string(n.Params), "rpc-k") {
		t.Errorf("a tools/call without an id was tagged: %#v", n)
	}
	if r, ok := decode(`{"jsonrpc":"2.0","id":"e1","result":{"action":"accept"}}`).(*jsonrpc.Response); !ok || r.ID.Raw() != "e1" || r.Error != nil || string(r.Result) != `{"action":"accept"}` {
		t.Errorf("result: %#v", r)
	}
	r, ok := decode(`{"jsonrpc":"2.0","id":4,"error":{"code":-32601,"message":"no such method"}}`).(*jsonrpc.Response)
	var we *jsonrpc.Error
	if !ok || !errors.As(r.Error, &we) || we.Code != -32601 || we.Message != "no such method" {
		t.Errorf("error response: %#v", r)
	}
}
