package tools_test

import (
	"testing"

	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/tools"
)

// A tool is read-only when every capability a call of it may require, its
// input capabilities included, is a read: what MCP's readOnlyHint says and
// what spares a call its claim in the runtime.
func TestDeclaration_ReadOnly(t *testing.T) {
	caps := func(s ...string) []capability.Capability {
		var out []capability.Capability
		for _, c := range s {
			out = append(out, capability.MustParse(c))
		}
		return out
	}
	for _, tc := range []struct {
		name     string
		required []capability.Capability
		input    []tools.InputCapability
		want     bool
	}{
		{"no capability", nil, nil, true},
		{"state.read", caps("state.read:ns"), nil, true},
		{"filesystem.read, scoped by the input", nil, []tools.InputCapability{{Name: "filesystem.read", ScopeFrom: "path"}}, true},
		{"both reads", caps("filesystem.read:/srv", "state.read"), nil, true},
		{"state.write", caps("state.read", "state.write:ns"), nil, false},
		{"filesystem.write from the input", caps("filesystem.read"), []tools.InputCapability{{Name: "filesystem.write", ScopeFrom: "path"}}, false},
		{"process.exec", caps("process.exec:git"), nil, false},
		{"a capability of the tool's own", caps("billing.charge"), nil, false},
	} {
		d := tools.Declaration{RequiredCapabilities: tc.required, InputCapabilities: tc.input}
		if got := d.ReadOnly(); got != tc.want {
			t.Errorf("%s: ReadOnly() = %v, want %v", tc.name, got, tc.want)
		}
	}
	seen := 0
	for _, tl := range tools.Builtins() {
		d := tl.Declaration()
		if d.ID != "file.read" && d.ID != "file.write" {
			continue
		}
		seen++
		if got, want := d.ReadOnly(), d.ID == "file.read"; got != want {
			t.Errorf("%s: ReadOnly() = %v, want %v", d.Key(), got, want)
		}
	}
	if seen == 0 {
		t.Error("no built-in file.read or file.write")
	}
}
