package mcp

import "testing"

func BenchmarkTagMessage(b *testing.B) {
	s := &Server{tagKey: "io.toolgate/rpc-0123456789abcdef"}
	msg := []byte(`{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"name":"test.noop","arguments":{}}}`)
	for range b.N {
		if s.tagMessage(msg, "0123456789abcdef") == nil {
			b.Fatal("not tagged")
		}
	}
}
