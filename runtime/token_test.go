package runtime_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/audit"
	tgruntime "github.com/toolgate/toolgate/runtime"
)

// A call made under an OAuth access token keeps the token's issuer,
// subject and hash (never the token) in its record and in every audit event
// of the call, and audit verification compares the two.
func TestExecute_TokenRecorded(t *testing.T) {
	rt, _ := openRuntime(t, nil, echo("test.echo"))
	tok := &audit.Token{Issuer: "https://id.example.com/", Subject: "agent-7", SHA256: strings.Repeat("ab", 32)}
	inv := invoke("test.echo", `{"msg":"hi"}`)
	inv.Token = tok
	res, err := rt.Execute(context.Background(), inv)
	if err != nil {
		t.Fatal(err)
	}
	rec := record(t, rt, res.ExecutionID)
	if rec.Token == nil || rec.Token.Issuer != tok.Issuer || rec.Token.Subject != tok.Subject || rec.Token.SHA256 != tok.SHA256 {
		t.Fatalf("record token = %+v", rec.Token)
	}
	evs := auditEventsOf(t, rt, res.ExecutionID)
	if len(evs) == 0 {
		t.Fatal("no audit events")
	}
	for _, e := range evs {
		if e.Token == nil || *e.Token != *tok {
			t.Fatalf("event %s: token = %+v", e.State, e.Token)
		}
	}
	if ds, err := rt.VerifyExecution(context.Background(), rec); err != nil || len(ds) != 0 {
		t.Fatalf("verify: %v %v", ds, err)
	}
	// A record whose token differs from its events' is named.
	other := *rec
	other.Token = nil
	ds, err := rt.VerifyExecution(context.Background(), &other)
	if err != nil || len(ds) == 0 || ds[0].Field != "token" {
		t.Fatalf("a record without its token: %v %v", ds, err)
	}
	// A call without a token records none.
	res, err = rt.Execute(context.Background(), invoke("test.echo", `{"msg":"hi"}`))
	if err != nil {
		t.Fatal(err)
	}
	if rec := record(t, rt, res.ExecutionID); rec.Token != nil {
		t.Fatalf("token without one: %+v", rec.Token)
	}
}

// A token reference a record could not hold is refused before anything
// is recorded.
func TestExecute_TokenBounds(t *testing.T) {
	rt, _ := openRuntime(t, nil, echo("test.echo"))
	for _, tok := range []*audit.Token{
		{Issuer: "", Subject: "s", SHA256: strings.Repeat("a", 64)},
		{Issuer: "i", Subject: strings.Repeat("s", 300), SHA256: strings.Repeat("a", 64)},
		{Issuer: "i", Subject: "s\n", SHA256: strings.Repeat("a", 64)},
		{Issuer: "i", Subject: "s", SHA256: "the token itself"},
	} {
		inv := invoke("test.echo", `{"msg":"hi"}`)
		inv.Token = tok
		res, err := rt.Execute(context.Background(), inv)
		var ve *tgruntime.ValidationError
		if res != nil || !errors.As(err, &ve) {
			t.Errorf("%+v: %v, %v", tok, res, err)
		}
	}
	if n, err := rt.AuditLog(context.Background(), 0, 0); err != nil || len(n) != 0 {
		t.Errorf("refused calls were recorded: %d events, %v", len(n), err)
	}
}
