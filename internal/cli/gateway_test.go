package cli

import (
	"os"
	"strings"
	"testing"
)

// A registry file whose upstream MCP server cannot be started, or is not
// an MCP server, is a usage error naming the server: nothing runs.
func TestRegistry_MCPServerUnavailable(t *testing.T) {
	workdir(t)
	for _, tc := range []struct{ command, want string }{
		{"no-such-mcp-server", `MCP server bad: cannot connect: "no-such-mcp-server" not found in the search path`},
		{"/bin/true", "MCP server bad: cannot connect"},
	} {
		must(t, os.WriteFile("gateway.yaml", []byte("mcp_servers:\n  - name: bad\n    command: "+tc.command+"\n    limits: {max_execution_time: 5s}\n"), 0o600))
		r := toolgate(t, "", "--registry", "gateway.yaml", "run", "bad.x", "--input", "{}")
		if r.code != ExitUsage || !strings.Contains(r.stderr, tc.want) || !strings.Contains(r.stderr, "gateway.yaml:2: mcp_servers") {
			t.Errorf("%s: exit %d\n%s", tc.command, r.code, r.stderr)
		}
		if _, err := os.Stat("state/toolgate.db"); err == nil {
			t.Errorf("%s: the database was created", tc.command)
		}
	}
}
