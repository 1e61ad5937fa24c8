package cli

import "github.com/spf13/cobra"

// newAuditCmd is replaced by the audit commands (issue 4).
func newAuditCmd(g *globals, stdio Stdio) *cobra.Command {
	return &cobra.Command{Use: "audit", Short: "Inspect and verify the audit log", Hidden: true}
}
