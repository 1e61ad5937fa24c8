package txn

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// A record's token reference is stored after EndedAt, only when there is
// one: a record written before tokens existed ends at EndedAt and decodes
// with no token, and one with a token decodes to it.
func TestRecord_TokenRoundTrip(t *testing.T) {
	at := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	r := &Record{ExecutionID: "01a21d4e-715b-7000-8797-ba595e5a9e66", CallID: "c", Attempt: 1, ToolID: "t", ToolVersion: "1.0.0",
		State: "EXECUTING", StartedAt: at}
	plain, err := encodeRecord(r)
	if err != nil {
		t.Fatal(err)
	}
	r.Token = &TokenRef{Issuer: "https://id.example.com/", Subject: "agent-7", SHA256: strings.Repeat("ab", 32)}
	with, err := encodeRecord(r)
	if err != nil {
		t.Fatal(err)
	}
	if with[0] != recordTagMore || plain[0] != recordTag || string(with[1:len(plain)]) != string(plain[1:]) || string(with[len(plain):len(plain)+1]) != "\x01" {
		t.Fatal("a record with a token is not the record of before, tagged 0x02, with the token after it")
	}
	got, err := parseRecord(with)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Token, r.Token) {
		t.Fatalf("token = %+v, want %+v", got.Token, r.Token)
	}
	old, err := parseRecord(plain)
	if err != nil || old.Token != nil {
		t.Fatalf("a record without a token: %+v, %v", old.Token, err)
	}
	if _, err := parseRecord(append(with, 0)); err == nil {
		t.Fatal("a byte after the token was accepted")
	}
	if _, err := parseRecord(append(plain, 0)); err == nil {
		t.Fatal("a byte after a record without a token was accepted")
	}
	// Cut anywhere, the record with a token is refused: at the end of the
	// record of before too, where it would otherwise lose its token.
	for n := range len(with) {
		if _, err := parseRecord(with[:n]); err == nil {
			t.Fatalf("a record with a token cut to %d of %d bytes was accepted", n, len(with))
		}
	}
}
