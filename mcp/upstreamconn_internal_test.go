package mcp

import (
	"context"
	"encoding/json"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/tools"
)

// fakeServer is the server's side of an upstream connection: what the
// test writes to in is what the connection reads; what the connection
// writes lands in out.
type fakeServer struct {
	in     *io.PipeWriter
	r      *io.PipeReader
	out    strings.Builder
	closed bool
}

func newFakeServer() *fakeServer {
	r, w := io.Pipe()
	return &fakeServer{in: w, r: r}
}

func (f *fakeServer) Read(p []byte) (int, error)  { return f.r.Read(p) }
func (f *fakeServer) Write(p []byte) (int, error) { return f.out.Write(p) }
func (f *fakeServer) Close() error {
	f.closed = true
	f.r.Close()
	return nil
}

func upstreamConnOver(t *testing.T, f *fakeServer, max int) sdk.Connection {
	t.Helper()
	c, err := (&upstreamTransport{rw: f, max: max}).Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// What a server sends reaches the SDK as the messages its own reader
// makes: responses (a result, an error), requests and notifications; what
// the SDK writes goes out as one line per message.
func TestUpstreamConn_Messages(t *testing.T) {
	f := newFakeServer()
	c := upstreamConnOver(t, f, 1<<20)
	go func() {
		f.in.Write([]byte(`{"jsonrpc":"2.0","id":1,"result":{"content":[],"structuredContent":{"echoed":"hi"}}}` + "\n"))
		f.in.Write([]byte(`{"jsonrpc":"2.0","id":"s-2","error":{"code":-32602,"message":"no such tool"}}` + "\r\n"))
		f.in.Write([]byte(`{"jsonrpc":"2.0","id":7,"method":"elicitation/create","params":{"message":"approve?"}}` + "\n\n"))
		f.in.Write([]byte(`  {"jsonrpc":"2.0","method":"notifications/tools/list_changed"}  ` + "\n"))
	}()
	ctx := context.Background()
	read := func() jsonrpc.Message {
		t.Helper()
		m, err := c.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	if r, ok := read().(*jsonrpc.Response); !ok || r.ID.Raw() != int64(1) || r.Error != nil || string(r.Result) != `{"content":[],"structuredContent":{"echoed":"hi"}}` {
		t.Errorf("result: %#v", r)
	}
	if r, ok := read().(*jsonrpc.Response); !ok || r.ID.Raw() != "s-2" || r.Result != nil {
		t.Errorf("error response: %#v", r)
	} else if we, ok := r.Error.(*jsonrpc.Error); !ok || we.Code != -32602 || we.Message != "no such tool" {
		t.Errorf("error response's error: %#v", r.Error)
	}
	if r, ok := read().(*jsonrpc.Request); !ok || r.ID.Raw() != int64(7) || r.Method != "elicitation/create" || string(r.Params) != `{"message":"approve?"}` {
		t.Errorf("request: %#v", r)
	}
	if r, ok := read().(*jsonrpc.Request); !ok || r.ID.IsValid() || r.Method != "notifications/tools/list_changed" || r.Params != nil {
		t.Errorf("notification: %#v", r)
	}

	id, err := jsonrpc.MakeID(float64(3))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Write(ctx, &jsonrpc.Request{ID: id, Method: "tools/call", Params: json.RawMessage(`{"name":"echo"}`)}); err != nil {
		t.Fatal(err)
	}
	if got, want := f.out.String(), `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo"}}`+"\n"; got != want {
		t.Errorf("wrote %q, want %q", got, want)
	}
	if err := c.Close(); err != nil || !f.closed {
		t.Errorf("Close: %v, server closed %v", err, f.closed)
	}
	if _, err := c.Read(ctx); err != io.EOF {
		t.Errorf("Read after Close: %v, want EOF", err)
	}
}

// A line that is not one JSON-RPC message ends the connection, as the
// SDK's reader ends it, with an error that says what came: the call in
// flight is a ResourceError, and the next call starts the server again.
func TestUpstreamConn_Ends(t *testing.T) {
	for _, tc := range []struct{ line, want string }{
		{`[{"jsonrpc":"2.0","id":1,"result":{}}]`, "a JSON-RPC batch"},
		{`hello from the server`, "not a JSON-RPC message"},
		{`{"jsonrpc":"2.0","id":1,"result":{}`, "not a JSON-RPC message"},
		{`{"jsonrpc":"1.0","id":1,"result":{}}`, "not a JSON-RPC message"},
		{`{"jsonrpc":"2.0","result":{}}`, "not a JSON-RPC message"},
		{`{"jsonrpc":"2.0","id":1.5,"result":{}}`, "bad id"},
		{`{"jsonrpc":"2.0","id":1,"Result":{}}`, "not a JSON-RPC message"},
		{`{"jsonrpc":"2.0","id":1,"result":"` + strings.Repeat("x", 100) + `"}`, "longer than 64 bytes"},
	} {
		f := newFakeServer()
		c := upstreamConnOver(t, f, 64)
		go f.in.Write([]byte(tc.line + "\n" + `{"jsonrpc":"2.0","id":2,"result":{}}` + "\n"))
		_, err := c.Read(context.Background())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.line, err, tc.want)
			continue
		}
		// Nothing after it is read: the connection is over (the SDK
		// closes it on the error).
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		if m, err := c.Read(ctx); err != context.DeadlineExceeded {
			t.Errorf("%s: read %#v, %v after the error", tc.line, m, err)
		}
		cancel()
	}
}

// The point of upstreamTransport: reading a server's answer allocates a
// fraction of what the SDK's own reader does (a 32 KiB buffer per decode,
// two decodes per message, TestUpstreamConn_Messages reads what it reads).
func TestUpstreamConn_Garbage(t *testing.T) {
	const n = 200
	line := []byte(`{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"{\"echoed\":\"hello\"}"}],"structuredContent":{"echoed":"hello"}}}` + "\n")
	perRead := func(c sdk.Connection, f *fakeServer) uint64 {
		go func() {
			for range n + 1 {
				f.in.Write(line)
			}
		}()
		ctx := context.Background()
		if _, err := c.Read(ctx); err != nil { // the first: buffers made once
			t.Fatal(err)
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range n {
			if _, err := c.Read(ctx); err != nil {
				t.Fatal(err)
			}
		}
		runtime.ReadMemStats(&after)
		return (after.TotalAlloc - before.TotalAlloc) / n
	}
	f := newFakeServer()
	ours := perRead(upstreamConnOver(t, f, 1<<20), f)
	g := newFakeServer()
	sc, err := (&sdk.IOTransport{Reader: g, Writer: g}).Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	sdks := perRead(sc, g)
	t.Logf("bytes allocated per message read: %d here, %d by the SDK's reader", ours, sdks)
	if ours*4 > sdks {
		t.Errorf("reading a message allocates %d bytes, the SDK's reader %d: not a quarter of it", ours, sdks)
	}
}

// The gateway reads a stdio server through upstreamTransport, bounded by
// the server's maxMessage.
func TestUpstream_StdioTransport(t *testing.T) {
	u := &upstream{decl: tools.MCPServer{Name: "cat", Command: "/bin/cat"}, gw: NewGateway(nil)}
	tr, closer, err := u.transport()
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	if ut, ok := tr.(*upstreamTransport); !ok || ut.max != u.maxMessage() || ut.rw == nil {
		t.Errorf("the transport of a stdio server is %#v, not an upstreamTransport bounded by %d", tr, u.maxMessage())
	}
}
