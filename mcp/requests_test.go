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
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/internal/testdb"
	"github.com/toolgate/toolgate/mcp"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
	"github.com/toolgate/toolgate/txn"
)

// records returns the records of tool, oldest first.
func records(t testing.TB, rt *tgruntime.Runtime, tool string) []*txn.Record {
	t.Helper()
	recs, err := rt.Executions(context.Background(), txn.Filter{ToolID: tool})
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

func noIntents(t testing.TB, rt *tgruntime.Runtime) {
	t.Helper()
	in, err := rt.Intents(context.Background(), tgruntime.IntentFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(in) != 0 {
		t.Errorf("%d intents stored, want none: %+v", len(in), in[0])
	}
}

// A call of a tool that requires approval is checked as Execute checks any
// call before it becomes an intent: by a principal without the tool's
// capabilities it is DENIED, recorded, and no intent is stored; with input
// its schema refuses it is FAILED, recorded, and no intent is stored.
func TestApproval_RefusedCallsMakeNoIntent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t.Run("principal without the capability", func(t *testing.T) {
		rt := openAt(t, testdb.Path(t, "tg.db"))
		defer rt.Close(context.Background())
		cs := pipeSession(t, rt, &mcp.Options{Principal: "mcp:stranger"}, nil)
		o := failed(t, call(t, ctx, cs, "test.approve", map[string]any{"msg": "let me"}, nil))
		if o.State != "DENIED" || o.Error.Type != "AuthorizationError" || !strings.Contains(o.Error.Message, "state.write:approved") {
			t.Errorf("got %+v, want DENIED naming state.write:approved", o)
		}
		noIntents(t, rt)
		recs := records(t, rt, "test.approve")
		if len(recs) != 1 || recs[0].State != "DENIED" || recs[0].Principal != "mcp:stranger" {
			t.Fatalf("records %+v, want one DENIED", recs)
		}
	})
	t.Run("input the schema refuses", func(t *testing.T) {
		rt := openAt(t, testdb.Path(t, "tg.db"))
		defer rt.Close(context.Background())
		cs := pipeSession(t, rt, &mcp.Options{Principal: principal}, nil)
		o := failed(t, call(t, ctx, cs, "test.approve", map[string]any{"msg": 5}, nil))
		if o.State != "FAILED" || o.Error.Type != "ValidationError" || o.Error.Code != "invalid_input" {
			t.Errorf("got %+v, want FAILED, ValidationError invalid_input", o)
		}
		noIntents(t, rt)
		if recs := records(t, rt, "test.approve"); len(recs) != 1 || recs[0].State != "FAILED" {
			t.Fatalf("records %+v, want one FAILED", recs)
		}
	})
}

// gatewayRuntime loads a registry file of upstreams in this process and
// opens a runtime over it.
func gatewayRuntime(t *testing.T, file string) *tgruntime.Runtime {
	t.Helper()
	gw := mcp.NewGateway(nil)
	t.Cleanup(func() { gw.Close() })
	reg, err := tools.LoadRegistryFileWith(file, gw.Tools)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := tgruntime.Open(testdb.Path(t, "tg.db"), &tgruntime.Options{Registry: reg, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close(context.Background()) })
	return rt
}

// The gateway's form: an upstream tool that requires approval, called by a
// principal not granted it, is DENIED before it becomes an intent, and
// never reaches the upstream.
func TestGateway_UngrantedApprovalToolDenied(t *testing.T) {
	dir := t.TempDir()
	file, log := upstreamFile(t, dir, "    tools:\n      gated: {requires_approval: true}\n")
	rt := gatewayRuntime(t, file)
	cs := pipeSession(t, rt, &mcp.Options{Principal: "tester", Grants: []capability.Capability{capability.MustParse("mcp.call:up/echo")}}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	o := failed(t, call(t, ctx, cs, "up.gated", map[string]any{"text": "ship it"}, nil))
	if o.State != "DENIED" || o.Error.Type != "AuthorizationError" || !strings.Contains(o.Error.Message, "mcp.call:up/gated") {
		t.Errorf("ungranted up.gated: %+v, want DENIED naming mcp.call:up/gated", o)
	}
	noIntents(t, rt)
	if recs := records(t, rt, "up.gated"); len(recs) != 1 || recs[0].State != "DENIED" {
		t.Errorf("records %+v, want one DENIED", recs)
	}
	if n := calls(t, log, "gated"); n != 0 {
		t.Errorf("the upstream got %d gated calls, want 0", n)
	}
}

// rawStdio starts the test server as a child and speaks raw lines to it.
type rawStdio struct {
	t       *testing.T
	cmd     *exec.Cmd
	in      interface{ Close() error }
	send    func(string)
	answers chan map[string]any
	stderr  *strings.Builder
}

func startRaw(t *testing.T, db string) *rawStdio {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+db)
	r := &rawStdio{t: t, cmd: cmd, answers: make(chan map[string]any, 100), stderr: &strings.Builder{}}
	cmd.Stderr = r.stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r.in = in
	r.send = func(line string) { fmt.Fprintln(in, line) }
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				m = map[string]any{"unparsable": sc.Text()}
			}
			r.answers <- m
		}
		close(r.answers)
	}()
	r.send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	if m := r.next(); m["result"] == nil {
		t.Fatalf("initialize: %v", m)
	}
	r.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return r
}

func (r *rawStdio) next() map[string]any {
	r.t.Helper()
	select {
	case m, ok := <-r.answers:
		if !ok {
			r.t.Fatalf("the server closed its output; stderr:\n%s", r.stderr.String())
		}
		return m
	case <-time.After(30 * time.Second):
		r.t.Fatal("no answer")
	}
	return nil
}

// stop closes the server's input and waits for it to exit.
func (r *rawStdio) stop() {
	r.t.Helper()
	r.in.Close()
	if err := r.cmd.Wait(); err != nil {
		r.t.Fatalf("the server did not exit cleanly: %v\n%s", err, r.stderr.String())
	}
}

// The JSON-RPC id of a tools/call is recorded in its call id,
// mcp:SESSION:ID: a number as its digits, a string as itself, and a string
// a call id may not hold as a hash.
func TestStdio_RequestIDInCallID(t *testing.T) {
	db := testdb.Path(t, "tg.db")
	r := startRaw(t, db)
	meta := map[string]string{}
	for _, id := range []string{`9`, `"req-x"`, `"a b/c"`} {
		r.send(`{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"test.noop","arguments":{}}}`)
		m := r.next()
		res, _ := m["result"].(map[string]any)
		mm, _ := res["_meta"].(map[string]any)
		callID, _ := mm[mcp.MetaCallID].(string)
		if res == nil || res["isError"] == true || callID == "" {
			t.Fatalf("id %s: %v", id, m)
		}
		meta[id] = callID
	}
	r.stop()
	rt := open(t, db)
	recs := records(t, rt, "test.noop")
	if len(recs) != 3 {
		t.Fatalf("%d records, want 3", len(recs))
	}
	// One call at a time: the records are in the order sent.
	ids := []string{`9`, `"req-x"`, `"a b/c"`}
	session := ""
	for i, want := range []string{":9", ":req-x"} {
		got := recs[i].CallID
		if !strings.HasPrefix(got, "mcp:") || !strings.HasSuffix(got, want) || got != meta[ids[i]] {
			t.Errorf("id %s: recorded call id %q (result _meta %q), want mcp:SESSION%s", ids[i], got, meta[ids[i]], want)
		}
		s := strings.TrimSuffix(strings.TrimPrefix(got, "mcp:"), want)
		if session != "" && s != session {
			t.Errorf("one connection, two sessions: %q and %q", session, s)
		}
		session = s
	}
	if got := recs[2].CallID; !strings.HasPrefix(got, "mcp:"+session+":h") || strings.Contains(got, " ") || got != meta[ids[2]] {
		t.Errorf(`id "a b/c": recorded call id %q, want mcp:%s:h and a hash`, got, session)
	}
}

// idRecorder is a client transport that remembers the JSON-RPC id of each
// tools/call the SDK's client sends.
type idRecorder struct {
	sdk.Transport
	mu  sync.Mutex
	ids []string
}

func (r *idRecorder) Connect(ctx context.Context) (sdk.Connection, error) {
	c, err := r.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &idConn{Connection: c, r: r}, nil
}

type idConn struct {
	sdk.Connection
	r *idRecorder
}

func (c *idConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if req, ok := msg.(*jsonrpc.Request); ok && req.Method == "tools/call" {
		c.r.mu.Lock()
		c.r.ids = append(c.r.ids, fmt.Sprint(req.ID.Raw()))
		c.r.mu.Unlock()
	}
	return c.Connection.Write(ctx, msg)
}

// The SDK's client: the call id of each call ends with the request id the
// client sent, in the result's _meta and in the record.
func TestStdio_SDKRequestIDInCallID(t *testing.T) {
	db := testdb.Path(t, "tg.db")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+db)
	cmd.Stderr = os.Stderr
	rec := &idRecorder{Transport: &sdk.CommandTransport{Command: cmd}}
	cs := connect(t, rec, nil, "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got []string
	for i := range 3 {
		res := call(t, ctx, cs, "test.noop", map[string]any{"msg": fmt.Sprint(i)}, nil)
		completed(t, res)
		id, _ := res.Meta[mcp.MetaCallID].(string)
		got = append(got, id)
	}
	cs.Close()
	cmd.Wait()
	rec.mu.Lock()
	sent := slices.Clone(rec.ids)
	rec.mu.Unlock()
	if len(sent) != 3 {
		t.Fatalf("the client sent %d tools/call requests, want 3", len(sent))
	}
	recs := records(t, open(t, db), "test.noop")
	if len(recs) != 3 {
		t.Fatalf("%d records, want 3", len(recs))
	}
	for i := range sent {
		if !strings.HasPrefix(got[i], "mcp:") || !strings.HasSuffix(got[i], ":"+sent[i]) || recs[i].CallID != got[i] {
			t.Errorf("call %d: request id %s, call id %q in _meta, %q recorded; want mcp:SESSION:%s", i, sent[i], got[i], recs[i].CallID, sent[i])
		}
	}
}

// The plain id lists the version a call without a version runs: the
// highest release, not a higher pre-release; every version is listed as
// ID--VERSION.
func TestToolsList_PlainIDIsTheHighestRelease(t *testing.T) {
	var ds []tools.Declaration
	for _, v := range []string{"1.0.0", "1.1.0", "2.0.0-rc.1"} {
		ds = append(ds, decl("test.rel", objSchema, func(d *tools.Declaration) { d.Version = v }))
	}
	rt := noopTools(t, ds...)
	cs := pipeSession(t, rt, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	versions := map[string]any{}
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		versions[tool.Name] = tool.Meta["io.toolgate/version"]
	}
	want := map[string]any{"test.rel": "1.1.0", "test.rel--1.0.0": "1.0.0", "test.rel--1.1.0": "1.1.0", "test.rel--2.0.0-rc.1": "2.0.0-rc.1", mcp.ExecuteIntentTool: nil}
	if fmt.Sprint(versions) != fmt.Sprint(want) {
		t.Errorf("tools/list versions %v, want %v", versions, want)
	}
	if res := call(t, ctx, cs, "test.rel", map[string]any{}, nil); res.IsError {
		t.Errorf("test.rel: %s", text(t, res))
	} else if e, err := rt.Execution(ctx, res.Meta[mcp.MetaExecutionID].(string)); err != nil || e.ToolVersion != "1.1.0" {
		t.Errorf("test.rel ran %v (%v), want 1.1.0", e, err)
	}
}

// noopTools opens a runtime whose registry holds a tool answering {} for
// each declaration.
func noopTools(t *testing.T, ds ...tools.Declaration) *tgruntime.Runtime {
	t.Helper()
	reg := tools.NewRegistry()
	noop := func(context.Context, *tools.Env, json.RawMessage) (json.RawMessage, error) {
		return json.RawMessage(`{}`), nil
	}
	for _, d := range ds {
		if err := reg.Register(tools.NewRaw(d, noop)); err != nil {
			t.Fatal(err)
		}
	}
	reg.Freeze()
	rt, err := tgruntime.Open(testdb.Path(t, "tg.db"), &tgruntime.Options{Registry: reg, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close(context.Background()) })
	return rt
}

// A call that becomes an intent keeps the MCP request that proposed it:
// the intent's call id (and its proposal's audit event) is mcp:SESSION:ID.
func TestStdio_IntentKeepsTheRequest(t *testing.T) {
	db := testdb.Path(t, "tg.db")
	r := startRaw(t, db)
	r.send(`{"jsonrpc":"2.0","id":"prop-1","method":"tools/call","params":{"name":"test.approve","arguments":{"msg":"hi"}}}`)
	if m := r.next(); m["result"] == nil {
		t.Fatalf("an approval-required call: %v", m)
	}
	r.stop()
	rt := open(t, db)
	all, err := rt.Intents(context.Background(), tgruntime.IntentFilter{})
	if err != nil || len(all) != 1 {
		t.Fatalf("intents: %v, %v", all, err)
	}
	if got := all[0].CallID; !strings.HasPrefix(got, "mcp:") || !strings.HasSuffix(got, ":prop-1") {
		t.Errorf("the intent's call id is %q, want mcp:SESSION:prop-1", got)
	}
}
