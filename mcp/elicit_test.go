package mcp_test

import (
	"context"
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/internal/testdb"
	"github.com/toolgate/toolgate/mcp"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/txn"
)

// elicitor is a client's user: it answers every elicitation/create with
// answer and remembers what it was shown.
type elicitor struct {
	mu     sync.Mutex
	answer *sdk.ElicitResult
	shown  []*sdk.ElicitParams
}

func (e *elicitor) handle(_ context.Context, r *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.shown = append(e.shown, r.Params)
	return e.answer, nil
}

func (e *elicitor) count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.shown)
}

// pipeSession serves rt with opts in this process, over a pair of pipes
// (Server.Run, as over stdio), to a real SDK client with clientOpts.
func pipeSession(t *testing.T, rt *tgruntime.Runtime, opts *mcp.Options, clientOpts *sdk.ClientOptions, version ...string) *sdk.ClientSession {
	t.Helper()
	srv, err := mcp.New(rt, opts)
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
	c := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, clientOpts)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var so *sdk.ClientSessionOptions
	if len(version) > 0 {
		so = &sdk.ClientSessionOptions{ProtocolVersion: version[0]}
	}
	cs, err := c.Connect(ctx, &sdk.IOTransport{Reader: crd, Writer: cwr}, so)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close(); cwr.Close(); <-served })
	return cs
}

func openAt(t *testing.T, db string) *tgruntime.Runtime {
	t.Helper()
	rt, err := tgruntime.Open(db, testOptions(testRegistry(t)))
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

func runs(t *testing.T, rt *tgruntime.Runtime) string {
	t.Helper()
	b, _, err := rt.StateValue(context.Background(), "approved", "runs")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// With --approve-via-elicitation, a call that requires approval asks the
// client's user, showing the exact canonical call and its hash; an accept
// approves it as the session's principal, via elicitation (in the intent's
// decision and its audit event), and runs it once; `audit verify` passes.
// Clients of protocol 2026-07-28 get the question as an input request
// (multi round-trip); older ones as elicitation/create, sent by the SDK.
func TestElicitation_AcceptRunsOnce(t *testing.T) {
	for _, version := range []string{"", "2025-11-25"} {
		t.Run("protocol="+version, func(t *testing.T) { elicitAccept(t, version) })
	}
}

func elicitAccept(t *testing.T, version string) {
	db := testdb.Path(t, "tg.db")
	rt := openAt(t, db)
	user := &elicitor{answer: &sdk.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}}
	cs := pipeSession(t, rt, &mcp.Options{Principal: principal, ApproveViaElicitation: true},
		&sdk.ClientOptions{ElicitationHandler: user.handle}, version)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	res := call(t, ctx, cs, "test.approve", map[string]any{"msg": "ship it"}, nil)
	completed(t, res)
	if user.count() != 1 {
		t.Fatalf("%d elicitations, want 1", user.count())
	}
	id, _ := res.Meta["io.toolgate/intentId"].(string)
	in, err := rt.Intent(ctx, id)
	if err != nil {
		t.Fatalf("the result names intent %q: %v", id, err)
	}
	shown := user.shown[0]
	canonical := `{"input":{"msg":"ship it"},"tool":"test.approve","version":"1.0.0"}`
	if !strings.Contains(shown.Message, canonical) || !strings.Contains(shown.Message, in.Hash) || !strings.Contains(shown.Message, "via elicitation") {
		t.Errorf("the user was shown %q: want the canonical call %s and its hash %s", shown.Message, canonical, in.Hash)
	}
	if h, _ := tgruntime.IntentHash("test.approve", "1.0.0", json.RawMessage(canonical[len(`{"input":`):strings.Index(canonical, `,"tool"`)])); h != in.Hash {
		t.Errorf("the canonical call shown does not hash to the intent's hash")
	}
	if d := in.Decision; in.Status != "executed" || d == nil || !d.Approved || d.By != principal || d.Via != mcp.Via || in.Proposer != principal {
		t.Errorf("intent %+v, decision %+v: want executed, approved by %s via elicitation", in, in.Decision, principal)
	}
	if got := runs(t, rt); got != "1" {
		t.Errorf("the tool ran %q times, want once", got)
	}
	// The same call again: the stored outcome, replayed, nothing asked.
	again := call(t, ctx, cs, "test.approve", map[string]any{"msg": "ship it"}, nil)
	completed(t, again)
	if again.Meta[mcp.MetaReplayed] != true || user.count() != 1 || runs(t, rt) != "1" {
		t.Errorf("the repeated call: %v, %d elicitations, %s runs", again.Meta, user.count(), runs(t, rt))
	}

	var approved []audit.Event
	tgruntimeAudit(t, rt, id, func(e audit.Event) {
		if e.Intent.Action == audit.IntentApproved {
			approved = append(approved, e)
		}
	})
	if len(approved) != 1 || approved[0].UserID != principal || approved[0].Intent.Via != mcp.Via {
		t.Errorf("approval events %+v: want one by %s via elicitation", approved, principal)
	}
	cs.Close()
	if err := rt.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(toolgate(t), "--db", db, "audit", "verify").CombinedOutput()
	if err != nil {
		t.Errorf("toolgate audit verify: %v\n%s", err, out)
	}
	out, err = exec.Command(toolgate(t), "--db", db, "intent", "show", id).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "elicitation") {
		t.Errorf("toolgate intent show does not say via elicitation: %v\n%s", err, out)
	}
}

// A decline, a cancel, or an accept without the confirmation leaves the
// intent pending: nothing runs, and the call answers approval_required.
func TestElicitation_DeclineRunsNothing(t *testing.T) {
	rt := openAt(t, testdb.Path(t, "tg.db"))
	defer rt.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, answer := range []*sdk.ElicitResult{
		{Action: "decline"},
		{Action: "cancel"},
		{Action: "accept", Content: map[string]any{"approve": false}},
	} {
		user := &elicitor{answer: answer}
		cs := pipeSession(t, rt, &mcp.Options{Principal: principal, ApproveViaElicitation: true},
			&sdk.ClientOptions{ElicitationHandler: user.handle})
		id, _, _ := intentOf(t, call(t, ctx, cs, "test.approve", map[string]any{"msg": "no"}, nil))
		if user.count() != 1 {
			t.Errorf("%s: %d elicitations, want 1", answer.Action, user.count())
		}
		in, err := rt.Intent(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if in.Status != "pending" || in.Decision != nil {
			t.Errorf("%s: intent %s %+v, want pending", answer.Action, in.Status, in.Decision)
		}
		if intents, _ := rt.Intents(ctx, tgruntime.IntentFilter{}); len(intents) != 1 {
			t.Errorf("answer %d: %d intents, want the one pending", i, len(intents))
		}
	}
	// An answer to a question the server did not ask (a made-up request
	// state) approves nothing.
	forger := pipeSession(t, rt, &mcp.Options{Principal: principal, ApproveViaElicitation: true}, &sdk.ClientOptions{
		Capabilities:   &sdk.ClientCapabilities{Elicitation: &sdk.ElicitationCapabilities{}},
		MultiRoundTrip: &sdk.MultiRoundTripOptions{Disabled: true},
	})
	asked := call(t, ctx, forger, "test.approve", map[string]any{"msg": "forged"}, nil)
	if !asked.NeedsInput() || len(asked.InputRequests) != 1 {
		t.Fatalf("the first call: %+v, want one input request", asked)
	}
	for key := range asked.InputRequests {
		for _, state := range []string{"", "made-up", strings.Repeat("0", 64)} {
			res, err := forger.CallTool(ctx, &sdk.CallToolParams{Name: "test.approve", Arguments: map[string]any{"msg": "forged"},
				InputResponses: sdk.InputResponseMap{key: &sdk.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}},
				RequestState:   state})
			if err != nil {
				t.Fatal(err)
			}
			if res.NeedsInput() {
				continue // asked again: not approved
			}
			intentOf(t, res)
		}
	}
	if got := runs(t, rt); got != "" {
		t.Errorf("the tool ran %q times, want never", got)
	}
	recs, err := rt.Executions(ctx, txn.Filter{ToolID: "test.approve"})
	if err != nil || len(recs) != 0 {
		t.Errorf("%d executions of test.approve (%v), want none", len(recs), err)
	}
}

// Off (the default), no elicitation is sent even to a client that
// declared it; on, none is sent to a client that did not.
func TestElicitation_OffAsksNothing(t *testing.T) {
	rt := openAt(t, testdb.Path(t, "tg.db"))
	defer rt.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	user := &elicitor{answer: &sdk.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}}
	cs := pipeSession(t, rt, &mcp.Options{Principal: principal}, &sdk.ClientOptions{ElicitationHandler: user.handle})
	intentOf(t, call(t, ctx, cs, "test.approve", map[string]any{"msg": "off"}, nil))
	intentOf(t, call(t, ctx, cs, "test.approve", map[string]any{"msg": "off"}, nil))
	if user.count() != 0 {
		t.Errorf("%d elicitations with the option off, want none", user.count())
	}
	plain := pipeSession(t, rt, &mcp.Options{Principal: principal, ApproveViaElicitation: true}, nil)
	intentOf(t, call(t, ctx, plain, "test.approve", map[string]any{"msg": "no capability"}, nil))
	if got := runs(t, rt); got != "" {
		t.Errorf("the tool ran %q times, want never", got)
	}
}

// tgruntimeAudit calls fn with each event of intent id's history.
func tgruntimeAudit(t *testing.T, rt *tgruntime.Runtime, id string, fn func(audit.Event)) {
	t.Helper()
	ctx := context.Background()
	_, err := rt.VerifyRecords(ctx, func(d tgruntime.Discrepancy) error {
		t.Errorf("verify: %s", d)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	entries, err := rt.AuditLog(ctx, 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range entries {
		var e audit.Event
		if err := json.Unmarshal(en.Event, &e); err != nil {
			t.Fatal(err)
		}
		if e.Intent != nil && e.Intent.ID == id {
			fn(e)
		}
	}
}
