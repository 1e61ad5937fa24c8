// Package gctune sets the garbage collector's target of a process whose
// work is serving MCP.
//
// The MCP SDK decodes every JSON value it reads with a fresh decoder that
// allocates a 32 KiB buffer: about a dozen per tools/call, between the
// reading of the message and the decoding of its params and _meta. That
// garbage, not the call, is most of what an MCP server's collector works
// on, while the heap that lives on is a few MiB. A higher target (GOGC)
// makes the collector run a quarter as often for that garbage, at the
// price of a heap that may grow to five times the live one instead of
// twice.
package gctune

import (
	"os"
	"runtime/debug"
)

// ServerPercent is the target ForServer sets: GOGC=400.
const ServerPercent = 400

// ForServer sets the collector's target to ServerPercent unless $GOGC is
// set (the operator's choice wins), and returns the target in effect.
func ForServer() int {
	if _, set := os.LookupEnv("GOGC"); set {
		old := debug.SetGCPercent(100)
		debug.SetGCPercent(old)
		return old
	}
	debug.SetGCPercent(ServerPercent)
	return ServerPercent
}
