package cli

import "github.com/spf13/cobra"

// newStatsCmd is replaced by the stats command (issue 4).
func newStatsCmd(g *globals, stdio Stdio) *cobra.Command {
	return &cobra.Command{Use: "stats", Short: "Execution statistics from the stored records", Hidden: true}
}
