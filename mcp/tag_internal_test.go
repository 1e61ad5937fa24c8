package mcp

import (
	"encoding/json"
	"reflect"
	"testing"
)

func BenchmarkTagMessage(b *testing.B) {
	s := &Server{tagKey: "io.toolgate/rpc-0123456789abcdef"}
	msg := []byte(`{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"name":"test.noop","arguments":{}}}`)
	for range b.N {
		if out, _ := s.tagMessage(msg, "0123456789abcdef"); out == nil {
			b.Fatal("not tagged")
		}
	}
}

// The tag is spliced into params._meta: the message stays valid JSON-RPC,
// its params are the same plus the tag, whatever the layout of the params;
// params the SDK must refuse are left untagged.
func TestTagMessage(t *testing.T) {
	s := &Server{tagKey: "io.toolgate/rpc-k"}
	for _, params := range []string{
		`{"name":"t"}`,
		`{"name":"t","arguments":{}}`,
		` { "arguments" : {"a":"}\"{,"} , "name" : "t" } `,
		`{"name":"t","_meta":{}}`,
		`{"_meta":{"progressToken":7,"x":[1,{"y":"]"}]},"name":"t","arguments":{"z":null}}`,
		`{"name":"t","_meta":{"a":1},"_meta":{"b":true}}`,
		`{"name":"t\u0022x","arguments":[true,false,-1.5e3]}`,
	} {
		msg := []byte(`{"jsonrpc":"2.0","id":"r 1","method":"tools/call","params":` + params + `}`)
		out, _ := s.tagMessage(msg, "abc")
		if out == nil {
			t.Errorf("%s: not tagged", params)
			continue
		}
		var got, want struct {
			ID     string
			Params map[string]any
		}
		if err := json.Unmarshal(out, &got); err != nil {
			t.Errorf("%s: tagged %s: %v", params, out, err)
			continue
		}
		json.Unmarshal(msg, &want)
		meta, _ := got.Params["_meta"].(map[string]any)
		if got.ID != "r 1" || meta == nil || meta[s.tagKey] != "abc r 1" {
			t.Errorf("%s: tagged %s", params, out)
			continue
		}
		delete(meta, s.tagKey)
		if wm, ok := want.Params["_meta"]; !ok && len(meta) == 0 {
			delete(got.Params, "_meta")
		} else if !reflect.DeepEqual(wm, any(meta)) {
			t.Errorf("%s: _meta %v, want %v", params, meta, wm)
		}
		delete(got.Params, "_meta")
		delete(want.Params, "_meta")
		if !reflect.DeepEqual(got.Params, want.Params) {
			t.Errorf("%s: params %v, want %v", params, got.Params, want.Params)
		}
	}
	for _, params := range []string{`{"name":7}`, `{"arguments":{}}`, `{"name":"t","_meta":[]}`, `[]`, `"x"`} {
		msg := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":` + params + `}`)
		if out, _ := s.tagMessage(msg, "abc"); out != nil {
			t.Errorf("%s: tagged %s, want it left to the SDK", params, out)
		}
	}
}
