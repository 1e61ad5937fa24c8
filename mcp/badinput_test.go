package mcp_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/testdb"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/txn"
)

// Bad input on the wire, from a raw client: each bad line gets a JSON-RPC
// error or an isError result, never a crash, and the server goes on; a
// client that leaves mid-call leaves the call recorded.
func TestStdio_BadInput(t *testing.T) {
	db := testdb.Path(t, "tg.db")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+db)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	answers := make(chan map[string]any, 100)
	go func() {
		sc := bufio.NewScanner(outPipe)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				m = map[string]any{"unparsable": sc.Text()}
			}
			answers <- m
		}
		close(answers)
	}()
	send := func(line string) { fmt.Fprintln(in, line) }
	next := func() map[string]any {
		t.Helper()
		select {
		case m, ok := <-answers:
			if !ok {
				t.Fatalf("the server closed its output; stderr:\n%s", stderr.String())
			}
			return m
		case <-time.After(30 * time.Second):
			t.Fatal("no answer")
		}
		return nil
	}
	errCode := func(m map[string]any) float64 {
		e, _ := m["error"].(map[string]any)
		c, _ := e["code"].(float64)
		return c
	}

	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	if m := next(); m["result"] == nil {
		t.Fatalf("initialize: %v", m)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)

	for _, tc := range []struct {
		name, line string
		code       float64
	}{
		{"not JSON", `garbage`, -32700},
		{"a batch", `[{"jsonrpc":"2.0","id":2,"method":"tools/list"}]`, -32600},
		{"not an object", `42`, -32600},
		{"no version", `{"id":3,"method":"tools/list"}`, -32600},
		{"unknown method", `{"jsonrpc":"2.0","id":4,"method":"tools/explode"}`, -32601},
		{"params of the wrong type", `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":5}}`, -32602},
		{"params not an object", `{"jsonrpc":"2.0","id":6,"method":"tools/call","params":"x"}`, -32602},
		// Params the SDK cannot decode: its own message quoted the params
		// whole, the tag's random key with them (which let a client forge
		// its call id), and named Go types.
		{"an input response of the wrong type", `{"jsonrpc":"2.0","id":"ir","method":"tools/call","params":{"name":"test.noop","arguments":{},"inputResponses":{"x":5}}}`, -32602},
		{"a request state of the wrong type", `{"jsonrpc":"2.0","id":"rs","method":"tools/call","params":{"name":"test.noop","arguments":{},"requestState":7}}`, -32602},
		{"_meta not an object", `{"jsonrpc":"2.0","id":"mt","method":"tools/call","params":{"name":"test.noop","_meta":[1]}}`, -32602},
		{"arguments nested 2000 deep", `{"jsonrpc":"2.0","id":"deep","method":"tools/call","params":{"name":"test.noop","arguments":{"msg":` +
			strings.Repeat("[", 2000) + strings.Repeat("]", 2000) + `}}}`, -32602},
		// An id that is a number but not an integer: the SDK answered
		// (and the records named) 1.5 as 1, 1e300 as -2^63.
		{"an id of 1.5", `{"jsonrpc":"2.0","id":1.5,"method":"tools/call","params":{"name":"test.noop","arguments":{}}}`, -32600},
		{"an id of 1e300", `{"jsonrpc":"2.0","id":1e300,"method":"tools/call","params":{"name":"test.noop","arguments":{}}}`, -32600},
		// A member name in another case: read here as the method, not by
		// the SDK's own decoder.
		{"a member METHOD", `{"jsonrpc":"2.0","id":"case","method":"tools/call","METHOD":"tools/list","params":{"name":"test.noop"}}`, -32600},
		{"initialize again, params of the wrong type", `{"jsonrpc":"2.0","id":"in","method":"initialize","params":{"protocolVersion":5}}`, -32602},
	} {
		send(tc.line)
		m := next()
		if got := errCode(m); got != tc.code {
			t.Errorf("%s: answer %.300v, want error %v", tc.name, m, tc.code)
		}
		s := fmt.Sprint(m)
		for _, internal := range []string{"goroutine", "io.toolgate/rpc-", "*mcp.", "json: ", "unmarshaling"} {
			if strings.Contains(s, internal) {
				t.Errorf("%s: the answer shows internals (%q): %.300s", tc.name, internal, s)
			}
		}
	}
	// A line longer than the limit (16 MiB by default): answered with its
	// id, which comes before the cut, and the session goes on. The SDK's
	// own reader ended the session on it.
	send(`{"jsonrpc":"2.0","id":"long","method":"tools/call","params":{"name":"test.big","arguments":{"data":"` + strings.Repeat("x", 16<<20) + `"}}}`)
	if m := next(); errCode(m) != -32600 || m["id"] != "long" {
		t.Errorf("an overlong line: answer %.200v, want error -32600 for id long", m)
	}
	// Arguments of the wrong type: the tool's schema refuses them (FAILED).
	send(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"test.noop","arguments":"str"}}`)
	m := next()
	if r, _ := m["result"].(map[string]any); r == nil || r["isError"] != true {
		t.Errorf("arguments of the wrong type: %v", m)
	}
	// Still serving.
	send(`{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"test.noop","arguments":{}}}`)
	m = next()
	if r, _ := m["result"].(map[string]any); r == nil || r["isError"] == true {
		t.Errorf("a good call after the bad ones: %v", m)
	}
	// The client leaves mid-call: nobody can receive the result, so the
	// call is canceled (ABORTED, then ROLLED_BACK, recorded), not left to
	// run its 10 minutes.
	send(`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"test.slow","arguments":{"ms":600000},"_meta":{"progressToken":"p"}}}`)
	if m := next(); m["method"] != "notifications/progress" { // it runs
		t.Fatalf("want a progress notification, got %v", m)
	}
	in.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the server did not exit cleanly after its client left: %v\n%s", err, stderr.String())
	}
	if strings.Contains(stderr.String(), "panic") {
		t.Errorf("stderr: %s", stderr.String())
	}
	rt := open(t, db)
	recs, err := rt.Executions(context.Background(), txn.Filter{ToolID: "test.slow"})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].EndedAt.IsZero() || recs[0].State != "ROLLED_BACK" || recs[0].Error == nil || recs[0].Error.Code != "canceled" || !slices.ContainsFunc(recs[0].Transitions, func(tr txn.Transition) bool { return tr.To == "ABORTED" }) {
		t.Fatalf("the abandoned call's records: %+v, want it canceled: ABORTED, then ROLLED_BACK", recs)
	}
	auditVerifies(t, rt)
}

// auditVerifies fails t unless the records and the audit log agree
// (toolgate audit verify).
func auditVerifies(t *testing.T, rt *tgruntime.Runtime) {
	t.Helper()
	if _, err := rt.VerifyRecords(context.Background(), func(d tgruntime.Discrepancy) error {
		t.Errorf("audit verify: %s", d)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
