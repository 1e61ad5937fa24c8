package mcp

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/internal/testdb"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
	"github.com/toolgate/toolgate/txn"
)

// A client that learnt the tag's key (it is random per server, and no
// answer shows it) still cannot choose its call id: the server's tag goes
// last in _meta, and the decoders keep the last of duplicate keys, so the
// copy a client wrote itself, in any spelling, loses. The record names the
// real session and request.
func TestTag_ClientCopyOfTheKeyLoses(t *testing.T) {
	reg := tools.NewRegistry()
	schema := `{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","properties":{},"required":[],"additionalProperties":false}`
	if err := reg.Register(tools.NewRaw(tools.Declaration{ID: "test.noop", Version: "1.0.0", Name: "noop", Description: "does nothing",
		InputSchema: json.RawMessage(schema), OutputSchema: json.RawMessage(schema),
		ResourceLimits: tools.ResourceLimits{MaxExecutionTime: 10 * time.Second}},
		func(context.Context, *tools.Env, json.RawMessage) (json.RawMessage, error) {
			return json.RawMessage(`{}`), nil
		})); err != nil {
		t.Fatal(err)
	}
	reg.Freeze()
	rt, err := tgruntime.Open(testdb.Path(t, "tg.db"), &tgruntime.Options{Registry: reg, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	srv, err := New(rt, &Options{Principal: "mcp:tester"})
	if err != nil {
		t.Fatal(err)
	}
	crd, swr := io.Pipe()
	srd, cwr := io.Pipe()
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Run(context.Background(), &sdk.IOTransport{Reader: srd, Writer: swr})
	}()
	defer func() { cwr.Close(); <-served }()
	answers := make(chan map[string]any, 10)
	go func() {
		sc := bufio.NewScanner(crd)
		for sc.Scan() {
			var m map[string]any
			json.Unmarshal(sc.Bytes(), &m)
			answers <- m
		}
	}()
	next := func() map[string]any {
		t.Helper()
		select {
		case m := <-answers:
			return m
		case <-time.After(30 * time.Second):
			t.Fatal("no answer")
		}
		return nil
	}
	fmt.Fprintln(cwr, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	next()
	fmt.Fprintln(cwr, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)

	escaped := strings.ReplaceAll(srv.tagKey, "/", `\/`)
	for i, meta := range []string{
		fmt.Sprintf(`{"%s":"0000000000000000 forged"}`, srv.tagKey),
		fmt.Sprintf(`{"progressToken":1,"%s":"0000000000000000 forged"}`, escaped),
		fmt.Sprintf(`{"%s":"0000000000000000 forged"},"_meta":{"%s":"0000000000000000 forged","x":1}`, srv.tagKey, srv.tagKey),
		fmt.Sprintf(`{},"\u005fmeta":{"%s":"0000000000000000 forged"}`, srv.tagKey), // a second _meta, its key escaped
	} {
		id := fmt.Sprintf("real-%d", i)
		fmt.Fprintf(cwr, `{"jsonrpc":"2.0","id":%q,"method":"tools/call","params":{"name":"test.noop","_meta":%s,"arguments":{}}}`+"\n", id, meta)
		m := next()
		res, _ := m["result"].(map[string]any)
		rm, _ := res["_meta"].(map[string]any)
		callID, _ := rm[MetaCallID].(string)
		if !strings.HasPrefix(callID, "mcp:") || !strings.HasSuffix(callID, ":"+id) || strings.Contains(callID, "forged") {
			t.Errorf("_meta %s: call id %q, want mcp:SESSION:%s", meta, callID, id)
		}
	}
	recs, err := rt.Executions(context.Background(), txn.Filter{ToolID: "test.noop"})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if strings.Contains(r.CallID, "forged") || r.Principal != "mcp:tester" {
			t.Errorf("recorded call id %s, principal %s", r.CallID, r.Principal)
		}
	}
	if len(recs) != 4 {
		t.Errorf("%d records, want 4", len(recs))
	}
	if _, err := rt.VerifyRecords(context.Background(), func(d tgruntime.Discrepancy) error {
		t.Errorf("audit verify: %s", d)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
