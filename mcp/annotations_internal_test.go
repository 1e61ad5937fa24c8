package mcp

import (
	"testing"

	"github.com/toolgate/toolgate/tools"
)

// The hints count what some calls require: a tool that writes a file only
// when its input names one is no read-only tool, and a process tool whose
// filesystem.read depends on its cwd still reaches beyond files.
func TestAnnotations_InputCapabilities(t *testing.T) {
	for _, tc := range []struct {
		name                string
		input               []tools.InputCapability
		readOnly, openWorld bool
	}{
		{"reads a named file", []tools.InputCapability{{Name: "filesystem.read", ScopeFrom: "path"}}, true, false},
		{"writes a named file", []tools.InputCapability{{Name: "filesystem.write", ScopeFrom: "path"}}, false, false},
		{"runs a named command", []tools.InputCapability{{Name: "process.exec", ScopeFrom: "command"}}, false, true},
	} {
		a := annotations(tools.Declaration{Name: tc.name, InputCapabilities: tc.input})
		if a.ReadOnlyHint != tc.readOnly || *a.DestructiveHint != !tc.readOnly || *a.OpenWorldHint != tc.openWorld {
			t.Errorf("%s: read-only %v, destructive %v, open world %v; want %v, %v, %v",
				tc.name, a.ReadOnlyHint, *a.DestructiveHint, *a.OpenWorldHint, tc.readOnly, !tc.readOnly, tc.openWorld)
		}
	}
	for _, tl := range tools.ProcessTools()[1:] { // the exec tools: filesystem.read only with a cwd
		if a := annotations(tl.Declaration()); a.ReadOnlyHint || !*a.OpenWorldHint {
			t.Errorf("%s: %+v; want an open-world tool that is not read-only", tl.Declaration().ID, a)
		}
	}
}
