package capability_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/toolgate/toolgate/capability"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in      string
		want    capability.Capability
		wantErr bool
	}{
		{in: "filesystem.read", want: capability.Capability{Name: "filesystem.read"}},
		{in: "filesystem.read:/srv/data/", want: capability.Capability{Name: "filesystem.read", Scope: "/srv/data"}},
		{in: "filesystem.read:/srv//data/./x", want: capability.Capability{Name: "filesystem.read", Scope: "/srv/data/x"}},
		{in: "process.exec:git", want: capability.Capability{Name: "process.exec", Scope: "git"}},
		{in: "network.http:api.example.com", want: capability.Capability{Name: "network.http", Scope: "api.example.com"}},
		{in: "", wantErr: true},
		{in: "Filesystem.Read", wantErr: true},
		{in: "filesystem.", wantErr: true},
		{in: "filesystem.read:", wantErr: true},
		{in: "filesystem.read:/srv/../etc", wantErr: true},
		{in: "filesystem.read:../x", wantErr: true},
		{in: "process.exec:git status", wantErr: true},
		{in: "process.exec:a\x00b", wantErr: true},
		{in: "*", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := capability.Parse(tt.in)
			if tt.wantErr {
				if !errors.Is(err, capability.ErrInvalid) {
					t.Fatalf("Parse(%q) = %v, %v; want ErrInvalid", tt.in, got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("Parse(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
			}
			if again, _ := capability.Parse(got.String()); again != got {
				t.Fatalf("String round trip: %q -> %+v", got.String(), again)
			}
		})
	}
}

func TestCapability_Covers(t *testing.T) {
	tests := []struct {
		grant, req string
		want       bool
	}{
		{"filesystem.read:/srv/data", "filesystem.read:/srv/data", true},
		{"filesystem.read:/srv/data", "filesystem.read:/srv/data/x/y", true},
		{"filesystem.read:/srv/data", "filesystem.read:/srv/database", false},
		{"filesystem.read:/srv/data", "filesystem.read:/srv", false},
		{"filesystem.read:/", "filesystem.read:/etc/passwd", true},
		{"filesystem.read:/srv/data", "filesystem.write:/srv/data", false},
		{"filesystem.read", "filesystem.read:/anything", true},
		{"filesystem.read:/srv/data", "filesystem.read", true},
		{"process.exec:git", "process.exec:gitk", false},
		{"network.http:api.example.com", "network.http:evil.api.example.com", false},
		{"state.read:orders", "state.read:orders/2026", true},
		{"filesystem", "filesystem.read", false},
	}
	for _, tt := range tests {
		t.Run(tt.grant+" covers "+tt.req, func(t *testing.T) {
			g, r := capability.MustParse(tt.grant), capability.MustParse(tt.req)
			if got := g.Covers(r); got != tt.want {
				t.Fatalf("Covers = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestAuthorize(t *testing.T) {
	req := []capability.Capability{capability.MustParse("filesystem.read"), capability.MustParse("process.exec:git")}
	at := time.Unix(1, 0)

	d := capability.Authorize("alice", "t", req, nil, at)
	if d.Allowed() || len(d.Missing) != 2 {
		t.Fatalf("no grants: %+v, want deny with both missing", d)
	}
	d = capability.Authorize("alice", "t", req, []capability.Capability{capability.MustParse("filesystem.read:/srv")}, at)
	if d.Allowed() || len(d.Missing) != 1 || d.Missing[0].String() != "process.exec:git" {
		t.Fatalf("partial grants: %+v", d)
	}
	grants := []capability.Capability{capability.MustParse("filesystem.read:/srv"), capability.MustParse("process.exec:git")}
	d = capability.Authorize("alice", "t", req, grants, at)
	if !d.Allowed() || len(d.Granted) != 2 || d.Principal != "alice" || !d.At.Equal(at) {
		t.Fatalf("full grants: %+v", d)
	}
	if d := capability.Authorize("alice", "t", nil, nil, at); !d.Allowed() {
		t.Fatal("a tool requiring nothing must be allowed")
	}
}

// mcp.call:SERVER/TOOL is what a gateway tool requires; a grant of
// mcp.call:SERVER covers every tool of that server and of no other, by the
// general rule ("below" is after a "/").
func TestCovers_MCPCall(t *testing.T) {
	req := capability.MustParse("mcp.call:files/read_file")
	for _, tc := range []struct {
		grant string
		want  bool
	}{
		{"mcp.call", true},
		{"mcp.call:files", true},
		{"mcp.call:files/read_file", true},
		{"mcp.call:files/read", false},
		{"mcp.call:files/read_file_2", false},
		{"mcp.call:file", false},
		{"mcp.call:files2", false},
		{"mcp.call:other/read_file", false},
		{"mcp.list:files", false},
	} {
		d := capability.Authorize("p", "files.read_file", []capability.Capability{req}, []capability.Capability{capability.MustParse(tc.grant)}, time.Now())
		if d.Allowed() != tc.want {
			t.Errorf("grant %s for %s: allowed %v, want %v", tc.grant, req, d.Allowed(), tc.want)
		}
	}
}

// A capability in JSON is its String form, parsed as Parse parses it.
func TestCapability_UnmarshalText(t *testing.T) {
	var c capability.Capability
	if err := json.Unmarshal([]byte(`"filesystem.read:/srv//data/"`), &c); err != nil || c != (capability.Capability{Name: "filesystem.read", Scope: "/srv/data"}) {
		t.Errorf("Unmarshal = %+v, %v", c, err)
	}
	if err := json.Unmarshal([]byte(`"Filesystem.Read"`), &c); !errors.Is(err, capability.ErrInvalid) || c.Name != "filesystem.read" {
		t.Errorf("Unmarshal of an invalid name = %+v, %v; want ErrInvalid and c unchanged", c, err)
	}
}

// Scopes lists the scopes of the grants of one name, in order, and says
// when one of them is unscoped (it covers every scope).
func TestScopes(t *testing.T) {
	grants := []capability.Capability{
		capability.MustParse("filesystem.read:/a"),
		capability.MustParse("filesystem.write:/b"),
		capability.MustParse("filesystem.read:/c"),
	}
	if scopes, all := capability.Scopes(grants, "filesystem.read"); fmt.Sprint(scopes, all) != "[/a /c] false" {
		t.Errorf("Scopes = %q, %v", scopes, all)
	}
	grants = append(grants, capability.MustParse("filesystem.read"))
	if scopes, all := capability.Scopes(grants, "filesystem.read"); fmt.Sprint(scopes, all) != "[/a /c] true" {
		t.Errorf("with an unscoped grant: Scopes = %q, %v", scopes, all)
	}
	if scopes, all := capability.Scopes(grants, "state.read"); scopes != nil || all {
		t.Errorf("no grant of the name: Scopes = %q, %v", scopes, all)
	}
}
