package cli

import (
	"fmt"
	"os"
	"slices"

	"github.com/spf13/cobra"

	"github.com/toolgate/toolgate/mcp"
	"github.com/toolgate/toolgate/tools"
)

func newPinCmd(g *globals, stdio Stdio) *cobra.Command {
	return &cobra.Command{
		Use:   "pin SERVER",
		Short: "Print the lines that pin an upstream MCP server's tools, to paste into the registry file after review",
		Long: `Connects to the MCP server SERVER of the registry file (--registry,
$TOOLGATE_REGISTRY), reads its tools and prints, for its entry under
mcp_servers, a version and each tool's schema_sha256. Review the tools
(toolgate describe SERVER.TOOL) before pasting: the pin says these are the
schemas you approved.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := g.registryPath
			if path == "" {
				path = os.Getenv("TOOLGATE_REGISTRY")
			}
			if path == "" {
				return usageErr("pin needs a registry file with mcp_servers (--registry or $TOOLGATE_REGISTRY)")
			}
			var servers []tools.MCPServer
			_, err := tools.LoadRegistryFileWith(path, func(s []tools.MCPServer) ([]tools.Tool, error) {
				servers = s
				return nil, nil // nothing started: only the entries are read
			}, tools.Builtins()...)
			if err != nil {
				return usageErr("--registry: %v", err)
			}
			i := slices.IndexFunc(servers, func(s tools.MCPServer) bool { return s.Name == args[0] })
			if i < 0 {
				var names []string
				for _, s := range servers {
					names = append(names, s.Name)
				}
				return usageErr("no MCP server %q in %s (its servers: %v)", args[0], path, names)
			}
			gw := mcp.NewGateway(&mcp.GatewayOptions{Stderr: g.stderr, Version: "dev"})
			defer gw.Close()
			block, err := gw.PinBlock(servers[i])
			if err != nil {
				return usageErr("%v", err)
			}
			fmt.Fprintf(stdio.Out, "# under the entry of %s in %s:\n%s", args[0], path, block)
			return nil
		},
	}
}
